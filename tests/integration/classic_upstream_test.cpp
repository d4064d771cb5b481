// A classic remote server behind the gateway (upstream = "http://..."), end to end: Python's own
// xmlrpc.server implementing the remote API as the User Guide describes it (classic_server.py), the
// gateway starting its bridge worker (robot-classic-bridge), and a JSON-RPC client importing the library
// and running keywords: definitions from get_library_information and from the older per-keyword
// methods, arguments and results of every kind, logs in order before the answer, failures with their
// modes, and a server that is not there. Nothing is timed: every wait is a bound.
#include "tests/integration/gateway_test.hpp"

#include "common/pickle/pickle_value.hpp"

#include <fmt/format.h>

namespace rjg::test {
namespace {

const std::string kServer = std::string(RJG_TEST_SOURCE_DIR) + "/classic_server.py";

class ClassicUpstreamTest : public GatewayTest {
 protected:
  // Starts the classic server (its port is written to a file once it listens) and a gateway whose library
  // "Classic" is that server.
  void start_with_server(std::vector<std::string> server_args = {}, std::string library_toml = {}) {
    const auto python = find_program("python3");
    ASSERT_TRUE(python) << "python3 is not installed (deploy/install-deps.sh installs it)";
    port_file_ = dir_.path() / "port";
    std::vector<std::string> argv{*python, kServer, port_file_.string()};
    for (auto& a : server_args) argv.push_back(std::move(a));
    server_.emplace();
    server_->start(argv, dir_.path() / "server.out", dir_.path() / "server.err");
    ASSERT_TRUE(eventually([&] { return fs::exists(port_file_); }, 20s))
        << "the classic server did not start: " << read_file(dir_.path() / "server.err");
    const auto port = read_file(port_file_);
    LibrarySpec spec;
    spec.name = "Classic";
    spec.extra_toml = fmt::format("upstream = \"http://127.0.0.1:{}\"\n{}", port, library_toml);
    start({spec, test_library("TestLibrary")});
  }
  void TearDown() override {
    if (server_) server_->kill_and_reap();
    GatewayTest::TearDown();
  }

  TempDir dir_{"rjg-classic-server"};
  fs::path port_file_;
  std::optional<ChildProcess> server_;
};

TEST_F(ClassicUpstreamTest, AnImportDescribesTheServersKeywords) {
  start_with_server();
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Classic");
  ASSERT_TRUE(reply.ok()) << describe(reply) << gateway().log_tail();
  const auto& definition = reply.result->at("definition").as_object();
  EXPECT_EQ(definition.at("doc"), "A library for the gateway's tests of classic upstreams.");
  const auto* add = keyword_definition(definition, "add");
  ASSERT_TRUE(add) << definition;
  const auto& args = add->at("args").as_array();
  ASSERT_EQ(args.size(), 4u) << *add;
  EXPECT_EQ(args[0].at("name"), "a");
  EXPECT_EQ(args[0].at("type"), "int");
  EXPECT_EQ(args[0].at("kind"), "POSITIONAL_OR_NAMED");
  EXPECT_EQ(args[1].at("name"), "b");
  EXPECT_EQ(args[1].at("has_default"), true);
  EXPECT_EQ(args[1].at("default"), "2");
  EXPECT_EQ(args[2].at("kind"), "VAR_POSITIONAL");
  EXPECT_EQ(args[3].at("kind"), "VAR_NAMED");
  EXPECT_EQ(add->at("tags"), (json::array{"math"}));
  EXPECT_EQ(add->at("doc"), "Adds numbers.");
}

TEST_F(ClassicUpstreamTest, AServerWithoutLibraryInformationIsAskedKeywordByKeyword) {
  start_with_server({"--no-library-information"});
  auto [client, token] = session("Classic");
  auto reply = client.import_library("Classic");
  ASSERT_TRUE(reply.ok()) << describe(reply);
  const auto* add = keyword_definition(reply.result->at("definition").as_object(), "add");
  ASSERT_TRUE(add);
  EXPECT_EQ(add->at("args").as_array().size(), 4u) << *add;
  EXPECT_EQ(add->at("tags"), (json::array{"math"}));
  EXPECT_EQ(keyword_value(client.run_keyword(token, "add", {1, 2, 3}, {{"x", 4}})), 10);
}

TEST_F(ClassicUpstreamTest, KeywordsArgumentsResultsLogsAndFailures) {
  start_with_server();
  auto [client, token] = session("Classic");
  for (const json::value& v : {json::value("text"), json::value(42), json::value(1.5), json::value(true),
                               json::value(json::array{1, "two"})}) {
    const auto reply = client.run_keyword(token, "echo", json::array{v});
    ASSERT_TRUE(reply.ok()) << describe(reply);
    EXPECT_EQ(keyword_value(reply), v) << describe(reply);
  }
  // None comes back as "", as from every classic server.
  EXPECT_EQ(keyword_value(client.run_keyword(token, "get_none")), "");
  // Bytes come back as Python's pickle of bytes, as the reference server sends them.
  const auto bytes = keyword_value(client.run_keyword(token, "get_bytes"));
  ASSERT_TRUE(bytes.is_object() && bytes.as_object().contains("__pickled__")) << bytes;
  auto decoded = pickle::decode_pickle_hex(bytes.at("__pickled__").as_string());
  ASSERT_TRUE(std::holds_alternative<pickle::PyValue>(decoded)) << std::get<std::string>(decoded);
  EXPECT_EQ(std::get<pickle::PyValue>(decoded), pickle::PyValue(pickle::PyBytes{std::string("\x00\x01\xfe\xff", 4)}));
  // A structure holding bytes and a datetime travels pickled whole; its plain parts are there.
  const auto structure = keyword_value(client.run_keyword(token, "get_structure"));
  ASSERT_TRUE(structure.is_object() && structure.as_object().contains("__pickled__")) << structure;
  auto tree = pickle::decode_pickle_hex(structure.at("__pickled__").as_string());
  ASSERT_TRUE(std::holds_alternative<pickle::PyValue>(tree));
  const auto text = pickle::py_repr(std::get<pickle::PyValue>(tree));
  EXPECT_TRUE(contains(text, "'list': [1, 'two', 3.5, True]")) << text;
  EXPECT_TRUE(contains(text, "'bytes': b'xy'")) << text;
  EXPECT_TRUE(contains(text, "datetime.datetime(2024, 2, 29, 23, 59, 58)")) << text;

  // The server's output arrives as robot/log notifications, in order, before the answer.
  std::vector<std::pair<std::string, std::string>> logs;
  const auto logged = client.run_keyword(token, "log_lines", {4}, {}, [&](const protocol::Message& m) {
    const auto p = m.params();
    logs.emplace_back(json::value_to<std::string>(p.at("level")),
                      json::value_to<std::string>(p.at("message")) + (p.as_object().contains("html") && p.at("html") == true ? " (html)" : ""));
  });
  EXPECT_EQ(keyword_value(logged), 4);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"INFO", "line 0"}, {"WARN", "line 1"}, {"DEBUG", "line 2"}, {"INFO", "line 3"}, {"INFO", "<b>bold</b> (html)"}};
  EXPECT_EQ(logs, expected);

  // Failures: the message, the traceback, and the mode.
  const auto failed = client.run_keyword(token, "fail_with", {"boom"});
  ASSERT_TRUE(failed.keyword_error()) << describe(failed);
  EXPECT_EQ(failed.keyword_error()->at("message"), "ValueError: boom");
  EXPECT_TRUE(contains(json::value_to<std::string>(failed.keyword_error()->at("traceback")), "Traceback"));
  EXPECT_FALSE(failed.keyword_error()->contains("mode"));
  const auto continuable = client.run_keyword(token, "fail_with", {"go on", true});
  EXPECT_EQ(continuable.keyword_error()->at("mode"), "CONTINUABLE") << describe(continuable);
  const auto fatal = client.run_keyword(token, "fail_with", {"stop", false, true});
  EXPECT_EQ(fatal.keyword_error()->at("mode"), "FATAL") << describe(fatal);
  // A keyword the server does not have: its fault's text fails the keyword.
  const auto missing = client.run_keyword(token, "no_such_keyword");
  ASSERT_TRUE(missing.keyword_error()) << describe(missing);
}

// Issue 23 item 7: what Robot's own Remote library (robot/libraries/Remote.py) gives for the same calls.
// A pickled value, as a Python client sends it.
json::value pickled(const pickle::PyValue& value) { return json::object{{"__pickled__", pickle::encode_pickle_hex(value)}}; }

std::string error_message_of(const client::RpcReply& reply) {
  return reply.keyword_error() ? json::value_to<std::string>(reply.keyword_error()->at("message"))
                               : "no keyword error: " + describe(reply);
}

TEST_F(ClassicUpstreamTest, ResultsAndFailuresAreWhatRobotsRemoteGives) {
  start_with_server();
  auto [client, token] = session("Classic");
  // Every struct a DotDict, at any depth (RemoteResult._convert), so ${result.outer.inner} works.
  const auto dicts = keyword_value(client.run_keyword(token, "get_dicts"));
  ASSERT_TRUE(dicts.is_object() && dicts.as_object().contains("__pickled__")) << dicts;
  auto decoded = pickle::decode_pickle_hex(dicts.at("__pickled__").as_string());
  ASSERT_TRUE(std::holds_alternative<pickle::PyValue>(decoded)) << std::get<std::string>(decoded);
  const auto* list = std::get<pickle::PyValue>(decoded).get<pickle::PyList>();
  ASSERT_TRUE(list && list->items.size() == 1);
  const auto* outer = list->items[0].get<pickle::PyDict>();
  ASSERT_TRUE(outer && outer->items.size() == 1);
  EXPECT_EQ(outer->kind, pickle::PyDict::Kind::dot_dict);
  const auto* inner = outer->items[0].second.get<pickle::PyDict>();
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->kind, pickle::PyDict::Kind::dot_dict);
  // A flat struct too.
  const auto flat = keyword_value(client.run_keyword(token, "echo", json::array{json::object{{"k", "v"}}}));
  ASSERT_TRUE(flat.is_object() && flat.as_object().contains("__pickled__")) << flat;
  auto flat_value = pickle::decode_pickle_hex(flat.at("__pickled__").as_string());
  ASSERT_TRUE(std::holds_alternative<pickle::PyValue>(flat_value));
  pickle::PyDict expected;
  expected.kind = pickle::PyDict::Kind::dot_dict;
  expected.items.emplace_back(pickle::PyValue("k"), pickle::PyValue("v"));
  EXPECT_EQ(std::get<pickle::PyValue>(flat_value), pickle::PyValue(expected));
  // No return member: "" (Remote's default), not None.
  EXPECT_EQ(keyword_value(client.run_keyword(token, "no_return")), "");

  // Remote's texts for a broken server, a binary message as its text (safe_str), NUL included.
  const auto no_status = client.run_keyword(token, "no_status");
  EXPECT_TRUE(contains(error_message_of(no_status), "Invalid remote result dictionary: {}")) << describe(no_status);
  const auto dropped = client.run_keyword(token, "drop_connection");
  EXPECT_TRUE(contains(error_message_of(dropped), "Connection to remote server broken: ")) << describe(dropped);
  EXPECT_TRUE(contains(error_message_of(dropped), "took the call, so the keyword may have run in part"))
      << describe(dropped);
  const auto binary = client.run_keyword(token, "fail_binary");
  EXPECT_EQ(error_message_of(binary), std::string("nul\0bell\a", 9)) << describe(binary);
  EXPECT_EQ(binary.keyword_error()->at("type"), "RemoteError");
  // The import goes on.
  EXPECT_EQ(keyword_value(client.run_keyword(token, "echo", {"still"})), "still");
}

TEST_F(ClassicUpstreamTest, ArgumentsAreCoercedAsRobotsRemoteCoercesThem) {
  start_with_server();
  auto [client, token] = session("Classic");
  auto seen = [&](const json::value& argument) {
    const auto reply = client.run_keyword(token, "describe", json::array{argument});
    return reply.keyword_error() ? "failed: " + error_message_of(reply) : json::value_to<std::string>(keyword_value(reply));
  };
  pickle::PyTimedelta minute_and_a_half_second;
  minute_and_a_half_second.seconds = 60;
  minute_and_a_half_second.microseconds = 500000;
  pickle::PyDict int_key;
  int_key.items.emplace_back(pickle::PyValue(std::int64_t{1}), pickle::PyValue("one"));
  int_key.items.emplace_back(pickle::PyValue("none"), pickle::PyValue());
  EXPECT_EQ(seen(pickled(pickle::PyDate{2024, 2, 29})), "datetime:datetime.datetime(2024, 2, 29, 0, 0)");
  EXPECT_EQ(seen(pickled(minute_and_a_half_second)), "float:60.5");
  EXPECT_EQ(seen(nullptr), "str:''");
  EXPECT_EQ(seen(json::value(json::string(std::string_view("nul\0x", 5)))), "bytes:b'nul\\x00x'");
  EXPECT_EQ(seen(pickled(int_key)), "dict:{'1': 'one', 'none': ''}");
  EXPECT_EQ(seen(pickled(pickle::PyTuple{{pickle::PyValue(std::int64_t{1}), pickle::PyValue()}})), "list:[1, '']");
  EXPECT_EQ(seen(std::int64_t{2147483647}), "int:2147483647");

  // What Remote refuses fails the keyword with its exception's type and text; nothing reaches the server.
  const auto big = client.run_keyword(token, "describe", json::array{std::int64_t{1} << 31});
  ASSERT_TRUE(big.keyword_error()) << describe(big);
  EXPECT_EQ(big.keyword_error()->at("type"), "OverflowError");
  EXPECT_TRUE(contains(error_message_of(big), "int exceeds XML-RPC limits (args[0]")) << describe(big);
  pickle::PyDict binary_key;
  binary_key.items.emplace_back(pickle::PyValue(std::string("a\0", 2)), pickle::PyValue(std::int64_t{1}));
  const auto key = client.run_keyword(token, "describe", json::array{pickled(binary_key)});
  ASSERT_TRUE(key.keyword_error()) << describe(key);
  EXPECT_EQ(key.keyword_error()->at("type"), "ValueError");
  EXPECT_TRUE(contains(error_message_of(key), "Dictionary keys cannot be binary. Got b'a\\x00'.")) << describe(key);
  const auto wide = client.run_keyword(token, "describe", json::array{std::string("\xc4\x80\x01", 3)});
  EXPECT_TRUE(contains(error_message_of(wide), "Cannot represent '\xc4\x80\\x01' as binary.")) << describe(wide);
  // An XML element (Robot's XML library): Remote would send its str(), which only the worker's Python
  // process can write (it holds the element's address). Refused, saying what to send instead.
  const auto element = client.run_keyword(
      token, "describe", json::array{pickled(pickle::PyElement{"root", {}, "text", std::nullopt, {}})});
  ASSERT_TRUE(element.keyword_error()) << describe(element);
  EXPECT_EQ(element.keyword_error()->at("type"), "ValueError");
  EXPECT_TRUE(contains(error_message_of(element), "<Element 'root'> (args[0]) cannot be sent to a classic remote server"))
      << describe(element);
  EXPECT_TRUE(contains(error_message_of(element), "Element To String")) << describe(element);
  // An object outside the data-only subset (fractions.Fraction(1, 3)) is refused by the gateway, and the
  // advice is what to send: pickle = "allow" would not make the bridge carry it.
  const auto fraction = client.run_keyword(
      token, "describe",
      json::array{json::object{{"__pickled__", "80049522000000000000008c096672616374696f6e73948c084672616374696f6e"
                                               "9493944b014b03869452942e"}}});
  ASSERT_TRUE(fraction.keyword_error()) << describe(fraction);
  EXPECT_EQ(fraction.keyword_error()->at("type"), "PickleRefused");
  EXPECT_TRUE(contains(fraction.failure_message(), "is a classic remote server (http://127.0.0.1:")) << describe(fraction);
  EXPECT_TRUE(contains(fraction.failure_message(), "pass text, numbers, bytes, dates")) << describe(fraction);
  EXPECT_FALSE(contains(fraction.failure_message(), "pickle = \"allow\"")) << describe(fraction);
}

// The definition keeps "*" (NAMED_ONLY_MARKER): the stock client rebuilds Robot's spec from the markers,
// and without it Robot refuses the keyword ("Non-default argument after default arguments").
void expect_named_only_marker(const json::object& definition) {
  const auto* named_only = keyword_definition(definition, "named_only");
  ASSERT_TRUE(named_only) << definition;
  const auto& args = named_only->at("args").as_array();
  ASSERT_EQ(args.size(), 4u) << *named_only;
  EXPECT_EQ(args[0].at("kind"), "POSITIONAL_OR_NAMED");
  EXPECT_EQ(args[1].at("kind"), "NAMED_ONLY_MARKER");
  EXPECT_EQ(args[2].at("name"), "second");
  EXPECT_EQ(args[2].at("kind"), "NAMED_ONLY");
  EXPECT_EQ(args[2].at("default"), "2");
  EXPECT_EQ(args[3].at("name"), "third");
  EXPECT_EQ(args[3].at("has_default"), false);
}

TEST_F(ClassicUpstreamTest, KeywordOnlyArgumentsKeepTheirMarker) {
  start_with_server();
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Classic");
  ASSERT_TRUE(reply.ok()) << describe(reply);
  expect_named_only_marker(reply.result->at("definition").as_object());
  const auto token = json::value_to<std::string>(reply.result->at("token"));
  EXPECT_EQ(keyword_value(client.run_keyword(token, "named_only", {"one"}, {{"third", "three"}})), "one 2 three");
}

TEST_F(ClassicUpstreamTest, KeywordOnlyArgumentsKeepTheirMarkerFromTheOlderMethods) {
  start_with_server({"--no-library-information"});
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Classic");
  ASSERT_TRUE(reply.ok()) << describe(reply);
  expect_named_only_marker(reply.result->at("definition").as_object());
}

// An answer beyond the bridge's limits fails that keyword with an error naming the server and the limit,
// and the import goes on (issue 22: the bridge read answers of up to 128 MiB and built a tree of the
// whole document before it looked at them).
TEST_F(ClassicUpstreamTest, AnAnswerBeyondTheLimitsFailsItsKeywordNamingTheServerAndTheLimit) {
  start_with_server({}, "max_answer_bytes = \"64KiB\"\n");
  auto [client, token] = session("Classic");
  const std::string server = "The classic remote server at http://127.0.0.1:" + read_file(port_file_);
  auto message = [](const client::RpcReply& reply) {
    return reply.keyword_error() ? json::value_to<std::string>(reply.keyword_error()->at("message"))
                                 : "no keyword error: " + describe(reply);
  };
  const auto large = client.run_keyword(token, "big_text", {100'000});
  const auto too_large = message(large);
  EXPECT_TRUE(contains(too_large, server) && contains(too_large, "answered run_keyword with more than 65536 bytes") &&
              contains(too_large, "max_answer_bytes"))
      << too_large;
  const auto deep = client.run_keyword(token, "nested", {100});
  const auto too_deep = message(deep);
  EXPECT_TRUE(contains(too_deep, server) && contains(too_deep, "arrays and structs nested deeper than the limit") &&
              contains(too_deep, "max_answer_bytes = 65536"))
      << too_deep;
  // The import goes on, and answers within the limits pass.
  EXPECT_EQ(keyword_value(client.run_keyword(token, "big_text", {1000})), json::value(std::string(1000, 'x')));
  // Nested lists travel pickled (Python's dialect: only flat lists are JSON).
  const pickle::PyValue three_deep{pickle::PyList{{pickle::PyList{{pickle::PyList{{pickle::PyList{}}}}}}}};
  EXPECT_EQ(keyword_value(client.run_keyword(token, "nested", {3})), pickled(three_deep));
}

TEST_F(ClassicUpstreamTest, AServerThatIsGoneGivesAnErrorNamingItAndTheSessionGoesOn) {
  start_with_server();
  auto [client, token] = session("Classic");
  EXPECT_EQ(keyword_value(client.run_keyword(token, "echo", {1})), 1);
  server_->kill_and_reap();
  const auto reply = client.run_keyword(token, "echo", {2});
  // Robot's Remote library's words, then the server and what to do.
  ASSERT_TRUE(reply.keyword_error()) << describe(reply);
  EXPECT_EQ(reply.keyword_error()->at("type"), "RuntimeError") << describe(reply);
  EXPECT_TRUE(contains(reply.failure_message(), "Connection to remote server broken: cannot connect")) << describe(reply);
  EXPECT_TRUE(contains(reply.failure_message(), "The keyword did not reach the classic remote server at http://127.0.0.1:"))
      << describe(reply);
  // The session (and its other library) carry on.
  const auto other = open_library(client, "TestLibrary");
  EXPECT_EQ(keyword_value(client.run_keyword(other, "Echo", {"still here"})), "still here");
  // A new import of the library names the server too.
  const auto again = client.import_library("Classic");
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(contains(again.error_message(), "classic remote server at http://127.0.0.1:")) << describe(again);
}

}  // namespace
}  // namespace rjg::test
