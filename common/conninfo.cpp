#include "common/conninfo.h"

#include <libpq-fe.h>

#include <memory>
#include <regex>

#include <fmt/format.h>

#include "common/error.h"

namespace stallscope {
namespace {

bool is_uri(const std::string& s) {
  return s.rfind("postgresql://", 0) == 0 || s.rfind("postgres://", 0) == 0;
}

std::string mask_by_pattern(std::string s) {
  // URI userinfo anywhere in the text, any scheme: scheme://user:secret@host
  static const std::regex userinfo(R"(([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^@\s/]*@)");
  s = std::regex_replace(s, userinfo, "$1:***@");
  // key=value, URI parameter or option=value: password=secret, password =
  // 'se cret', PGPASSWORD=…, --passwd=…, --secret=…, --token=…, --api-key=…
  static const std::regex kv(
      R"(((?:password|passwd|secret|token|api[-_]?key|access[-_]?key)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*))",
      std::regex::icase);
  return std::regex_replace(s, kv, "$1***");
}

// An option whose next argument is a secret: --password S3cret.
bool is_secret_option(const std::string& a) {
  static const std::regex option(
      R"(--?(?:password|passwd|secret|token|api[-_]?key|access[-_]?key))", std::regex::icase);
  return std::regex_match(a, option);
}

// Clients whose -pSECRET (no space) is a password, not a port as psql's -p.
bool takes_password_after_p(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  const auto slash = argv.front().find_last_of('/');
  const auto name = argv.front().substr(slash == std::string::npos ? 0 : slash + 1);
  return name == "mysql" || name == "mysqldump" || name == "mysqladmin" || name == "mariadb";
}

// Every argument with its secrets masked: the patterns above in each, the
// argument after a secret option, a MySQL client's -pSECRET.
std::vector<std::string> masked_args(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  const bool mysql = takes_password_after_p(argv);
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (i > 0 && is_secret_option(argv[i - 1])) {
      out.emplace_back("***");
    } else if (mysql && i > 0 && argv[i].size() > 2 && argv[i].rfind("-p", 0) == 0) {
      out.emplace_back("-p***");
    } else {
      out.push_back(mask_by_pattern(argv[i]));
    }
  }
  return out;
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

// The password as written in `conninfo`, parsed or not: a URI's user-info
// secret (raw, %-encoded as given), each password=… value (unquoted).
std::vector<std::string> written_passwords(const std::string& conninfo) {
  std::vector<std::string> out;
  static const std::regex userinfo(R"(://[^:/@\s]*:([^@\s/]*)@)");
  static const std::regex kv(R"(password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|([^\s&]*)))",
                             std::regex::icase);
  for (auto it = std::sregex_iterator(conninfo.begin(), conninfo.end(), userinfo);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1].str());
  }
  for (auto it = std::sregex_iterator(conninfo.begin(), conninfo.end(), kv);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1].matched ? (*it)[1].str() : (*it)[2].str());
  }
  std::erase_if(out, [](const std::string& p) { return p.empty(); });
  return out;
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

void check_conninfo(const std::string& conninfo) {
  if (conninfo.empty()) return;
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (opts) PQconninfoFree(opts);
  if (opts && !err) return;
  std::string reason = err ? err : "cannot parse";
  if (err) PQfreemem(err);
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  throw Error(ErrorKind::usage, fmt::format("invalid conninfo '{}': {}", mask_conninfo(conninfo),
                                            mask_conninfo_message(reason, conninfo)));
}

std::string mask_command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : masked_args(argv)) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

std::string join_args_masked(const std::vector<std::string>& args) {
  std::string out;
  bool first = true;
  for (const auto& a : masked_args(args)) {
    if (!first) out += ' ';
    first = false;
    out += a;
  }
  return out;
}

}  // namespace stallscope
