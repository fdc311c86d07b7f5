// The page: an HTML shell around the data, the page's script and uPlot.
#include <string>

#include "report/assets.h"
#include "report/report.h"

namespace stallscope::report {
namespace {

// Text for the title element.
std::string html_text(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON safe inside a <script> element: a string holding "</script>" or
// "<!--" cannot end it or change how it is parsed, and U+2028/U+2029 are
// escaped as in JSON-in-JavaScript. Outside strings JSON has none of these
// characters, so escaping them everywhere keeps the JSON the same.
std::string script_safe_json(const nlohmann::json& data) {
  const auto text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xe2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xa8' || text[i + 2] == '\xa9')) {
      out += text[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void write_html(const nlohmann::json& data, std::ostream& out) {
  const std::string title = data.contains("title") && data["title"].is_string()
                                ? data["title"].get<std::string>()
                                : std::string("run");
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>stallscope report — " << html_text(title) << "</title>\n"
      << "<style>" << assets::kUplotCss << "</style>\n"
      << "<style>" << assets::kReportCss << "</style>\n"
      << "</head><body>\n"
         "<noscript>This report draws its findings, charts and tables with JavaScript, which "
         "is off. The same findings: stallscope explain on the run file.</noscript>\n"
         "<div id=\"app\"></div>\n"
         "<script type=\"application/json\" id=\"stallscope-data\">"
      << script_safe_json(data) << "</script>\n"
      << "<script>" << assets::kUplotJs << "</script>\n"
      << "<script>" << assets::kPageUtilJs << "</script>\n"
      << "<script>" << assets::kReportJs << "</script>\n"
      << "</body></html>\n";
}

}  // namespace stallscope::report
