// The tree of a pgbench expression (driver/expr.h), shared by its parser
// (expr_parse.cpp) and its evaluator (expr.cpp). Internal to driver/.
#pragma once

#include <algorithm>
#include <cctype>
#include <memory>
#include <string_view>
#include <vector>

#include "driver/expr.h"

namespace stallscope::driver {

struct Expr {
  enum class Op : std::uint8_t {
    constant,
    variable,
    add,
    sub,
    mul,
    div,
    mod,
    eq,
    ne,
    lt,
    le,
    bit_and,
    bit_or,
    bit_xor,
    shift_left,
    shift_right,
    logical_and,
    logical_or,
    logical_not,
    is,         // args[0] IS args[1] (a NULL or boolean constant)
    case_when,  // when, then, when, then, …, else
    abs,
    least,
    greatest,
    debug,
    pi,
    sqrt,
    ln,
    exp,
    to_int,
    to_double,
    random,
    random_exponential,
    random_gaussian,
    random_zipfian,
    pow,
    hash_murmur2,
    hash_fnv1a,
    permute,
  };
  Op op = Op::constant;
  Value constant;
  int variable = -1;
  std::vector<std::shared_ptr<const Expr>> args;
  int depth = 1;  // nodes on the longest path down to a leaf
};

namespace detail {

// pgbench's limit on a function's arguments (evaluation fails past it).
inline constexpr std::size_t kMaxFunctionArgs = 16;

}  // namespace detail
}  // namespace stallscope::driver
