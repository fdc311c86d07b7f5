// libFuzzer target: pgbench-style scripts through driver::parse_script, and
// every \set and \sleep expression of a script that parses evaluated with
// random variable values (as -D NAME=VALUE gives them, some unset) and a
// random seed, as a worker runs them. Also split_weight and builtin_script
// on the same text.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/printable.h"
#include "driver/script.h"
#include "fuzz_check.h"

namespace {

bool is_usage(const stallscope::Error& e) {
  return e.kind() == stallscope::ErrorKind::usage;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stallscope;
  FuzzedDataProvider in(data, size);
  const auto seed = in.ConsumeIntegral<std::uint64_t>();
  const auto nvalues = in.ConsumeIntegralInRange<std::size_t>(0, 8);
  std::vector<std::optional<std::int64_t>> given;
  for (std::size_t i = 0; i < nvalues; ++i) {
    if (in.ConsumeBool()) {
      given.emplace_back(in.ConsumeIntegral<std::int64_t>());
    } else {
      given.emplace_back(std::nullopt);
    }
  }
  const std::string text = in.ConsumeRemainingBytesAsString();

  try {
    driver::split_weight(text);
  } catch (const Error& e) {
    FUZZ_CHECK(is_usage(e));
  }
  try {
    driver::Variables v;
    driver::builtin_script(text, v);
  } catch (const Error& e) {
    FUZZ_CHECK(is_usage(e));
  }

  driver::Variables variables;
  driver::Script script;
  try {
    script = driver::parse_script(text, "fuzz.sql", variables);
  } catch (const Error& e) {
    FUZZ_CHECK(is_usage(e));
    return 0;
  }
  // A script that parses is text: no NUL byte, valid UTF-8.
  FUZZ_CHECK(text.find('\0') == std::string::npos);
  FUZZ_CHECK(common::valid_utf8(text) == text);
  driver::VariableValues values(variables.names.size());
  for (std::size_t i = 0; i < values.size() && i < given.size(); ++i) {
    if (given[i]) values[i].set(driver::Value::integer(*given[i]));
  }
  driver::Prng rng(seed);
  for (std::size_t k = 0; k < script.commands.size(); ++k) {
    const auto& cmd = script.commands[k];
    FUZZ_CHECK(cmd.line >= 1);
    using K = driver::ScriptCommand::Kind;
    if (cmd.kind == K::sql) {
      FUZZ_CHECK(cmd.text.size() == cmd.vars.size() + 1);
      FUZZ_CHECK(cmd.quoted.size() == cmd.vars.size());
      for (int var : cmd.vars) {
        FUZZ_CHECK(var >= 0 && static_cast<std::size_t>(var) < variables.names.size());
      }
      driver::source_text(cmd, variables);
      continue;
    }
    if (cmd.kind == K::if_ || cmd.kind == K::elif) {
      FUZZ_CHECK(cmd.next_branch > k && cmd.next_branch < script.commands.size());
    }
    if (cmd.kind != K::set && cmd.kind != K::if_ && cmd.kind != K::elif) continue;
    FUZZ_CHECK(cmd.expr != nullptr);
    try {
      const driver::Value v =
          driver::evaluate(*cmd.expr, driver::EvalContext{values, variables, rng});
      if (cmd.kind == K::set) {
        FUZZ_CHECK(cmd.target >= 0 && static_cast<std::size_t>(cmd.target) < values.size());
        values[static_cast<std::size_t>(cmd.target)].set(v);
      }
    } catch (const Error& e) {
      FUZZ_CHECK(is_usage(e));
    }
  }
  return 0;
}
