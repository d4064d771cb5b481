// XML-RPC documents: what Python's xmlrpc.client writes (recorded below from Python 3.11) reads back as
// the values it meant; what the codec writes reads back the same; hostile or broken XML is refused with
// a line number and a reason, never a crash.
#include "common/xmlrpc/xmlrpc.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>

// Every allocation of this test program is counted (bytes asked for, not pages), so that a test can say how
// much a parse held at its peak, exactly and on any machine. Each block carries its size in front of it.
namespace {
constexpr std::size_t kHeader = alignof(std::max_align_t);
std::atomic<std::size_t> g_live{0}, g_peak{0};

void* counted_new(std::size_t n) {
  void* block = std::malloc(n + kHeader);
  if (!block) throw std::bad_alloc();
  *static_cast<std::size_t*>(block) = n;
  const std::size_t live = g_live += n;
  for (std::size_t peak = g_peak; live > peak && !g_peak.compare_exchange_weak(peak, live);) {
  }
  return static_cast<char*>(block) + kHeader;
}
void counted_delete(void* p) noexcept {
  if (!p) return;
  void* block = static_cast<char*>(p) - kHeader;
  g_live -= *static_cast<std::size_t*>(block);
  std::free(block);
}

// The most the code in `f` held at once beyond what was live before it.
template <class F>
std::size_t peak_bytes(F&& f) {
  const std::size_t before = g_live;
  g_peak = before;
  f();
  return g_peak - before;
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }

namespace {

using namespace rjg::xmlrpc;

// xmlrpc.client.dumps(("Run Keyword", ["a", 1, 2.5, True, Binary(b"\x00\xffhi"), {"k": [1, {"n": None}]},
//                      datetime(2024,1,2,3,4,5)]), "run_keyword", allow_none=True)
constexpr const char* kPythonCall = R"(<?xml version='1.0'?>
<methodCall>
<methodName>run_keyword</methodName>
<params>
<param>
<value><string>Run Keyword</string></value>
</param>
<param>
<value><array><data>
<value><string>a</string></value>
<value><int>1</int></value>
<value><double>2.5</double></value>
<value><boolean>1</boolean></value>
<value><base64>
AP9oaQ==
</base64></value>
<value><struct>
<member>
<name>k</name>
<value><array><data>
<value><int>1</int></value>
<value><struct>
<member>
<name>n</name>
<value><nil/></value></member>
</struct></value>
</data></array></value>
</member>
</struct></value>
<value><dateTime.iso8601>20240102T03:04:05</dateTime.iso8601></value>
</data></array></value>
</param>
</params>
</methodCall>
)";

TEST(XmlRpc, ReadsWhatPythonWrites) {
  const Call call = parse_call(kPythonCall);
  EXPECT_EQ(call.method, "run_keyword");
  ASSERT_EQ(call.params.size(), 2u);
  EXPECT_EQ(call.params[0], Value("Run Keyword"));
  const Array& args = call.params[1].as<Array>();
  ASSERT_EQ(args.size(), 7u);
  EXPECT_EQ(args[0], Value("a"));
  EXPECT_EQ(args[1], Value(1));
  EXPECT_EQ(args[2], Value(2.5));
  EXPECT_EQ(args[3], Value(true));
  EXPECT_EQ(args[4], Value(Binary{std::string("\x00\xffhi", 4)}));
  const Value* k = args[5].member("k");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->as<Array>()[1].member("n")->is<Nil>(), true);
  EXPECT_EQ(args[6], Value(DateTime{"20240102T03:04:05"}));
}

TEST(XmlRpc, ReadsResponsesAndFaults) {
  const auto ok = parse_response(R"(<?xml version='1.0'?>
<methodResponse>
<params>
<param>
<value><struct>
<member>
<name>status</name>
<value><string>PASS</string></value>
</member>
<member>
<name>output</name>
<value><string>*INFO* hi
</string></value>
</member>
</struct></value>
</param>
</params>
</methodResponse>
)");
  ASSERT_FALSE(ok.is_fault);
  EXPECT_EQ(*ok.value.member("status"), Value("PASS"));
  EXPECT_EQ(*ok.value.member("output"), Value("*INFO* hi\n"));

  const auto fault = parse_response(R"(<?xml version='1.0'?>
<methodResponse>
<fault>
<value><struct>
<member>
<name>faultCode</name>
<value><int>1</int></value>
</member>
<member>
<name>faultString</name>
<value><string>No such &lt;method&gt;</string></value>
</member>
</struct></value>
</fault>
</methodResponse>
)");
  ASSERT_TRUE(fault.is_fault);
  EXPECT_EQ(fault.fault.code, 1);
  EXPECT_EQ(fault.fault.message, "No such <method>");
}

TEST(XmlRpc, AValueWithoutATypeIsAString) {
  const auto call = parse_call("<methodCall><methodName>m</methodName><params><param><value>  two words </value>"
                               "</param><param><value/></param></params></methodCall>");
  ASSERT_EQ(call.params.size(), 2u);
  EXPECT_EQ(call.params[0], Value("  two words "));
  EXPECT_EQ(call.params[1], Value(""));
}

TEST(XmlRpc, WhatItWritesReadsBackTheSame) {
  const Value value(Array{Value("<&>\r\n\"'"), Value(std::int64_t{1} << 40), Value(-7), Value(0.1), Value(false),
                          Value(Nil{}), Value(Binary{std::string("\0\1\2\3\xfe", 5)}),
                          Value(Struct{{"a b", Value(Array{})}, {"", Value(Struct{})}}), Value(DateTime{"20240102T03:04:05"})});
  const auto call = parse_call(write_call("run_keyword", {Value("Kw"), value}));
  EXPECT_EQ(call.method, "run_keyword");
  ASSERT_EQ(call.params.size(), 2u);
  EXPECT_EQ(call.params[1], value);
  const auto response = parse_response(write_response(value));
  EXPECT_EQ(response.value, value);
  const auto fault = parse_response(write_fault(-32601, "unknown method 'x' <here>"));
  ASSERT_TRUE(fault.is_fault);
  EXPECT_EQ(fault.fault.code, -32601);
  EXPECT_EQ(fault.fault.message, "unknown method 'x' <here>");
  // 64-bit integers go out as <i8>; 32-bit ones as <int>, which every reader knows.
  EXPECT_NE(write_response(Value(std::int64_t{1} << 40)).find("<i8>1099511627776</i8>"), std::string::npos);
  EXPECT_NE(write_response(Value(5)).find("<int>5</int>"), std::string::npos);
}

TEST(XmlRpc, Base64RoundTripsEveryLength) {
  std::string bytes;
  for (int n = 0; n < 70; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes) << n;
    bytes += static_cast<char>(n * 37);
  }
  EXPECT_EQ(base64_encode("hi"), "aGk=");
  EXPECT_EQ(base64_decode("aG\nk="), "hi");
  EXPECT_THROW(base64_decode("a*=="), ParseError);
  EXPECT_THROW(base64_decode("abc"), ParseError);
}

void expect_refused(const std::string& document, std::string_view why, const Limits& limits = {}) {
  try {
    parse_call(document, limits);
    ADD_FAILURE() << "accepted: " << document.substr(0, 200);
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(XmlRpc, HostileXmlIsRefused) {
  // Billion laughs, external entities and any DTD at all: a DOCTYPE ends the parse.
  expect_refused(R"(<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>
<methodCall><methodName>&lol2;</methodName></methodCall>)",
                 "DOCTYPE");
  expect_refused(R"(<?xml version="1.0"?><!DOCTYPE x SYSTEM "file:///etc/passwd"><methodCall/>)", "DOCTYPE");
  expect_refused(R"(<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>
<methodCall><methodName>&e;</methodName></methodCall>)",
                 "DOCTYPE");
  // An entity never declared is not well-formed.
  expect_refused("<methodCall><methodName>&e;</methodName></methodCall>", "not well-formed");
}

TEST(XmlRpc, BrokenDocumentsSayWhatAndWhere) {
  expect_refused("", "not well-formed");
  expect_refused("<methodCall><methodName>m</methodName>", "not well-formed");
  expect_refused("<methodResponse/>", "expected <methodCall>");
  expect_refused("<methodCall><params/></methodCall>", "no <methodName>");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><int>x</int></value></param></params>"
                 "</methodCall>",
                 "not an integer");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><int>4294967296</int></value></param>"
                 "</params></methodCall>",
                 "outside 32 bits");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><boolean>yes</boolean></value></param>"
                 "</params></methodCall>",
                 "expected 0 or 1");
  // nan and inf are numbers (Python's client writes repr() of a float); "1.5x" is not.
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><double>1.5x</double></value></param>"
                 "</params></methodCall>",
                 "not a number");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><blob/></value></param></params>"
                 "</methodCall>",
                 "unknown value type <blob>");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><string>a</string><string>b</string>"
                 "</value></param></params></methodCall>",
                 "exactly one");
  expect_refused("<methodCall>\n<methodName>m</methodName>\n<params><param><value><struct><member><name>a</name>"
                 "</member></struct></value></param></params></methodCall>",
                 "line 3: <member> needs one <name> and one <value>");
}

TEST(XmlRpc, LimitsHold) {
  Limits small;
  small.max_bytes = 100;
  small.max_depth = 3;
  small.max_values = 5;
  expect_refused(std::string(101, ' '), "more than the limit of 100", small);
  Limits roomy;
  roomy.max_depth = 3;
  roomy.max_values = 5;
  std::string deep = "<methodCall><methodName>m</methodName><params><param>";
  for (int i = 0; i < 5; ++i) deep += "<value><array><data>";
  for (int i = 0; i < 5; ++i) deep += "</data></array></value>";
  deep += "</param></params></methodCall>";
  expect_refused(deep, "deeper than the limit", roomy);
  std::string many = "<methodCall><methodName>m</methodName><params><param><value><array><data>";
  for (int i = 0; i < 10; ++i) many += "<value>x</value>";
  many += "</data></array></value></param></params></methodCall>";
  expect_refused(many, "more values than the limit of 5", roomy);
  // 200,000 nested arrays end at the depth limit, not in a stack overflow.
  std::string nested = "<methodCall><methodName>m</methodName><params><param>";
  for (int i = 0; i < 200000; ++i) nested += "<value><array><data>";
  expect_refused(nested, "line 1: arrays and structs nested deeper than the limit");
}

// A call whose one param is an array of `items` empty values, padded with layout to `bytes` bytes.
std::string empty_values(std::size_t items, std::size_t bytes = 0) {
  std::string d = "<methodCall><methodName>m</methodName><params><param><value><array><data>";
  for (std::size_t i = 0; i < items; ++i) d += "<value/>";
  const std::string end = "</data></array></value></param></params></methodCall>";
  if (d.size() + end.size() < bytes) d.append(bytes - d.size() - end.size(), ' ');
  return d + end;
}

TEST(XmlRpc, ValuesAreCappedByTheDocumentsSize) {
  // 1000 items and their array: 1001 values, so 16,016 bytes may hold them and 16,015 may not.
  const Call call = parse_call(empty_values(1000, 16 * 1001));
  ASSERT_EQ(call.params.size(), 1u);
  EXPECT_EQ(call.params[0].as<Array>().size(), 1000u);
  expect_refused(empty_values(1000, 16 * 1001 - 1),
                 "line 1: more values than the limit: at most one value per 16 bytes of the document, 1000 here");
  // The ratio is a Limit: 0 turns it off, leaving max_values.
  Limits no_ratio;
  no_ratio.bytes_per_value = 0;
  EXPECT_EQ(parse_call(empty_values(1000), no_ratio).params[0].as<Array>().size(), 1000u);
  no_ratio.max_values = 1000;
  expect_refused(empty_values(1000), "more values than the limit of 1000", no_ratio);
  // What Python's xmlrpc.client writes always fits: at least 21 bytes a value.
  Array many(5000, Value(Nil{}));
  EXPECT_EQ(parse_call(write_call("m", {Value(many)})).params[0], Value(many));
  EXPECT_EQ(parse_response(write_response(Value(Array(5000, Value(Array{}))))).value.as<Array>().size(), 5000u);
}

// The issue's reproducer: 2,000,000 empty elements in 8 MB were all built into a tree (213 MB) before
// the document was refused. Now the first misplaced element ends the parse.
TEST(XmlRpc, AMisplacedElementIsRefusedWhereItStands) {
  std::string stray = "<methodCall><methodName>run_keyword</methodName><params><param>";
  for (int i = 0; i < 2'000'000; ++i) stray += "<a/>";
  stray += "</param></params></methodCall>";
  std::size_t held = peak_bytes([&] { expect_refused(stray, "line 1: <param> must hold exactly one <value>"); });
  EXPECT_LT(held, 64u * 1024) << "held " << held << " bytes for a document refused at its 5th element";
  std::string stray_values = "<methodCall><methodName>m</methodName><params><param><value><array><data>";
  for (int i = 0; i < 1000; ++i) stray_values += "<value/><a/>";
  stray_values += "</data></array></value></param></params></methodCall>";
  expect_refused(stray_values, "line 1: expected <value>, found <a>");
}

// What a parse holds at its peak is a small multiple of the document, whatever its shape: values at the
// cap, struct members, one long string, base64, nested arrays. (Counted in bytes allocated, not pages.)
TEST(XmlRpc, AParseHoldsASmallMultipleOfTheDocument) {
  auto call_of = [](const std::string& param) {
    return "<methodCall><methodName>m</methodName><params><param>" + param + "</param></params></methodCall>";
  };
  std::string members = "<value><struct>";
  for (int i = 0; i < 100'000; ++i) members += "<member><name/><value/></member>";
  members += "</struct></value>";
  std::string nested = "<value><array><data>";
  for (int i = 0; i < 100'000; ++i) nested += "<value><array><data/></array></value>";
  nested += "</data></array></value>";
  const std::pair<const char*, std::string> cases[] = {
      {"empty values at the cap", empty_values(200'000, 16 * 200'001)},
      {"struct members", call_of(members)},
      {"one long string", call_of("<value><string>" + std::string(4'000'000, 'x') + "</string></value>")},
      {"base64", call_of("<value><base64>" + std::string(4'000'000, 'A') + "</base64></value>")},
      {"empty arrays", call_of(nested)},
  };
  for (const auto& [what, document] : cases) {
    Call call;
    const auto& text = document;  // clang 14 cannot capture a structured binding in a lambda
    const std::size_t held = peak_bytes([&] { call = parse_call(text); });
    EXPECT_LE(held, 8 * document.size()) << what << ": held " << held << " bytes for a document of "
                                         << document.size();
    std::cerr << what << ": " << document.size() << " bytes held " << held << " (" << double(held) / document.size()
              << "x)\n";
  }
}

TEST(XmlRpc, ShapesAreCheckedAsTheElementsArrive) {
  expect_refused("<methodCall><methodName>m</methodName><params><param><value> x <int>1</int></value></param>"
                 "</params></methodCall>",
                 "<value> mixes text and elements");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><int>1</int> x</value></param>"
                 "</params></methodCall>",
                 "<value> mixes text and elements");
  expect_refused("<methodCall><methodName>m<x/></methodName></methodCall>", "<methodName> holds elements");
  expect_refused("<methodCall><methodName>m</methodName><methodName>n</methodName></methodCall>",
                 "<methodCall> holds an unexpected <methodName>");
  expect_refused("<methodCall><methodName>m</methodName><params><param><value><array><data/><data/></array>"
                 "</value></param></params></methodCall>",
                 "<array> must hold exactly one <data>");
  // A member's name may follow its value, as before.
  const Call call = parse_call("<methodCall><methodName>m</methodName><params><param><value><struct><member>"
                               "<value><int>7</int></value><name>n</name></member></struct></value></param></params>"
                               "</methodCall>");
  EXPECT_EQ(*call.params[0].member("n"), Value(7));
  try {
    parse_response("<methodResponse><params><param><value/></param><param><value/></param></params>"
                   "</methodResponse>");
    ADD_FAILURE() << "two params in a response were accepted";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("<params> must hold exactly one <param>"), std::string::npos) << e.what();
  }
}

TEST(XmlRpc, NanAndInfinityAreNumbersAsPythonWritesThem) {
  const auto call = rjg::xmlrpc::parse_call(
      "<methodCall><methodName>m</methodName><params><param><value><double>nan</double></value></param>"
      "<param><value><double>-inf</double></value></param></params></methodCall>");
  ASSERT_EQ(call.params.size(), 2u);
  EXPECT_TRUE(std::isnan(call.params[0].as<double>()));
  EXPECT_EQ(call.params[1].as<double>(), -std::numeric_limits<double>::infinity());
}

}  // namespace
