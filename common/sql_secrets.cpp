#include "common/sql_secrets.h"

#include <cstddef>
#include <optional>

#include "common/ascii.h"
#include "common/conninfo.h"

namespace stallscope {
namespace {

// Passes of mask_sql_secrets at most (two have sufficed for every input seen).
constexpr int kMaxMaskPasses = 4;

// Characters of an unquoted SQL word (identifiers and keywords; bytes of
// multibyte characters included), as PostgreSQL's scanner takes them.
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_word_start(char c) {
  return is_word_char(c) && c != '$' && !(c >= '0' && c <= '9');
}
// Whether `word` ends in "password", any case (PASSWORD, sslpassword).
bool names_password(std::string_view word) {
  constexpr std::string_view kPassword = "password";
  if (word.size() < kPassword.size()) return false;
  const auto tail = word.substr(word.size() - kPassword.size());
  for (std::size_t i = 0; i < tail.size(); ++i) {
    if (common::to_lower(tail[i]) != kPassword[i]) return false;
  }
  return true;
}

// Dollar-quote tags longer than this are not taken as tags (PostgreSQL's
// identifiers stop at 63 bytes), so finding the closing tag stays linear.
constexpr std::size_t kMaxDollarTagBytes = 63;

// A string constant of the text: [from, to), its value (quotes undone,
// approximately for E'…' escapes: enough to find a secret in it).
struct Constant {
  std::size_t from = 0;
  std::size_t to = 0;
  std::string value;
};

class SqlScanner {
 public:
  explicit SqlScanner(std::string_view sql) : sql_(sql) {}

  std::string mask() {
    std::string out;
    out.reserve(sql_.size());
    // Whether the last token before whitespace and comments was a word
    // ending in "password", or a constant masked after one.
    bool after_password = false;
    std::size_t i = 0;
    const std::size_t n = sql_.size();
    while (i < n) {
      const char c = sql_[i];
      if (c == '-' && i + 1 < n && sql_[i + 1] == '-') {
        const auto end = sql_.find('\n', i);
        const auto to = end == std::string_view::npos ? n : end;
        out += sql_.substr(i, to - i);
        i = to;
        continue;
      }
      if (c == '/' && i + 1 < n && sql_[i + 1] == '*') {
        const auto to = comment_end(i);
        out += sql_.substr(i, to - i);
        i = to;
        continue;
      }
      if (std::optional<Constant> k = constant_at(i)) {
        if (after_password) {
          // And the constants that continue it ('sec'<newline>'ret' is one).
          out += "'***'";
          i = k->to;
          continue;
        }
        const std::string masked = mask_conninfo_message(k->value, "");
        if (masked == k->value) {
          out += sql_.substr(k->from, k->to - k->from);
        } else {
          out += quoted(masked);
        }
        after_password = false;
        i = k->to;
        continue;
      }
      if (c == '"') {
        const auto to = quoted_identifier_end(i);
        out += sql_.substr(i, to - i);
        after_password = names_password(sql_.substr(i + 1, to > i + 1 ? to - i - 2 : 0));
        i = to;
        continue;
      }
      if (is_word_start(c)) {
        std::size_t to = i;
        while (to < n && is_word_char(sql_[to])) ++to;
        out += sql_.substr(i, to - i);
        after_password = names_password(sql_.substr(i, to - i));
        i = to;
        continue;
      }
      if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')) {
        after_password = false;
      }
      out += c;
      ++i;
    }
    return out;
  }

 private:
  // Just past a /* … */ comment starting at `at` (they nest), or the end.
  std::size_t comment_end(std::size_t at) const {
    int depth = 0;
    std::size_t i = at;
    while (i + 1 < sql_.size()) {
      if (sql_[i] == '/' && sql_[i + 1] == '*') {
        ++depth;
        i += 2;
      } else if (sql_[i] == '*' && sql_[i + 1] == '/') {
        i += 2;
        if (--depth == 0) return i;
      } else {
        ++i;
      }
    }
    return sql_.size();
  }
  // Just past a "quoted identifier" starting at `at` ("" inside), or the end.
  std::size_t quoted_identifier_end(std::size_t at) const {
    for (std::size_t i = at + 1; i < sql_.size(); ++i) {
      if (sql_[i] != '"') continue;
      if (i + 1 < sql_.size() && sql_[i + 1] == '"') {
        ++i;
      } else {
        return i + 1;
      }
    }
    return sql_.size();
  }
  // The string constant starting at `at`: '…', E'…', U&'…', N'…', $tag$…$tag$.
  std::optional<Constant> constant_at(std::size_t at) const {
    // Called at a token's start only: name$tag$ and abcE'x' were taken
    // as words before.
    std::size_t quote = at;
    bool escapes = false;
    const char c = sql_[at];
    if ((c == 'e' || c == 'E') && at + 1 < sql_.size() && sql_[at + 1] == '\'') {
      escapes = true;
      quote = at + 1;
    } else if ((c == 'n' || c == 'N') && at + 1 < sql_.size() && sql_[at + 1] == '\'') {
      quote = at + 1;
    } else if ((c == 'u' || c == 'U') && at + 2 < sql_.size() && sql_[at + 1] == '&' &&
               sql_[at + 2] == '\'') {
      quote = at + 2;
    } else if (c == '$') {
      return dollar_constant(at);
    } else if (c != '\'') {
      return std::nullopt;
    }
    Constant k{.from = at};
    std::size_t i = quote + 1;
    for (; i < sql_.size(); ++i) {
      const char d = sql_[i];
      if (escapes && d == '\\' && i + 1 < sql_.size()) {
        k.value += sql_[++i];
      } else if (d == '\'') {
        if (i + 1 < sql_.size() && sql_[i + 1] == '\'') {
          k.value += '\'';
          ++i;
        } else {
          break;
        }
      } else {
        k.value += d;
      }
    }
    k.to = i < sql_.size() ? i + 1 : sql_.size();
    return k;
  }
  // $tag$…$tag$ starting at `at` (the tag may be empty), or nothing ($1).
  std::optional<Constant> dollar_constant(std::size_t at) const {
    std::size_t i = at + 1;
    if (i < sql_.size() && sql_[i] != '$') {
      if (!is_word_start(sql_[i])) return std::nullopt;
      while (i < sql_.size() && is_word_char(sql_[i]) && sql_[i] != '$') ++i;
    }
    if (i >= sql_.size() || sql_[i] != '$' || i - at - 1 > kMaxDollarTagBytes) return std::nullopt;
    const auto tag = sql_.substr(at, i + 1 - at);
    const auto body = i + 1;
    const auto close = sql_.find(tag, body);
    Constant k{.from = at};
    if (close == std::string_view::npos) {
      k.value = std::string(sql_.substr(body));
      k.to = sql_.size();
    } else {
      k.value = std::string(sql_.substr(body, close - body));
      k.to = close + tag.size();
    }
    return k;
  }
  // `value` as a standard string constant: '…' with its quotes doubled.
  static std::string quoted(std::string_view value) {
    std::string out = "'";
    for (char c : value) {
      if (c == '\'') out += '\'';
      out += c;
    }
    return out + "'";
  }

  std::string_view sql_;
};

}  // namespace

std::string mask_sql_secrets(std::string_view sql) {
  // One pass can leave text a second pass masks further (a masked header
  // inside a dollar-quoted constant, rewritten as '…', can move where the
  // next constant ends): passes until nothing changes, at most a few.
  std::string out = SqlScanner(sql).mask();
  for (int pass = 1; pass < kMaxMaskPasses; ++pass) {
    std::string again = SqlScanner(out).mask();
    if (again == out) break;
    out = std::move(again);
  }
  return out;
}

}  // namespace stallscope
