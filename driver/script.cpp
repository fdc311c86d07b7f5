#include "driver/script.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "common/ascii.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/printable.h"
#include "common/sql_secrets.h"
#include "common/units.h"
#include "driver/script_lex.h"

namespace stallscope::driver {

int Script::sql_commands() const {
  return static_cast<int>(std::count_if(commands.begin(), commands.end(), [](const auto& c) {
    return c.kind == ScriptCommand::Kind::sql;
  }));
}

bool Script::has(ScriptCommand::Kind kind) const {
  return std::any_of(commands.begin(), commands.end(),
                     [kind](const ScriptCommand& c) { return c.kind == kind; });
}

std::string source_text(const ScriptCommand& cmd, const Variables& variables) {
  std::string sql;
  for (std::size_t t = 0; t < cmd.text.size(); ++t) {
    sql += cmd.text[t];
    if (t < cmd.vars.size()) sql += ":" + variables.names[static_cast<std::size_t>(cmd.vars[t])];
  }
  return mask_sql_secrets(sql);
}

namespace {

using detail::LexedCommand;

[[noreturn]] void fail(const std::string& file, int line, const std::string& what) {
  throw_usage(fmt::format("cannot parse {}:{}: {}", file, line, what));
}

bool in_ranges(const std::vector<std::pair<std::size_t, std::size_t>>& ranges, std::size_t at) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [at](const auto& r) { return at >= r.first && at < r.second; });
}

// An SQL command, split at its `:name` references as pgbench finds them:
// a ':' and a variable name (a run of "::" is a cast, left alone).
ScriptCommand sql_command(const LexedCommand& lexed, Variables& variables) {
  ScriptCommand c;
  c.kind = ScriptCommand::Kind::sql;
  c.line = lexed.line;
  const std::string& sql = lexed.text;
  std::string text;
  for (std::size_t i = 0; i < sql.size();) {
    if (sql[i] != ':') {
      text += sql[i++];
      continue;
    }
    if (i + 1 < sql.size() && variable_name_char(sql[i + 1]) &&
        !std::isdigit(static_cast<unsigned char>(sql[i + 1]))) {
      std::size_t end = i + 1;
      while (end < sql.size() && variable_name_char(sql[end])) ++end;
      c.text.push_back(std::move(text));
      text.clear();
      c.vars.push_back(variables.slot(std::string_view(sql).substr(i + 1, end - i - 1)));
      c.quoted.push_back(in_ranges(lexed.literal_ranges, i));
      i = end;
      continue;
    }
    while (i < sql.size() && sql[i] == ':') text += sql[i++];
  }
  c.text.push_back(std::move(text));
  for (std::size_t k = 0; k < c.text.size(); ++k) {
    c.numbered += c.text[k];
    if (k >= c.vars.size()) continue;
    if (c.quoted[k]) {
      c.numbered += ":" + variables.names[static_cast<std::size_t>(c.vars[k])];
    } else {
      c.params.push_back(c.vars[k]);
      c.numbered += fmt::format("${}", c.params.size());
    }
  }
  return c;
}

std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const std::size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) words.emplace_back(s.substr(start, i - start));
  }
  return words;
}

// The text after the first word of `args`.
std::string_view after_first_word(std::string_view args) {
  std::size_t i = args.find_first_not_of(" \t\r\f\v");
  if (i == std::string_view::npos) return {};
  while (i < args.size() && !std::isspace(static_cast<unsigned char>(args[i]))) ++i;
  return args.substr(i);
}

// pgbench's limit on the words of \setshell and \shell, the name included
// (an expression has none).
constexpr std::size_t kMaxMetaWords = 256;

// Builds the meta-commands of one script, checking each as pgbench does.
class MetaParser {
 public:
  MetaParser(const std::string& file, Variables& variables, Script& script)
      : file_(file), variables_(variables), script_(script) {}

  void add(const LexedCommand& m) {
    line_ = m.line;
    name_ = m.text;
    const std::string name = common::lowered(m.text);
    const std::vector<std::string> words = split_words(m.args);
    ScriptCommand c;
    c.line = m.line;
    using K = ScriptCommand::Kind;
    if (name == "gset" || name == "aset") {
      store(name == "gset" ? ScriptCommand::Store::gset : ScriptCommand::Store::aset, words);
      return;
    }
    if (name == "set") {
      if (words.empty()) error("missing argument");
      c.kind = K::set;
      c.target = target(words[0]);
      if (words.size() < 2) error("syntax error: the expression is missing");
      c.expr = expression(after_first_word(m.args));
    } else if (name == "sleep") {
      sleep(words, c);
    } else if (name == "setshell" || name == "shell") {
      c.kind = name == "shell" ? K::shell : K::setshell;
      std::size_t first = 0;
      if (c.kind == K::setshell) {
        if (words.empty()) error("missing argument");
        c.target = target(words[0]);
        first = 1;
      }
      // pgbench's words: \shell alone lacks its command, \setshell VAR an argument.
      if (words.size() <= first) error(c.kind == K::shell ? "missing command" : "missing argument");
      if (words.size() >= kMaxMetaWords) error("too many arguments");
      for (std::size_t k = first; k < words.size(); ++k) {
        const std::string& w = words[k];
        c.words.push_back(w);
        const bool var = w.size() > 1 && w[0] == ':' && w[1] != ':';
        c.word_vars.push_back(var ? variables_.slot(std::string_view(w).substr(1)) : -1);
      }
    } else if (name == "if" || name == "elif") {
      c.kind = name == "if" ? K::if_ : K::elif;
      if (words.empty()) error("syntax error: a condition is missing");
      c.expr = expression(m.args);
      conditional(c);
    } else if (name == "else" || name == "endif") {
      c.kind = name == "else" ? K::else_ : K::endif;
      if (!words.empty()) error("unexpected argument");
      conditional(c);
    } else if (name == "startpipeline" || name == "syncpipeline" || name == "endpipeline") {
      c.kind = name == "startpipeline"  ? K::start_pipeline
               : name == "syncpipeline" ? K::sync_pipeline
                                        : K::end_pipeline;
      if (!words.empty()) error("unexpected argument");
    } else {
      fail(file_, line_, fmt::format("invalid command \\{}", common::printable(m.text)));
    }
    script_.commands.push_back(std::move(c));
  }

  void add_sql(ScriptCommand c) { script_.commands.push_back(std::move(c)); }

  void finish() {
    if (!open_.empty()) {
      const auto& first = script_.commands[open_.back().front()];
      fail(file_, first.line, "\\if without matching \\endif");
    }
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(file_, line_, fmt::format("\\{}: {}", common::printable(name_), what));
  }

  int target(const std::string& name) {
    if (!valid_variable_name(name)) error(fmt::format("invalid variable name: \"{}\"", name));
    return variables_.slot(name);
  }

  std::shared_ptr<const Expr> expression(std::string_view text) {
    try {
      return parse_expr(text, variables_);
    } catch (const ExprSyntaxError& e) {
      const std::string_view trimmed =
          text.substr(std::min(text.size(), text.find_first_not_of(" \t")));
      const std::size_t lead = text.size() - trimmed.size();
      const std::size_t at = e.offset() > lead ? e.offset() - lead : 0;
      std::string_view rest = trimmed.substr(std::min(at, trimmed.size()));
      std::string shown(rest.substr(0, 40));
      if (rest.size() > 40) shown += "…";
      error(fmt::format(
          "{}, at {}", e.what(),
          rest.empty() ? fmt::format("the end of \"{}\"", common::printable(trimmed.substr(0, 40)))
                       : fmt::format("\"{}\"", common::printable(shown))));
    }
  }

  // \sleep N [unit], \sleep Nunit, \sleep :var [unit]: an integer or a
  // variable, as pgbench (no expression).
  void sleep(const std::vector<std::string>& words, ScriptCommand& c) {
    c.kind = ScriptCommand::Kind::sleep;
    if (words.empty()) error("missing argument");
    if (words.size() > 2) error("too many arguments");
    std::string count = words[0];
    std::string unit = words.size() > 1 ? words[1] : "";
    if (count[0] == ':') {
      if (!valid_variable_name(std::string_view(count).substr(1))) {
        error(fmt::format("invalid sleep time, must be an integer ({})", count));
      }
      c.sleep_var = variables_.slot(std::string_view(count).substr(1));
    } else {
      std::size_t k = count[0] == '+' || count[0] == '-' ? 1 : 0;
      const std::size_t digits = k;
      while (k < count.size() && std::isdigit(static_cast<unsigned char>(count[k]))) ++k;
      if (k == digits) error(fmt::format("invalid sleep time, must be an integer ({})", count));
      if (k < count.size()) {
        if (words.size() > 1)
          error(fmt::format("invalid sleep time, must be an integer ({})", count));
        unit = count.substr(k);
        count.resize(k);
      }
      // As atoi: digits past an int are out of range here, not wrapped.
      const auto n = common::parse_int64(count[0] == '+' ? count.substr(1) : count);
      if (!n || *n > 0x7fffffff || *n < -0x7fffffff) {
        error(fmt::format("invalid sleep time, must be an integer ({})", count));
      }
      c.sleep_count = *n;
    }
    const std::string lower = common::lowered(unit);
    if (lower == "us") {
      c.unit_ns = common::kNsPerUs;
    } else if (lower == "ms") {
      c.unit_ns = common::kNsPerMs;
    } else if (lower == "s" || lower.empty()) {
      c.unit_ns = common::kNsPerS;
    } else {
      error(fmt::format("unrecognized time unit, must be us, ms or s ({})", unit));
    }
    if (c.sleep_var < 0) {
      try {
        sleep_ns(c.sleep_count, c.unit_ns);
      } catch (const Error& e) {
        fail(file_, line_, e.what());
      }
    }
  }

  void store(ScriptCommand::Store kind, const std::vector<std::string>& words) {
    const char* name = kind == ScriptCommand::Store::gset ? "\\gset" : "\\aset";
    if (words.size() > 1) error("too many arguments");
    if (script_.commands.empty() || script_.commands.back().kind != ScriptCommand::Kind::sql ||
        script_.commands.back().store != ScriptCommand::Store::none) {
      fail(file_, line_, fmt::format("{} must follow an SQL command", name));
    }
    ScriptCommand& sql = script_.commands.back();
    sql.store = kind;
    sql.store_prefix = words.empty() ? "" : words[0];
  }

  // \if … \elif … \else … \endif: checks the nesting, links the branches.
  void conditional(ScriptCommand& c) {
    using K = ScriptCommand::Kind;
    const std::size_t index = script_.commands.size();
    if (c.kind == K::if_) {
      open_.push_back({index});
      return;
    }
    const char* what = c.kind == K::elif ? "\\elif" : c.kind == K::else_ ? "\\else" : "\\endif";
    if (open_.empty()) fail(file_, line_, fmt::format("{} without matching \\if", what));
    std::vector<std::size_t>& group = open_.back();
    const bool after_else = script_.commands[group.back()].kind == K::else_;
    if (after_else && c.kind != K::endif) {
      fail(file_, line_, fmt::format("{} after \\else", what));
    }
    script_.commands[group.back()].next_branch = index;
    if (c.kind != K::endif) {
      group.push_back(index);
      return;
    }
    for (std::size_t k : group) script_.commands[k].endif = index;
    open_.pop_back();
  }

  const std::string& file_;
  Variables& variables_;
  Script& script_;
  int line_ = 0;
  std::string name_;
  std::vector<std::vector<std::size_t>> open_;  // per open \if: its branches' commands
};

// Refuses a NUL byte and bytes that are not UTF-8, naming the line and
// column: libpq sends SQL as C strings, so a NUL byte would end the text
// there (select 1;\0select 2; ran only the first, a file of NUL bytes ran
// empty queries), and a UTF-8 database refuses invalid UTF-8 anyway.
void check_script_bytes(std::string_view text, const std::string& file) {
  int line_no = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n') {
      ++line_no;
      line_start = ++i;
    } else if (byte == 0) {
      fail(file, line_no,
           fmt::format(
               "a NUL byte at byte {} of the line: a script is text, and SQL cannot hold one",
               i - line_start + 1));
    } else if (byte < 0x80) {
      ++i;
    } else if (const auto n = common::utf8_sequence_bytes(text.substr(i)); n > 0) {
      i += n;
    } else {
      fail(file, line_no,
           fmt::format(
               "invalid UTF-8 (byte \\x{:02x}) at byte {} of the line: a script must be UTF-8",
               byte, i - line_start + 1));
    }
  }
}

}  // namespace

Script parse_script(std::string_view text, const std::string& file, Variables& variables) {
  check_script_bytes(text, file);
  Script script;
  script.name = file;
  MetaParser meta(file, variables, script);
  for (const auto& lexed : detail::lex_script(text, file)) {
    if (lexed.kind == LexedCommand::Kind::sql) {
      meta.add_sql(sql_command(lexed, variables));
    } else {
      meta.add(lexed);
    }
  }
  meta.finish();
  if (script.commands.empty()) {
    throw_usage(
        fmt::format("cannot parse {}: empty command list (no SQL and no meta-command)", file));
  }
  return script;
}

std::int64_t sleep_ns(std::int64_t count, std::int64_t unit_ns) {
  if (count <= 0) return 0;
  if (count > kMaxSleepNs / unit_ns) {
    const char* unit = unit_ns == common::kNsPerUs   ? "us"
                       : unit_ns == common::kNsPerMs ? "ms"
                                                     : "s";
    throw_usage(fmt::format("cannot evaluate \\sleep: {} {} is out of range (at most {} {})", count,
                            unit, kMaxSleepNs / unit_ns, unit));
  }
  return count * unit_ns;
}

Script builtin_script(const std::string& given, Variables& variables) {
  // As pgbench: a unique prefix names a built-in ("-b select", "-b tpcb").
  std::string name = given;
  int matches = 0;
  for (const char* b : {"tpcb-like", "simple-update", "select-only"}) {
    if (std::string_view(b).starts_with(given) && !given.empty()) {
      name = b;
      ++matches;
    }
  }
  if (matches > 1) {
    throw_usage(fmt::format(
        "cannot use built-in script '{}': ambiguous, say tpcb-like, simple-update or select-only",
        given));
  }
  variables.slot("scale");
  const char* text = nullptr;
  if (name == "select-only") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n";
  } else if (name == "tpcb-like") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "\\set bid random(1, 1 * :scale)\n"
        "\\set tid random(1, 10 * :scale)\n"
        "\\set delta random(-5000, 5000)\n"
        "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n"
        "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n"
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
        ":delta, CURRENT_TIMESTAMP);\n"
        "END;\n";
  } else if (name == "simple-update") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "\\set bid random(1, 1 * :scale)\n"
        "\\set tid random(1, 10 * :scale)\n"
        "\\set delta random(-5000, 5000)\n"
        "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
        ":delta, CURRENT_TIMESTAMP);\n"
        "END;\n";
  } else {
    throw_usage(fmt::format(
        "cannot use built-in script '{}': expected tpcb-like, simple-update or select-only (-b)",
        given));
  }
  return parse_script(text, "builtin: " + name, variables);
}

std::pair<std::string, int> split_weight(const std::string& spec) {
  auto at = spec.rfind('@');
  if (at == std::string::npos) return {spec, 1};
  std::string w = spec.substr(at + 1);
  if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 9) {
    throw_usage(
        fmt::format("cannot use script weight '{}' in '{}': expected an integer ≥ 0", w, spec));
  }
  // At most nine digits: always an int.
  return {spec.substr(0, at), *common::parse_int(w)};
}

}  // namespace stallscope::driver
