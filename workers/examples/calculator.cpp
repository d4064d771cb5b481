// robot-example-calculator: the library "Calculator", a minimal native keyword library.
//
//   *** Settings ***
//   Library    JsonRpcRemote    uri=tcp://127.0.0.1:8270    library_name=Calculator
//
//   *** Test Cases ***
//   Adding
//       ${sum}=    Add    2    3
//       Should Be Equal Numbers    ${sum}    5
//
// Run it behind the gateway (stdio, the default) or on its own: robot-example-calculator --tcp 127.0.0.1:8270
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

namespace {

using rjg::sdk::Arg;
using rjg::sdk::Call;
using rjg::sdk::KeywordError;
namespace json = rjg::sdk::json;

// Integer arithmetic that fails the keyword instead of wrapping around.
template <typename Op>
json::value checked(std::int64_t a, std::int64_t b, Op op, const char* what) {
  std::int64_t result = 0;
  if (op(a, b, &result)) throw KeywordError(std::string(what) + " overflows a 64-bit integer", "OverflowError");
  return result;
}

rjg::sdk::Library make_library() {
  rjg::sdk::Library lib{"Calculator", "Integer and floating point arithmetic for examples and benchmarks.", "1.0"};

  lib.keyword("Add", {{"a", "int"}, {"b", "int"}}, "Returns `a` + `b`.", [](Call& c) -> json::value {
    return checked(c.get<std::int64_t>("a"), c.get<std::int64_t>("b"),
                   [](auto x, auto y, auto* r) { return __builtin_add_overflow(x, y, r); }, "the sum");
  });

  lib.keyword("Subtract", {{"a", "int"}, {"b", "int"}}, "Returns `a` - `b`.", [](Call& c) -> json::value {
    return checked(c.get<std::int64_t>("a"), c.get<std::int64_t>("b"),
                   [](auto x, auto y, auto* r) { return __builtin_sub_overflow(x, y, r); }, "the difference");
  });

  lib.keyword("Multiply", {{"a", "int"}, {"b", "int"}}, "Returns `a` * `b`.", [](Call& c) -> json::value {
    return checked(c.get<std::int64_t>("a"), c.get<std::int64_t>("b"),
                   [](auto x, auto y, auto* r) { return __builtin_mul_overflow(x, y, r); }, "the product");
  });

  lib.keyword("Divide", {{"a", "float"}, {"b", "float"}},
              "Returns `a` / `b` as a float. Fails with ZeroDivisionError when `b` is zero.",
              [](Call& c) -> json::value {
                const double b = c.get<double>("b");
                if (b == 0) throw KeywordError("Cannot divide by zero", "ZeroDivisionError");
                return c.get<double>("a") / b;
              });

  lib.keyword("Sum Of", {Arg::var_positional("numbers", "int")}, "Returns the sum of any number of integers.",
              [](Call& c) -> json::value {
                std::int64_t sum = 0;
                for (const json::value& n : c.get<json::array>("numbers"))
                  if (__builtin_add_overflow(sum, n.get_int64(), &sum))
                    throw KeywordError("the sum overflows a 64-bit integer", "OverflowError");
                return sum;
              });

  lib.keyword("Should Be Equal Numbers", {{"first", "float"}, {"second", "float"}, {"tolerance", "float", json::value(0.0)}},
              "Fails unless `first` and `second` differ by at most `tolerance`.",
              [](Call& c) -> json::value {
                const double first = c.get<double>("first");
                const double second = c.get<double>("second");
                const double tolerance = c.get<double>("tolerance");
                if (std::fabs(first - second) > tolerance)
                  throw KeywordError(fmt::format("{} != {}", first, second));
                return nullptr;
              },
              {"assertion"});

  return lib;
}

}  // namespace

int main(int argc, char** argv) {
  const rjg::sdk::Library library = make_library();
  return rjg::sdk::serve(library, argc, argv);
}
