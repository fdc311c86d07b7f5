#include "driver/script_lex.h"

#include <cctype>

#include <fmt/format.h>

#include "common/ascii.h"
#include "common/error.h"

namespace stallscope::driver::detail {
namespace {

bool ident_start(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalpha(u) || c == '_';
}
bool ident_char(char c) {
  return ident_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '$';
}
bool space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

class Lexer {
 public:
  Lexer(std::string_view s, const std::string& file) : s_(s), file_(file) {}

  std::vector<LexedCommand> run() {
    while (i_ < s_.size()) step();
    end_sql();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw_usage(fmt::format("cannot parse {}:{}: {}", file_, line, what));
  }

  // Appends s_[from, to) to the command, counting its line breaks.
  void append(std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to; ++k) {
      if (!started_ && !space(s_[k])) {
        started_ = true;
        buf_line_ = line_;
      }
      if (s_[k] == '\n') ++line_;
      buf_ += s_[k];
    }
  }
  void literal(std::size_t from, std::size_t to) {
    const std::size_t begin = buf_.size();
    append(from, to);
    ranges_.emplace_back(begin, buf_.size());
  }

  void step() {
    const char c = s_[i_];
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    const char prev = i_ > 0 ? s_[i_ - 1] : '\0';
    if (c == '\'') {
      // E'…' (its E is already in the command) takes backslash escapes.
      const bool escapes = (prev == 'e' || prev == 'E') && (i_ < 2 || !ident_char(s_[i_ - 2]));
      quoted('\'', escapes, "unterminated quoted string");
    } else if (c == '"') {
      quoted('"', false, "unterminated quoted identifier");
    } else if (c == '$' && !ident_char(prev) && dollar_quote()) {
    } else if (c == '-' && next == '-') {
      std::size_t end = s_.find('\n', i_);
      if (end == std::string_view::npos) end = s_.size();
      if (started_) literal(i_, end);  // a leading comment is dropped, as psql does
      i_ = end;
    } else if (c == '/' && next == '*') {
      block_comment();
    } else if (c == '(') {
      ++paren_depth_;
      append(i_, i_ + 1);
      ++i_;
    } else if (c == ')') {
      if (paren_depth_ > 0) --paren_depth_;
      append(i_, i_ + 1);
      ++i_;
    } else if (c == ';') {
      ++i_;
      if (paren_depth_ == 0 && begin_depth_ == 0) {
        end_sql();
      } else {
        append(i_ - 1, i_);
      }
    } else if (c == '\\' && (next == ';' || next == ':')) {
      append(i_ + 1, i_ + 2);  // \; and \: put the character itself in the command
      i_ += 2;
    } else if (c == '\\') {
      meta_command();
    } else if (ident_start(c) && !ident_char(prev)) {
      word();
    } else {
      append(i_, i_ + 1);
      ++i_;
    }
  }

  void quoted(char quote, bool escapes, const char* unterminated) {
    const int start_line = line_;
    std::size_t k = i_ + 1;
    for (;;) {
      if (k >= s_.size()) fail(start_line, unterminated);
      if (escapes && s_[k] == '\\') {
        k += 2;
        continue;
      }
      if (s_[k] == quote) {
        if (k + 1 < s_.size() && s_[k + 1] == quote) {
          k += 2;
          continue;
        }
        break;
      }
      ++k;
    }
    literal(i_, k + 1);
    i_ = k + 1;
  }

  // $tag$ … $tag$ (tag empty or an identifier without '$'); false when the
  // '$' starts no such delimiter ($1, a lone '$').
  bool dollar_quote() {
    std::size_t k = i_ + 1;
    if (k < s_.size() && ident_start(s_[k])) {
      ++k;
      while (k < s_.size() && ident_char(s_[k]) && s_[k] != '$') ++k;
    }
    if (k >= s_.size() || s_[k] != '$') return false;
    const std::string_view tag = s_.substr(i_, k - i_ + 1);
    const std::size_t close = s_.find(tag, k + 1);
    if (close == std::string_view::npos) fail(line_, "unterminated dollar-quoted string");
    literal(i_, close + tag.size());
    i_ = close + tag.size();
    return true;
  }

  void block_comment() {
    const int start_line = line_;
    int depth = 0;
    std::size_t k = i_;
    do {
      if (k + 1 >= s_.size()) fail(start_line, "unterminated /* comment");
      if (s_[k] == '/' && s_[k + 1] == '*') {
        ++depth;
        k += 2;
      } else if (s_[k] == '*' && s_[k + 1] == '/') {
        --depth;
        k += 2;
      } else {
        ++k;
      }
    } while (depth > 0);
    literal(i_, k);
    i_ = k;
  }

  // An identifier or keyword: tracks CREATE FUNCTION … BEGIN ATOMIC … END,
  // whose inner ';' do not end the command.
  void word() {
    std::size_t k = i_;
    while (k < s_.size() && ident_char(s_[k])) ++k;
    const std::string_view w = s_.substr(i_, k - i_);
    ++words_;
    if (words_ == 1) creating_ = common::iequals(w, "create");
    if (creating_ && (common::iequals(w, "function") || common::iequals(w, "procedure")))
      routine_ = true;
    if (routine_ && common::iequals(w, "begin")) {
      ++begin_depth_;
    } else if (begin_depth_ > 0 && common::iequals(w, "case")) {
      ++begin_depth_;
    } else if (begin_depth_ > 0 && common::iequals(w, "end")) {
      --begin_depth_;
    }
    append(i_, k);
    i_ = k;
  }

  void meta_command() {
    end_sql();
    LexedCommand m;
    m.kind = LexedCommand::Kind::meta;
    m.line = line_;
    std::size_t k = i_ + 1;
    while (k < s_.size() && !space(s_[k]) && s_[k] != '\\') ++k;
    m.text.assign(s_.substr(i_ + 1, k - i_ - 1));
    // Its arguments run to the end of the line; "\" + line break continues it.
    for (;;) {
      if (k >= s_.size()) break;
      const char c = s_[k];
      if (c == '\n') {
        ++line_;
        ++k;
        break;
      }
      if (c == '\\' && k + 1 < s_.size() &&
          (s_[k + 1] == '\n' || (s_[k + 1] == '\r' && k + 2 < s_.size() && s_[k + 2] == '\n'))) {
        m.args += ' ';
        k += s_[k + 1] == '\r' ? 3 : 2;
        ++line_;
        continue;
      }
      m.args += c;
      ++k;
    }
    while (!m.args.empty() && space(m.args.back())) m.args.pop_back();
    i_ = k;
    out_.push_back(std::move(m));
  }

  // The command collected so far, if it holds more than white space: a
  // command of nothing but a /* */ comment is one too, as psql and pgbench
  // have it (the server answers it with an empty query response).
  void end_sql() {
    if (started_) {
      LexedCommand c;
      c.kind = LexedCommand::Kind::sql;
      c.line = buf_line_;
      const std::size_t begin = buf_.find_first_not_of(" \t\r\n\f\v");
      const std::size_t end = buf_.find_last_not_of(" \t\r\n\f\v") + 1;
      c.text = buf_.substr(begin, end - begin);
      for (auto [b, e] : ranges_) {
        if (e > begin && b < end) {
          c.literal_ranges.emplace_back(std::max(b, begin) - begin, std::min(e, end) - begin);
        }
      }
      out_.push_back(std::move(c));
    }
    buf_.clear();
    ranges_.clear();
    started_ = false;
    paren_depth_ = 0;
    begin_depth_ = 0;
    words_ = 0;
    creating_ = routine_ = false;
  }

  std::string_view s_;
  const std::string& file_;
  std::size_t i_ = 0;
  int line_ = 1;
  std::vector<LexedCommand> out_;
  // The SQL command being collected.
  std::string buf_;
  int buf_line_ = 0;
  bool started_ = false;  // something other than white space is in buf_
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;
  int paren_depth_ = 0;
  int begin_depth_ = 0;
  int words_ = 0;
  bool creating_ = false, routine_ = false;
};

}  // namespace

std::vector<LexedCommand> lex_script(std::string_view text, const std::string& file) {
  return Lexer(text, file).run();
}

}  // namespace stallscope::driver::detail
