// Splitting a pgbench script into its commands, with psql's lexing rules as
// pgbench uses them: an SQL command ends at a ';' outside quotes, comments
// and parentheses ('…' and E'…' strings, "…" identifiers, $tag$…$tag$
// bodies, -- and nested /* */ comments, CREATE FUNCTION … BEGIN ATOMIC …
// END), may span lines, and `\;` puts a ';' into it without ending it (a
// compound command); a backslash outside quotes starts a meta-command, which
// ends the SQL before it and runs to the end of its line (a backslash right
// before a line break continues it). Internal to driver/ (script.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stallscope::driver::detail {

struct LexedCommand {
  enum class Kind { sql, meta };
  Kind kind = Kind::sql;
  int line = 0;  // 1-based line of its first character (a meta-command's backslash)
  // sql: the command's text without its terminating ';' and without the
  // white space around it; meta: the command's name ("set").
  std::string text;
  // meta: the rest of its line, continuation lines joined (the backslash and
  // line break become spaces).
  std::string args;
  // sql: byte ranges [begin, end) of `text` inside quotes or comments.
  std::vector<std::pair<std::size_t, std::size_t>> literal_ranges;
};

// Throws Error(usage) "cannot parse FILE:LINE: …" for a quote or comment
// that the file leaves open.
std::vector<LexedCommand> lex_script(std::string_view text, const std::string& file);

}  // namespace stallscope::driver::detail
