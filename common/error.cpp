#include "common/error.h"

namespace stallscope {

std::string fold_lines(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    if (ch == '\n') {
      out += "; ";
    } else if (ch == '\t') {
      // libpq indents continuation lines with a tab: after "; " it is noise.
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (ch != '\r') {
      out += ch;
    }
  }
  return out;
}

std::string without_nul(std::string text) {
  if (text.find('\0') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size() + 8);
  for (char ch : text) {
    if (ch == '\0') {
      out += "\\x00";
    } else {
      out += ch;
    }
  }
  return out;
}

void throw_usage(std::string message) {
  throw Error(ErrorKind::usage, std::move(message));
}

}  // namespace stallscope
