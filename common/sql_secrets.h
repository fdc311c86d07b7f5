// Masking the passwords that SQL text carries, before text sampled from
// another session (pg_stat_activity.query, pg_stat_statements.query) is
// stored.
#pragma once

#include <string>
#include <string_view>

namespace stallscope {

// `sql` with the passwords it carries replaced by "***":
// - the string constant after a word that ends in "password" (any case, a
//   quoted identifier too): CREATE|ALTER ROLE|USER … [ENCRYPTED] PASSWORD
//   '…', CREATE|ALTER USER MAPPING … OPTIONS (… password '…'), sslpassword
//   '…' — the whole constant, in any spelling ('…', E'…', U&'…', $$…$$,
//   $tag$…$tag$), becomes '***';
// - inside any other string constant, what mask_args masks in a command
//   line: a conninfo's password=…, a URI's user-info secret, NAME=value for
//   a secret NAME (dblink_connect('host=h password=…'), dblink(…),
//   CREATE SUBSCRIPTION … CONNECTION '…'); the constant is then written
//   back as '…' with its quotes doubled.
// Comments and quoted identifiers are copied as they are; a constant cut off
// by the end of the text (track_activity_query_size) runs to the end.
// Idempotent (masking the result again changes nothing: the scan is
// repeated until it changes nothing, a few passes at most) and linear in the
// text's length.
// Example: mask_sql_secrets("ALTER ROLE app PASSWORD 's3cret'") ==
//          "ALTER ROLE app PASSWORD '***'".
std::string mask_sql_secrets(std::string_view sql);

}  // namespace stallscope
