// Python's value dialect (common/pickle/python_json.hpp): what may travel as JSON to a Python peer (a
// scalar, a flat list or dict of scalars) and what is pickled whole, for values built in C++ (PyValue), for
// JSON trees and texts, and for what a classic client sends (the classic front's arguments, the bridge's
// results go through the same function).
#include "common/pickle/python_json.hpp"
#include "common/xmlrpc/classic_values.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

namespace json = boost::json;
namespace pickle = rjg::pickle;
using pickle::PyValue;

bool is_pickled(std::string_view text) { return text.starts_with(R"({"__pickled__":)"); }

PyValue decoded(const std::string& text) { return pickle::from_json(text, "v"); }

TEST(PythonDialect, OnlyScalarsAndFlatContainersHaveAJsonForm) {
  EXPECT_TRUE(pickle::has_json_form(PyValue("a")));
  EXPECT_TRUE(pickle::has_json_form(PyValue(pickle::PyList{{PyValue(1), PyValue("x"), PyValue()}})));
  pickle::PyDict flat;
  flat.items.emplace_back(PyValue("k"), PyValue(1.5));
  EXPECT_TRUE(pickle::has_json_form(PyValue(flat)));

  pickle::PyDict nested = flat;
  nested.items.emplace_back(PyValue("items"), PyValue(pickle::PyList{{PyValue(1)}}));
  EXPECT_FALSE(pickle::has_json_form(PyValue(nested)));
  EXPECT_FALSE(pickle::has_json_form(PyValue(pickle::PyList{{PyValue(pickle::PyList{})}})));
  pickle::PyDict lookalike;
  lookalike.items.emplace_back(PyValue("__pickled__"), PyValue("80"));
  EXPECT_FALSE(pickle::has_json_form(PyValue(lookalike)));  // the peer would unpickle it
  pickle::PyDict int_key;
  int_key.items.emplace_back(PyValue(1), PyValue("one"));
  EXPECT_FALSE(pickle::has_json_form(PyValue(int_key)));
  EXPECT_FALSE(pickle::has_json_form(PyValue(std::numeric_limits<double>::infinity())));
  EXPECT_FALSE(pickle::has_json_form(PyValue(pickle::PyTuple{{PyValue(1)}})));
}

// What a classic client sends towards a (Python) worker: a struct holding an array is pickled, so the
// reference server reads it; flat arrays and structs stay JSON.
TEST(PythonDialect, ClassicArgumentsThatNestArePickled) {
  auto arg = [](rjg::xmlrpc::Value v) { return rjg::xmlrpc::to_json_argument(rjg::xmlrpc::to_python(v)); };
  EXPECT_EQ(arg(rjg::xmlrpc::Array{1, "a"}), R"([1,"a"])");
  const std::string nested = arg(rjg::xmlrpc::Struct{{"items", rjg::xmlrpc::Array{1, "two"}}, {"n", 1}});
  ASSERT_TRUE(is_pickled(nested)) << nested;
  pickle::PyDict expected;
  expected.items.emplace_back(PyValue("items"), PyValue(pickle::PyList{{PyValue(1), PyValue("two")}}));
  expected.items.emplace_back(PyValue("n"), PyValue(1));
  EXPECT_EQ(decoded(nested), PyValue(expected));
  const std::string rows = arg(rjg::xmlrpc::Array{rjg::xmlrpc::Array{1}, rjg::xmlrpc::Struct{{"k", "v"}}});
  EXPECT_TRUE(is_pickled(rows)) << rows;
}

TEST(PythonDialect, JsonTreesInTheDialectStayAsTheyAre) {
  for (const char* text : {"null", "1", R"("s")", "[1, 2.5, null]", R"({"a": true})", R"({"__pickled__": "80044b012e"})"}) {
    const json::value v = json::parse(text);
    EXPECT_TRUE(pickle::in_python_dialect(v)) << text;
    EXPECT_EQ(pickle::python_dialect(v, "result"), v) << text;
  }
  for (const char* text : {"[[1]]", R"({"a": [1]})", R"([{"b": 1}])", "18446744073709551615"}) {
    const json::value v = json::parse(text);
    EXPECT_FALSE(pickle::in_python_dialect(v)) << text;
    const json::value wire = pickle::python_dialect(v, "result");
    EXPECT_TRUE(is_pickled(json::serialize(wire))) << text << " -> " << wire;
  }
  // A pickle inside is read as Python reads it: [pickle of 1] is the list [1], which is flat JSON.
  const json::value inner = json::parse(R"([{"__pickled__": "80044b012e"}])");
  EXPECT_FALSE(pickle::in_python_dialect(inner));
  EXPECT_EQ(pickle::python_dialect(inner, "r"), json::parse("[1]"));
  EXPECT_THROW(pickle::python_dialect(json::parse(R"([{"__pickled__": 1}])"), "r"), pickle::ValueError);
  // A malformed pickle inside a nested value is refused, naming where.
  try {
    pickle::python_dialect(json::parse(R"({"a": [{"__pickled__": "zz"}]})"), "result");
    ADD_FAILURE() << "no ValueError";
  } catch (const pickle::ValueError& e) {
    EXPECT_TRUE(std::string_view(e.what()).starts_with("result.a[0]")) << e.what();
  }
}

TEST(PythonDialect, JsonTextsKeepNanAndBigIntegers) {
  const std::string nan = pickle::python_dialect(std::string_view("[NaN, 1]"), "result");
  ASSERT_TRUE(is_pickled(nan)) << nan;
  const PyValue value = decoded(nan);
  const auto* list = value.get<pickle::PyList>();
  ASSERT_TRUE(list && list->items.size() == 2) << nan;
  EXPECT_TRUE(std::isnan(*list->items[0].get<double>()));
  const std::string big = pickle::python_dialect(std::string_view("123456789012345678901234567890"), "result");
  EXPECT_EQ(decoded(big), PyValue(pickle::PyBigInt{"123456789012345678901234567890"}));
  EXPECT_EQ(pickle::python_dialect(std::string_view(R"({"a": 1})"), "result"), R"({"a":1})");
}

// A value built in code that nests deeper than a pickle for Python may hold is refused saying so (not
// as "not valid JSON"); up to that depth it is pickled.
TEST(PythonDialect, DeepValuesBuiltInCodeAreRefusedNamingTheDepth) {
  auto nested = [](std::size_t depth) {
    json::value v = 1;
    for (std::size_t i = 0; i < depth; ++i) v = json::array{std::move(v)};
    return v;
  };
  EXPECT_TRUE(is_pickled(json::serialize(pickle::python_dialect(nested(100), "result"))));
  try {
    pickle::python_dialect(nested(200), "result");
    ADD_FAILURE() << "no ValueError";
  } catch (const pickle::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "result: nested 200 levels deep, deeper than the 128 levels a value for a Python peer may hold; "
              "return a flatter value");
  }
}

// One odd default (a tool schema's, say) is left out of a definition; it does not fail the import.
TEST(PythonDialect, ADefaultThatCannotBeSentIsLeftOut) {
  EXPECT_EQ(pickle::definition_default(json::parse("[1, 2]"), "xs"), json::parse("[1, 2]"));
  const auto nested = pickle::definition_default(json::parse(R"([{"a": 1}])"), "rows");
  ASSERT_TRUE(nested);
  EXPECT_TRUE(is_pickled(json::serialize(*nested)));
  EXPECT_FALSE(pickle::definition_default(json::parse(R"([{"__pickled__": "00"}])"), "bad"));
}

}  // namespace
