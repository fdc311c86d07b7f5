#include "common/conninfo.h"

#include "common/ascii.h"
#include "common/sql_secrets.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "common/error.h"

namespace stallscope {
namespace {

using common::lowered;
using common::to_lower;

bool is_uri(const std::string& s) {
  return s.rfind("postgresql://", 0) == 0 || s.rfind("postgres://", 0) == 0;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
// Characters of a key's, option's or header's name: PGPASSWORD, --client-secret, X-Api-Key.
bool is_name_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == '.';
}
bool is_quote(char c) {
  return c == '\'' || c == '"';
}

// A name's parts, lower case, split at '-', '_' and '.', leading dashes dropped:
// "--Client-Secret" → {"client", "secret"}.
std::vector<std::string> name_parts(std::string_view name) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (!part.empty()) parts.push_back(std::move(part));
      part.clear();
    } else {
      part += to_lower(c);
    }
  }
  if (!part.empty()) parts.push_back(std::move(part));
  return parts;
}

// Whether a value whose name has these `parts` (name_parts) is a secret: the
// parts joined end in password, passwd, passphrase, secret, token, apikey,
// accesskey or secretkey (PGPASSWORD, --client-secret, AWS_SECRET_ACCESS_KEY), or its
// last part is "pass" (--pass, DB_PASS) or, after another part, "pwd"
// (MYSQL_PWD; not the shell's PWD and OLDPWD, which are directories).
// --key, --key-file, --password-file, --token-limit are not.
bool is_secret_name(const std::vector<std::string>& parts) {
  if (parts.empty()) return false;
  std::string joined;
  for (const auto& p : parts) joined += p;
  static constexpr std::string_view kEndings[] = {"password", "passwd", "passphrase", "secret",
                                                  "token",    "apikey", "accesskey",  "secretkey"};
  for (auto e : kEndings) {
    if (joined.ends_with(e)) return true;
  }
  return parts.back() == "pass" || (parts.back() == "pwd" && parts.size() > 1);
}

// An option whose next word or argument is its secret: -NAME or --NAME
// (letters first, no '=') with a secret name, except the switches --no-…,
// --skip-… and --ask-… (--no-password, ansible's --ask-pass).
bool is_secret_option(std::string_view word) {
  std::size_t dashes = 0;
  while (dashes < word.size() && dashes < 2 && word[dashes] == '-') ++dashes;
  if (dashes == 0 || dashes == word.size()) return false;
  const auto name = word.substr(dashes);
  if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z'))) return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  const auto parts = name_parts(name);
  if (parts.front() == "no" || parts.front() == "skip" || parts.front() == "ask") return false;
  return is_secret_name(parts);
}

// Programs with an option whose value is a password though its name does
// not say so (psql's and pgbench's -p is a port; these are not).
enum class Program {
  other,
  mysql,         // mysql*, mariadb*, mariabackup*: -pSECRET
  sshpass,       // -pSECRET, -p SECRET
  redis,         // redis-cli, valkey-cli, keydb-cli: -a SECRET
  curl,          // -u / --user / -U / --proxy-user USER:SECRET (also -uUSER:SECRET, --user=…)
  openssl,       // -passin / -passout SECRET (pass:…, env:…), enc's -k SECRET and -K KEY
  docker,        // docker, podman, nerdctl: named, not yet its login command
  docker_login,  // docker login -p SECRET (docker run's -p is a port)
  sqlcmd,        // sqlcmd, bcp: -P SECRET (also -PSECRET)
  ldap,          // ldapsearch, ldapmodify, … (OpenLDAP's clients): -w SECRET (also -wSECRET)
  mongo,         // mongosh, mongo, mongodump, …: -p SECRET
  smb,           // smbclient, smbcacls, smbget, rpcclient, …: -U USER%SECRET (also --user=…)
};

// The program a word names: a program (any path; quotes and the shell's
// punctuation around it dropped: ( ) { } ; & | ` < > !) whose name holds only
// letters, digits, '-' and '_' — mysqlimport, mariadb-dump, "mysql",
// /usr/bin/sshpass; not the files mysql.db or mysql_init.sql, nor
// mariadb_PWD=*** (no other character is dropped, so that masking a word
// never makes it name a program). Program::other for any other word.
Program program_named(std::string_view word) {
  auto around = [](char c) {
    return is_quote(c) || std::string_view("(){};&|`<>!").find(c) != std::string_view::npos;
  };
  while (!word.empty() && around(word.front())) word.remove_prefix(1);
  while (!word.empty() && around(word.back())) word.remove_suffix(1);
  if (const auto slash = word.find_last_of('/'); slash != std::string_view::npos) {
    word.remove_prefix(slash + 1);
  }
  if (word.empty() ||
      !std::ranges::all_of(word, [](char c) { return is_alnum(c) || c == '-' || c == '_'; })) {
    return Program::other;
  }
  if (word.starts_with("mysql") || word.starts_with("mariadb") || word.starts_with("mariabackup")) {
    return Program::mysql;
  }
  if (word == "sshpass") return Program::sshpass;
  if (word == "redis-cli" || word == "valkey-cli" || word == "keydb-cli") return Program::redis;
  if (word == "curl") return Program::curl;
  if (word == "openssl") return Program::openssl;
  if (word == "docker" || word == "podman" || word == "nerdctl") return Program::docker;
  if (word == "sqlcmd" || word == "bcp") return Program::sqlcmd;
  if (word.starts_with("ldap")) return Program::ldap;
  if (word.starts_with("mongo")) return Program::mongo;
  if (word.starts_with("smb") || word == "rpcclient") return Program::smb;
  return Program::other;
}

// How much of an option's value is its secret.
enum class SecretValue {
  none,
  whole,          // --password S3cret
  after_colon,    // curl -u user:S3cret (a value without ':' holds no secret)
  after_percent,  // smbclient -U user%S3cret (a value without '%' holds no secret)
};

// The option `word` of `program` whose next word or argument is (or holds)
// its secret; SecretValue::none for any other.
SecretValue program_option(Program program, std::string_view word) {
  switch (program) {
    case Program::sshpass:
      return word == "-p" ? SecretValue::whole : SecretValue::none;
    case Program::redis:
      return word == "-a" ? SecretValue::whole : SecretValue::none;
    case Program::openssl:
      return word == "-passin" || word == "-passout" || word == "-k" || word == "-K"
                 ? SecretValue::whole
                 : SecretValue::none;
    case Program::docker_login:
    case Program::mongo:
      return word == "-p" ? SecretValue::whole : SecretValue::none;
    case Program::sqlcmd:
      return word == "-P" ? SecretValue::whole : SecretValue::none;
    case Program::ldap:
      return word == "-w" ? SecretValue::whole : SecretValue::none;
    case Program::smb:
      return word == "-U" || word == "--user" ? SecretValue::after_percent : SecretValue::none;
    case Program::curl:
      return word == "-u" || word == "--user" || word == "-U" || word == "--proxy-user"
                 ? SecretValue::after_colon
                 : SecretValue::none;
    default:
      return SecretValue::none;
  }
}

// Where the secret of `word`, an option of `program` with its value
// attached, starts: -pS3cret of MySQL clients, sshpass and docker login,
// sqlcmd's -PS3cret and ldapsearch's -wS3cret (2), curl's -uUSER:S3cret and
// --user=USER:S3cret (past the first ':' of the value), smbclient's
// -UUSER%S3cret and --user=USER%S3cret (past the first '%'); npos for any
// other word.
std::size_t attached_secret_from(Program program, std::string_view word) {
  const auto attached = [&](std::string_view option) {
    return word.size() > option.size() && word.starts_with(option);
  };
  if ((program == Program::mysql || program == Program::sshpass ||
       program == Program::docker_login) &&
      attached("-p")) {
    return 2;
  }
  if ((program == Program::sqlcmd && attached("-P")) ||
      (program == Program::ldap && attached("-w")))
    return 2;
  if (program == Program::smb) {
    for (std::string_view prefix : {"--user=", "-U"}) {
      if (!attached(prefix)) continue;
      const auto percent = word.find('%', prefix.size());
      return percent == std::string_view::npos ? std::string_view::npos : percent + 1;
    }
  }
  if (program == Program::curl) {
    for (std::string_view prefix : {"--user=", "--proxy-user=", "-u", "-U"}) {
      if (word.size() <= prefix.size() || !word.starts_with(prefix)) continue;
      const auto colon = word.find(':', prefix.size());
      return colon == std::string_view::npos ? std::string_view::npos : colon + 1;
    }
  }
  return std::string_view::npos;
}

// HTTP authentication schemes, shown before their credentials.
bool is_auth_scheme(std::string_view word) {
  static constexpr std::string_view kSchemes[] = {
      "basic", "bearer", "digest", "negotiate", "ntlm",   "token",         "bot",
      "oauth", "hoba",   "mutual", "vapid",     "apikey", "scram-sha-256", "aws4-hmac-sha256"};
  const auto w = lowered(word);
  for (auto s : kSchemes) {
    if (w == s) return true;
  }
  return false;
}

// The end of a quoted string starting at `at` (just past its closing quote,
// or text's end when it has none); a backslash escapes the next character.
std::size_t quoted_end(std::string_view text, std::size_t at) {
  const char quote = text[at];
  for (std::size_t i = at + 1; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      return i + 1;
    }
  }
  return text.size();
}

// The end of a value starting at `at`: a value that starts with a quote
// runs to its closing quote ('a b', "a b", or to the end when unclosed),
// then like any other to the next whitespace; a quote inside a value opens
// nothing (in the script `(exec -a 'app --password S3cret' sleep 9) & …`
// the quote after S3cret closes the script's own). Before `closing` if that is not '\0' (the quote
// around the whole "NAME=value"), whitespace or not; before '&' when `at_ampersand`; before a line
// break.
std::size_t value_end(std::string_view text, std::size_t at, char closing, bool at_ampersand) {
  std::size_t i = at;
  if (i < text.size() && is_quote(text[i]) && text[i] != closing) i = quoted_end(text, i);
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if ((closing != '\0' && c == closing) || (closing == '\0' && is_space(c)) ||
        (at_ampersand && c == '&') || c == '\n' || c == '\r') {
      break;
    }
  }
  return i;
}

// Masks the secrets of one text — an argument, a process title, a message —
// in one pass from left to right, each character looked at a bounded number
// of times (linear time). What it carries from one text to the next (an
// argv's arguments): whether the last word was a secret option, and whether
// a MySQL client was named.
class Masker {
 public:
  // Each secret hidden, as written (without its quotes), is added to
  // `found` when it is not null.
  explicit Masker(std::vector<std::string>* found = nullptr) : found_(found) {}

  // Whether the text last masked ended with a secret option (--password):
  // the next argument is its value.
  bool value_pending() const { return pending_ != SecretValue::none; }
  // That next argument, masked (as any other when it holds no secret: curl
  // -u USER).
  std::string take_value(std::string_view argument) {
    const auto from = secret_from(argument);
    pending_ = SecretValue::none;
    if (from == std::string_view::npos) return mask(argument);
    report(argument.substr(from));
    return std::string(argument.substr(0, from)) + "***";
  }

  std::string mask(std::string_view text);

 private:
  // One text's scan: the output so far and the position in `text`.
  struct Scan {
    std::string_view text;
    std::string out;
    std::size_t i = 0;
    // The last run of name characters, [name_from, name_to), while only
    // whitespace has followed it.
    bool named = false;
    std::size_t name_from = 0, name_to = 0;
    // The end of the last scheme://authority without user-info: a value
    // starting before it runs to whitespace or the line's end (not to '&'
    // or a quote), so that masking it cannot join the authority to a later
    // '@' (masking again changes nothing).
    std::size_t authority_to = 0;
  };
  // `text[from, to)` replaced by "***".
  void hide(Scan& s, std::size_t from, std::size_t to);
  // At a word's start, at a scheme's "://", at NAME's '=', at a header's
  // ':'. Each returns whether it consumed text (false: the character at
  // s.i is copied as it is); mask_assignment always does.
  bool mask_word(Scan& s);
  bool mask_authority(Scan& s);
  void mask_assignment(Scan& s);
  bool mask_header(Scan& s);

  void report(std::string_view secret) {
    if (!found_) return;
    if (secret.size() >= 2 && is_quote(secret.front()) && secret.back() == secret.front()) {
      secret = secret.substr(1, secret.size() - 2);
    }
    if (!secret.empty()) found_->emplace_back(secret);
  }

  // Where the secret of the pending option's value starts (npos: none).
  std::size_t secret_from(std::string_view value) const {
    if (pending_ != SecretValue::after_colon && pending_ != SecretValue::after_percent) return 0;
    const auto at = value.find(pending_ == SecretValue::after_colon ? ':' : '%');
    return at == std::string_view::npos ? std::string_view::npos : at + 1;
  }

  std::vector<std::string>* found_;
  SecretValue pending_ = SecretValue::none;
  // The last program named that has options holding passwords.
  Program program_ = Program::other;
};

std::string Masker::mask(std::string_view text) {
  Scan s{.text = text};
  s.out.reserve(text.size());
  while (s.i < text.size()) {
    const std::size_t i = s.i;
    const char c = text[i];
    if (!is_space(c) && (i == 0 || is_space(text[i - 1])) && mask_word(s)) continue;
    if (c == ':' && i + 2 < text.size() && text[i + 1] == '/' && text[i + 2] == '/' && i > 0 &&
        (is_alnum(text[i - 1]) || text[i - 1] == '+' || text[i - 1] == '.' || text[i - 1] == '-')) {
      if (mask_authority(s)) continue;
    } else if (c == '=' && s.named &&
               is_secret_name(name_parts(text.substr(s.name_from, s.name_to - s.name_from)))) {
      mask_assignment(s);
      continue;
    } else if (c == ':' && s.named && s.name_to == i) {
      if (mask_header(s)) continue;
    }
    // Copied as it is; a run of name characters is remembered.
    const char at = text[s.i];
    if (is_name_char(at)) {
      if (!s.named || s.name_to != s.i) s.name_from = s.i;
      s.name_to = s.i + 1;
      s.named = true;
    } else if (!is_space(at)) {
      s.named = false;
    }
    s.out += at;
    ++s.i;
  }
  return std::move(s.out);
}

void Masker::hide(Scan& s, std::size_t from, std::size_t to) {
  report(s.text.substr(from, to - from));
  s.out += "***";
}

bool Masker::mask_word(Scan& s) {
  // A word begins: an option's value, an option, a MySQL client, its -p
  // (-pSECRET first: -pXtoken is a password, not an option).
  const auto text = s.text;
  const std::size_t i = s.i;
  std::size_t word_to = i;
  while (word_to < text.size() && !is_space(text[word_to])) ++word_to;
  const auto word = text.substr(i, word_to - i);
  const auto attached = attached_secret_from(program_, word);
  if (attached == std::string_view::npos) {
    auto option = program_option(program_, word);
    if (option == SecretValue::none && is_secret_option(word)) option = SecretValue::whole;
    if (option != SecretValue::none) {
      pending_ = option;
      s.out += word;
      s.i = word_to;
      s.named = false;
      return true;
    }
  }
  const auto pending_from = value_pending() ? secret_from(word) : std::string_view::npos;
  if (value_pending() && pending_from == std::string_view::npos) {
    pending_ = SecretValue::none;  // curl -u USER: no secret written
  }
  if (value_pending() || attached != std::string_view::npos) {
    const std::size_t from = i + (value_pending() ? pending_from : attached);
    const std::size_t to = value_end(text, from, '\0', false);
    s.out += text.substr(i, from - i);
    hide(s, from, to);
    pending_ = SecretValue::none;
    s.i = to;
    s.named = false;
    return true;
  }
  if (const auto p = program_named(word); p != Program::other) {
    program_ = p;
  } else if (program_ == Program::docker && word == "login") {
    program_ = Program::docker_login;
  }
  return false;
}

bool Masker::mask_authority(Scan& s) {
  // scheme://user:secret@host — the user-info runs to the last '@' before
  // the next '/' or whitespace; the secret follows its first ':'.
  const auto text = s.text;
  const std::size_t i = s.i;
  std::size_t end = i + 3, last_at = std::string_view::npos;
  for (; end < text.size() && text[end] != '/' && !is_space(text[end]); ++end) {
    if (text[end] == '@') last_at = end;
  }
  const std::size_t colon = last_at == std::string_view::npos
                                ? std::string_view::npos
                                : text.substr(0, last_at).find(':', i + 3);
  // The host part after it is an authority without user-info: a value
  // starting there must not hide the '/' that ended this scan.
  s.authority_to = end;
  if (colon == std::string_view::npos) {
    s.out += "://";
    s.i += 3;
    s.named = false;
    return true;
  }
  s.out += text.substr(i, colon + 1 - i);
  hide(s, colon + 1, last_at);
  s.i = last_at;  // the '@' is copied by mask()
  return false;
}

void Masker::mask_assignment(Scan& s) {
  // NAME=value, NAME = 'value', "NAME=value", ?name=value&…
  const auto text = s.text;
  const std::size_t i = s.i;
  const char before = s.name_from > 0 ? text[s.name_from - 1] : '\0';
  std::size_t from = i + 1;
  while (from < text.size() && is_space(text[from]) && text[from] != '\n') ++from;
  const bool in_authority = i < s.authority_to;
  const std::size_t to = value_end(text, from, is_quote(before) && !in_authority ? before : '\0',
                                   !in_authority && (before == '?' || before == '&'));
  s.out += text.substr(i, from - i);
  hide(s, from, to);
  s.i = to;
  s.named = false;
}

bool Masker::mask_header(Scan& s) {
  // A header: Authorization: Bearer secret, X-Api-Key: secret; the value
  // runs to the end of the line, or to the quote around the header.
  const auto text = s.text;
  const std::size_t i = s.i;
  const auto name = text.substr(s.name_from, s.name_to - s.name_from);
  const auto parts = name_parts(name);
  const auto lower = lowered(name);
  const bool authorization = lower == "authorization" || lower == "proxy-authorization";
  // A session cookie is a credential too: Cookie: and Set-Cookie: whole.
  const bool cookie = lower == "cookie" || lower == "set-cookie";
  if (!authorization && !cookie && (name[0] == '-' || parts.size() <= 1 || !is_secret_name(parts)))
    return false;
  const char before = s.name_from > 0 ? text[s.name_from - 1] : '\0';
  std::size_t from = i + 1;
  while (from < text.size() && (text[from] == ' ' || text[from] == '\t')) ++from;
  std::size_t to = from;
  while (to < text.size() && text[to] != '\n' && text[to] != '\r' &&
         !(is_quote(before) && i >= s.authority_to && text[to] == before)) {
    ++to;
  }
  if (authorization) {
    // Keep a scheme that has credentials after it: "Bearer ***".
    std::size_t scheme_to = from;
    while (scheme_to < to && !is_space(text[scheme_to])) ++scheme_to;
    std::size_t rest = scheme_to;
    while (rest < to && is_space(text[rest])) ++rest;
    if (is_auth_scheme(text.substr(from, scheme_to - from))) from = rest;
  }
  s.out += text.substr(i, from - i);
  if (from < to) hide(s, from, to);
  s.i = to;
  s.named = false;
  return true;
}

std::string mask_by_pattern(std::string_view text) {
  return Masker().mask(text);
}

std::string quote_value(const std::string& v) {
  if (!v.empty() && v.find_first_of(" '\\") == std::string::npos) return v;
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// POSIX shell quoting: bare when safe, else '…' with ' written as '\''.
std::string shell_quote(const std::string& v) {
  if (!v.empty() && v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=:,@%+") == std::string::npos) {
    return v;
  }
  std::string out = "'";
  for (char c : v) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The secrets as written in `conninfo`, parsed or not: a URI's user-info
// secret (raw, %-encoded as given) and each of its pieces between '@' (libpq
// ends the user-info at the first '@' and may quote the rest), each
// password=… value (unquoted), and every other value mask_by_pattern hides;
// longest first.
std::vector<std::string> written_passwords(const std::string& conninfo) {
  std::vector<std::string> found;
  Masker(&found).mask(conninfo);
  for (std::size_t i = 0, n = found.size(); i < n; ++i) {
    const std::string secret = found[i];
    if (secret.find('@') == std::string::npos) continue;
    for (std::size_t from = 0; from <= secret.size();) {
      const std::size_t at = std::min(secret.find('@', from), secret.size());
      found.push_back(secret.substr(from, at - from));
      from = at + 1;
    }
  }
  std::erase_if(found, [](const std::string& s) { return s.empty(); });
  std::ranges::sort(found,
                    [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return found;
}

}  // namespace

std::string mask_conninfo_message(std::string message, const std::string& conninfo) {
  for (const auto& password : written_passwords(conninfo)) {
    for (auto at = message.find(password); at != std::string::npos;
         at = message.find(password, at + 3)) {
      message.replace(at, password.size(), "***");
    }
  }
  return mask_by_pattern(std::move(message));
}

std::string mask_conninfo(const std::string& conninfo) {
  if (conninfo.empty() || is_uri(conninfo)) return mask_by_pattern(conninfo);
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> opts(
      PQconninfoParse(conninfo.c_str(), &err), &PQconninfoFree);
  if (err) PQfreemem(err);
  if (!opts) return mask_by_pattern(conninfo);
  std::string out;
  for (auto* o = opts.get(); o->keyword; ++o) {
    if (!o->val) continue;
    if (!out.empty()) out += ' ';
    out += o->keyword;
    out += '=';
    // password and sslpassword (the client key's passphrase)
    out += std::string_view(o->keyword).ends_with("password") ? "***" : quote_value(o->val);
  }
  return out;
}

std::optional<std::string> conninfo_value(const std::string& conninfo, const std::string& keyword) {
  if (conninfo.empty()) return std::nullopt;
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> opts(
      PQconninfoParse(conninfo.c_str(), &err), &PQconninfoFree);
  if (err) PQfreemem(err);
  if (!opts) return std::nullopt;
  for (auto* o = opts.get(); o->keyword; ++o) {
    if (o->val && keyword == o->keyword) return std::string(o->val);
  }
  return std::nullopt;
}

std::string with_connection_flags(const std::string& conninfo,
                                  const std::optional<std::string>& host,
                                  const std::optional<std::string>& port,
                                  const std::optional<std::string>& user) {
  const bool flags = host || port || user;
  if (is_uri(conninfo)) {
    if (flags) {
      throw Error(ErrorKind::usage,
                  fmt::format("cannot combine -h/-p/-U with the URI conninfo '{}'",
                              mask_conninfo(conninfo)));
    }
    return conninfo;
  }
  std::string out = conninfo;
  const bool bare_name = !conninfo.empty() && conninfo.find('=') == std::string::npos &&
                         conninfo.find_first_not_of(" \t") != std::string::npos;
  if (bare_name) out = "dbname=" + quote_value(conninfo);
  auto add = [&out](const char* key, const std::optional<std::string>& v) {
    if (!v) return;
    if (!out.empty()) out += ' ';
    out += fmt::format("{}={}", key, quote_value(*v));
  };
  add("host", host);
  add("port", port);
  add("user", user);
  return out;
}

namespace {

// libpq's reason for refusing `value` of `keyword` at connect time (a bad
// port or sslmode got past PQconninfoParse and failed the connect, exit 1),
// or "" when it is accepted. Ports: a comma-separated list (one per host),
// each empty (the default) or 1 to 65535.
std::string invalid_value(std::string_view keyword, std::string_view value) {
  const auto one_of = [&](std::initializer_list<std::string_view> allowed) {
    if (std::ranges::find(allowed, value) != allowed.end()) return std::string();
    std::string list;
    for (const auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
    return fmt::format("{} '{}' is not one of {}", keyword, value, list);
  };
  if (keyword == "sslmode")
    return one_of({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"});
  if (keyword == "gssencmode") return one_of({"disable", "prefer", "require"});
  if (keyword != "port") return {};
  for (std::size_t from = 0; from <= value.size();) {
    const auto comma = std::min(value.find(',', from), value.size());
    auto port = value.substr(from, comma - from);
    while (!port.empty() && is_space(port.front())) port.remove_prefix(1);
    while (!port.empty() && is_space(port.back())) port.remove_suffix(1);
    // At most five digits, read only then (found by the fuzz target: the
    // digits of a longer one overflowed an int).
    const bool digits =
        port.size() <= 5 && std::ranges::all_of(port, [](char c) { return c >= '0' && c <= '9'; });
    int number = 0;
    if (digits) {
      for (const char c : port) number = number * 10 + (c - '0');
    }
    if (!port.empty() && (!digits || number < 1 || number > 65535)) {
      return fmt::format("port '{}' is not a port number (1 to 65535)", value);
    }
    from = comma + 1;
  }
  return {};
}

}  // namespace

void check_conninfo(const std::string& conninfo) {
  // PGPORT, PGSSLMODE and PGGSSENCMODE apply where the conninfo does not set
  // the keyword: bad values there are bad input too.
  for (const auto& [keyword, variable] :
       {std::pair{"port", "PGPORT"}, std::pair{"sslmode", "PGSSLMODE"},
        std::pair{"gssencmode", "PGGSSENCMODE"}}) {
    const char* env = std::getenv(variable);
    if (!env || !*env || conninfo_value(conninfo, keyword)) continue;
    if (const auto why = invalid_value(keyword, env); !why.empty()) {
      throw Error(ErrorKind::usage, fmt::format("invalid {}: {}", variable, why));
    }
  }
  if (conninfo.empty()) return;
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  std::string why;
  for (auto* o = opts; o && o->keyword && why.empty(); ++o) {
    if (o->val) why = invalid_value(o->keyword, o->val);
  }
  if (opts) PQconninfoFree(opts);
  if (!why.empty()) {
    throw Error(ErrorKind::usage,
                fmt::format("invalid conninfo '{}': {}", mask_conninfo(conninfo), why));
  }
  if (opts && !err) return;
  std::string reason = err ? err : "cannot parse";
  if (err) PQfreemem(err);
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  throw Error(ErrorKind::usage, fmt::format("invalid conninfo '{}': {}", mask_conninfo(conninfo),
                                            mask_conninfo_message(reason, conninfo)));
}

std::vector<std::string> mask_args(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  Masker masker;
  for (const auto& a : argv) {
    if (masker.value_pending() && !is_secret_option(a)) {
      out.push_back(masker.take_value(a));
    } else {
      out.push_back(masker.mask(a));
    }
  }
  return out;
}

namespace {

// mask_args, then the passwords SQL carries in each argument (psql -c
// "ALTER ROLE … PASSWORD '…'", run --sql=…; after --NAME= only the value:
// "--" would start an SQL comment).
std::vector<std::string> mask_args_and_sql(const std::vector<std::string>& argv) {
  auto out = mask_args(argv);
  for (auto& arg : out) {
    const auto eq = arg.starts_with("--") ? arg.find('=') : std::string::npos;
    arg = eq == std::string::npos ? mask_sql_secrets(arg)
                                  : arg.substr(0, eq + 1) + mask_sql_secrets(arg.substr(eq + 1));
  }
  return out;
}

}  // namespace

std::string mask_command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : mask_args_and_sql(argv)) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

std::string join_args_masked(const std::vector<std::string>& args) {
  std::string out;
  bool first = true;
  for (const auto& a : mask_args_and_sql(args)) {
    if (!first) out += ' ';
    first = false;
    out += a;
  }
  return out;
}

}  // namespace stallscope
