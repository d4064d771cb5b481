// Values between the classic Remote front (XML-RPC) and the JSON-RPC protocol, both ways
// (common/xmlrpc/classic_values): what a classic client sends becomes what a Python JSON-RPC client sends for
// the same value; what a worker answers becomes what PythonRemoteServer answers.
#include "common/xmlrpc/classic_values.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

namespace pickle = rjg::pickle;
namespace xmlrpc = rjg::xmlrpc;
namespace json = boost::json;
using pickle::PyValue;

// {"__pickled__": hex} of a value, as a Python peer sends it.
std::string pickled(const PyValue& v) { return R"({"__pickled__": ")" + pickle::encode_pickle_hex(v) + "\"}"; }

PyValue decoded_argument(const std::string& json_text) { return xmlrpc::from_json(json_text, "args[0]"); }

TEST(ClassicArguments, PlainValuesTravelAsJson) {
  auto arg = [](xmlrpc::Value v) { return xmlrpc::to_json_argument(xmlrpc::to_python(v)); };
  EXPECT_EQ(arg("text"), "\"text\"");
  EXPECT_EQ(arg(std::int64_t{-42}), "-42");
  EXPECT_EQ(arg(1.5), "1.5E0");
  EXPECT_EQ(arg(true), "true");
  EXPECT_EQ(arg(xmlrpc::Nil{}), "null");
  EXPECT_EQ(arg(xmlrpc::Array{1, "a"}), "[1,\"a\"]");
  EXPECT_EQ(arg(xmlrpc::Struct{{"k", 1}}), "{\"k\":1}");
}

TEST(ClassicArguments, WhatJsonCannotSayTravelsPickled) {
  auto arg = [](xmlrpc::Value v) { return xmlrpc::to_json_argument(xmlrpc::to_python(v)); };
  // bytes: Python's pickle of bytes, read back to the same bytes.
  const auto bytes = arg(xmlrpc::Binary{std::string("\x00\x01\xff", 3)});
  ASSERT_TRUE(bytes.starts_with("{\"__pickled__\":")) << bytes;
  EXPECT_EQ(decoded_argument(bytes), PyValue(pickle::PyBytes{std::string("\x00\x01\xff", 3)}));
  // A list holding bytes is pickled whole, as a Python client pickles every list it sends.
  const auto list = arg(xmlrpc::Array{1, xmlrpc::Binary{"x"}});
  EXPECT_EQ(decoded_argument(list), PyValue(pickle::PyList{{PyValue(std::int64_t{1}), PyValue(pickle::PyBytes{"x"})}}));
  // A dateTime becomes a naive datetime.datetime; one Python could not read stays the text.
  const auto when = arg(xmlrpc::DateTime{"20240229T23:59:58"});
  pickle::PyDateTime expected;
  expected.year = 2024, expected.month = 2, expected.day = 29, expected.hour = 23, expected.minute = 59,
  expected.second = 58;
  EXPECT_EQ(decoded_argument(when), PyValue(expected));
  EXPECT_EQ(arg(xmlrpc::DateTime{"yesterday"}), "\"yesterday\"");
  // NaN has no JSON form.
  const auto nan = arg(std::numeric_limits<double>::quiet_NaN());
  const auto back = decoded_argument(nan);
  ASSERT_TRUE(std::holds_alternative<double>(back.v)) << nan;
  EXPECT_TRUE(std::isnan(std::get<double>(back.v)));
  // February 30th does not exist, and "2024-02-29T..." is not the form: the text, as Python's client
  // would fail to read either.
  EXPECT_EQ(arg(xmlrpc::DateTime{"20240230T00:00:00"}), "\"20240230T00:00:00\"");
  EXPECT_EQ(arg(xmlrpc::DateTime{"2024-02-29T00:00:00"}), "\"2024-02-29T00:00:00\"");
  // A datetime Python cannot hold in a pickle is refused with a reason (year 0 never gets this far: the
  // parser refuses it as text); a PyValue built by hand shows the encoder's refusal is a ValueError.
  pickle::PyDateTime impossible;
  impossible.month = 13;
  EXPECT_THROW(xmlrpc::to_json_argument(PyValue(impossible)), xmlrpc::ValueError);
}

TEST(ClassicResults, JsonIsReadAsPythonsJsonModuleReadsIt) {
  EXPECT_EQ(xmlrpc::from_json("NaN", "r").v.index(), PyValue(0.0).v.index());
  EXPECT_EQ(xmlrpc::from_json("123456789012345678901234567890", "r"),
            PyValue(pickle::PyBigInt{"123456789012345678901234567890"}));
  EXPECT_EQ(xmlrpc::from_json("-9223372036854775808", "r"), PyValue(std::numeric_limits<std::int64_t>::min()));
  EXPECT_EQ(xmlrpc::from_json("1e2", "r"), PyValue(100.0));
  // A repeated key keeps its first place and takes the last value.
  EXPECT_EQ(xmlrpc::from_json(R"({"a": 1, "b": 2, "a": 3})", "r"),
            PyValue(pickle::PyDict{{{PyValue("a"), PyValue(std::int64_t{3})}, {PyValue("b"), PyValue(std::int64_t{2})}}}));
  // Pickles anywhere in the tree are decoded.
  EXPECT_EQ(xmlrpc::from_json("[1, " + pickled(PyValue(pickle::PyBytes{"z"})) + "]", "r"),
            PyValue(pickle::PyList{{PyValue(std::int64_t{1}), PyValue(pickle::PyBytes{"z"})}}));
}

TEST(ClassicResults, APickleOutsideTheDataOnlySubsetIsRefusedNamingWhere) {
  // GLOBAL os.system, REDUCE: the classic exploit.
  const std::string hex = "80049520000000000000008c02706f948c0673797374656d9493948c026c7394859452942e";
  try {
    xmlrpc::from_json(R"({"a": [0, {"__pickled__": ")" + hex + "\"}]}", "result");
    FAIL() << "admitted";
  } catch (const xmlrpc::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("result.a[1]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(xmlrpc::from_json(R"({"__pickled__": 7})", "result"), xmlrpc::ValueError);
  EXPECT_THROW(xmlrpc::from_json("[1,", "result"), xmlrpc::ValueError);
}

TEST(ClassicResults, ValuesBecomeWhatPythonRemoteServerReturns) {
  using xmlrpc::Value;
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue()), Value(std::string()));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyList{{PyValue(), PyValue("a")}})), Value(xmlrpc::Array{"", "a"}));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyBigInt{"99999999999999999999"})), Value("99999999999999999999"));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyBytes{"\x01"})), Value(xmlrpc::Binary{"\x01"}));
  // Text XML cannot carry goes as base64: Latin-1 bytes when it fits, else UTF-8.
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(std::string("a\x01\xc3\xa4"))), Value(xmlrpc::Binary{"a\x01\xe4"}));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(std::string("\x01\xe2\x82\xac"))), Value(xmlrpc::Binary{"\x01\xe2\x82\xac"}));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue("plain äö")), Value("plain äö"));
  // Keys as str(), sets and tuples as arrays, date and Decimal as str().
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyDict{{{PyValue(std::int64_t{1}), PyValue(true)}}})),
            Value(xmlrpc::Struct{{"1", true}}));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyTuple{{PyValue(std::int64_t{2})}})), Value(xmlrpc::Array{2}));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyDate{2024, 1, 2})), Value("2024-01-02"));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyDecimal{"1.10"})), Value("1.10"));
  pickle::PyDateTime t;
  t.year = 2024, t.month = 1, t.day = 2, t.hour = 3, t.minute = 4, t.second = 5, t.microsecond = 6;
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(t)), Value(xmlrpc::DateTime{"20240102T03:04:05"}));
}

TEST(ClassicDefaults, AStrAsItIsAnythingElseAsRepr) {
  EXPECT_EQ(xmlrpc::default_text(PyValue("abc")), "abc");
  EXPECT_EQ(xmlrpc::default_text(PyValue()), "None");
  EXPECT_EQ(xmlrpc::default_text(PyValue(true)), "True");
  EXPECT_EQ(xmlrpc::default_text(PyValue(pickle::PyList{{PyValue(std::int64_t{1}), PyValue("x")}})), "[1, 'x']");
}

TEST(ClassicXml, TheWriterNeverWritesWhatXmlCannotCarry) {
  // A fault message (or a struct key) with a control character and a stray byte: replaced, still XML.
  const auto written = xmlrpc::write_fault(1, std::string("bad\x01 byte \xff end"));
  EXPECT_EQ(xmlrpc::parse_response(written).fault.message, "bad\xef\xbf\xbd byte \xef\xbf\xbd end");
  EXPECT_FALSE(xmlrpc::xml_safe("\x01"));
  EXPECT_FALSE(xmlrpc::xml_safe("\xed\xa0\x80"));  // an encoded surrogate
  EXPECT_TRUE(xmlrpc::xml_safe("tab\tnewline\n€"));
}

}  // namespace

// Plain JSON for the adapter workers (MCP servers and Ansible modules read JSON only): a pickled
// list or dict from a Python client becomes the JSON json.dumps would write for it.
TEST(PlainJson, PickledContainersBecomeTheJsonPythonWouldWrite) {
  pickle::PyDict d;
  d.items.emplace_back(PyValue("name"), PyValue("x"));
  d.items.emplace_back(PyValue(std::int64_t{1}), PyValue(pickle::PyTuple{{PyValue(true), PyValue()}}));
  d.items.emplace_back(PyValue(2.5), PyValue(pickle::PySet{{PyValue(std::int64_t{3})}}));
  pickle::PyDateTime when;
  when.year = 2026, when.month = 12, when.day = 1, when.hour = 18, when.minute = 5, when.microsecond = 250;
  d.items.emplace_back(PyValue(), PyValue(when));
  const std::string args = "[" + pickled(PyValue(d)) + ", 7, \"s\"]";
  EXPECT_EQ(xmlrpc::plain_json(args, "args"),
            json::parse(R"([{"name":"x","1":[true,null],"2.5":[3],"null":"2026-12-01T18:05:00.000250"},7,"s"])"));
  EXPECT_EQ(xmlrpc::to_plain_json(PyValue(pickle::PyTimedelta{1, 30, 500000}), "v"), json::value(86430.5));
  EXPECT_EQ(xmlrpc::to_plain_json(PyValue(pickle::PyDate{2026, 1, 2}), "v"), json::value("2026-01-02"));
}

TEST(PlainJson, WhatJsonCannotCarryIsRefusedNamingWhere) {
  auto message = [](const PyValue& v) {
    try {
      xmlrpc::to_plain_json(v, "kwargs['data']");
    } catch (const xmlrpc::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(PyValue(pickle::PyList{{PyValue(std::int64_t{1}), PyValue(pickle::PyBytes{"ab"})}})),
            "kwargs['data'][1]: a bytes value has no JSON form; send it as text or as a number instead");
  pickle::PyDict d;
  d.items.emplace_back(PyValue("k"), PyValue(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_EQ(message(PyValue(d)), "kwargs['data']['k']: nan has no JSON form; send it as text or as a number instead");
  EXPECT_NE(message(PyValue(pickle::PyBigInt{"123456789012345678901234"})).find("beyond 64 bits"), std::string::npos);
  pickle::PyDict tuple_key;
  tuple_key.items.emplace_back(PyValue(pickle::PyTuple{{PyValue(std::int64_t{1})}}), PyValue());
  EXPECT_NE(message(PyValue(tuple_key)).find("a dictionary key must be a string"), std::string::npos);
  // A pickle outside the data-only subset never gets this far: from_json refuses it first.
  EXPECT_THROW(xmlrpc::plain_json(R"([{"__pickled__": "80049500"}])", "args"), xmlrpc::ValueError);
}

// The classes Robot's standard libraries return (issue #23 item 6): a classic remote server sends
// str() of them, except an XML element, whose str() holds its address in the Python process; JSON
// (json.dumps) carries none of them.
TEST(ClassicResults, StandardLibraryObjectsAsPythonRemoteServerSendsThem) {
  using xmlrpc::Value;
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyComplex{1, 2})), Value("(1+2j)"));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyPath{"/tmp/a b"})), Value("/tmp/a b"));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PySecret{"hidden"})), Value("<secret>"));
  EXPECT_EQ(xmlrpc::to_xmlrpc(PyValue(pickle::PyDict{{{PyValue(pickle::PyPath{"k"}), PyValue(pickle::PyComplex{0, 1})}}})),
            Value(xmlrpc::Struct{{"k", "1j"}}));
  const PyValue root(pickle::PyElement{"root", {{"a", "1"}}, "text", std::nullopt, {}});
  try {
    xmlrpc::to_xmlrpc(PyValue(pickle::PyList{{PyValue("x"), root}}));
    ADD_FAILURE() << "an Element was sent as text";
  } catch (const xmlrpc::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("an xml.etree.ElementTree.Element (<Element 'root'>) has no XML-RPC form"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("Element To String"), std::string::npos) << e.what();
  }
  // a pickled Element from a Python worker decodes (the classic front then refuses it as above)
  EXPECT_EQ(xmlrpc::from_json(pickled(root), "result"), root);
  for (const PyValue& v : {PyValue(pickle::PyComplex{1, 2}), PyValue(pickle::PyPath{"/x"}), root,
                           PyValue(pickle::PySecret{"hidden"})}) {
    try {
      xmlrpc::to_plain_json(v, "result");
      ADD_FAILURE() << pickle::py_repr(v) << " became JSON";
    } catch (const xmlrpc::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("has no JSON form"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("hidden"), std::string::npos) << "a Secret's value in a message: " << e.what();
    }
  }
}
