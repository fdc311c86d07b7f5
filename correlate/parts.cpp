#include "correlate/parts.h"

namespace stallscope::correlate {

std::string_view part_name(Part part) {
  return kPartSpellings[static_cast<std::size_t>(part)].name;
}

std::string part_id(Part part, std::string_view key) {
  std::string id(part_name(part));
  if (kPartSpellings[static_cast<std::size_t>(part)].keyed) {
    id += ':';
    id += key;
  }
  return id;
}

std::optional<Part> part_of(std::string_view id) {
  const auto colon = id.find(':');
  const auto family = id.substr(0, colon);
  for (const auto& s : kPartSpellings) {
    if (s.name == family && s.keyed == (colon != std::string_view::npos)) return s.part;
  }
  return std::nullopt;
}

std::string part_label(std::string_view id) {
  const auto part = part_of(id);
  if (!part) return std::string(id);
  const auto& s = kPartSpellings[static_cast<std::size_t>(*part)];
  if (s.label.empty()) return std::string(id);
  if (!s.keyed) return std::string(s.label);
  return std::string(s.label) + " " + std::string(id.substr(s.name.size() + 1));
}

}  // namespace stallscope::correlate
