// Arguments arrive as sent, unevaluated (issue #8): behind a worker that evaluates argument strings
// the way the reference server does (the test worker's --evaluate mode: Robot Framework's variables,
// inline Python, extended syntax, %{ENV}, backslashes, name=value and control words, see
// workers/test_worker/robot_eval.hpp), every string form sent as a positional argument, a named
// argument (name and value), an import argument or a kw_args entry reaches the library unchanged with
// arguments = "auto" (detected from the worker's robot/initialize answer) and "escape"; with "as-is"
// the same strings are evaluated (which shows the worker really evaluates), and a marker-file payload
// runs only then. A native worker under "auto" gets every string as sent. kw_args values the worker
// turns into text (JSON lists, pickles) are refused when a string in them would be evaluated.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace rjg::test {
namespace {

// Every form the evaluating worker knows (each one evaluates or fails there), and strings without any.
std::vector<std::string> forms() {
  return {
      "${SPACE}", "${EMPTY}", "${TRUE}", "${1}", "${-2}", "${0x10}", "@{LIST}", "&{DICT}", "%{HOME}",
      "%{RJG_NOT_SET=fallback}", "${{1+1}}", "${{__import__('os').getpid()}}", "${SPACE.__class__('x')}",
      "a ${SPACE} b", "x${EMPTY}y${TRUE}", "${nope}", "${unclosed", "${", "$${SPACE}", "${}", "\\", "a\\",
      "a\\\\", "\\\\\\", "a\\b", "\\n", "\\t\\r", "\\x41", "\\u00e4", "\\U0001F600", "\\${SPACE}",
      "\\\\${SPACE}", "name=value", "a=b=c", "\\=", "x\\=1", "=", "=x", "${SPACE}=1", "a=${SPACE}", "AND",
      "ELSE", "ELSE IF", "WITH NAME", "AS", "*{x}", "&{", "%{", "@{", "\\AND", "", "plain", "päivää 世界 😀",
      "a${SPACE}=${{1}}\\\\n", "mixed \\${x} ${x} %{HOME} @{LIST} \\ =",
  };
}

// Payloads that "run code" in the evaluating worker: each creates its marker file when evaluated.
struct Markers {
  explicit Markers(const fs::path& dir) : dir(dir) {}
  fs::path dir;
  fs::path path(std::string_view name) const { return dir / name; }
  std::string inline_python(std::string_view name) const {
    return fmt::format("${{{{open('{}','w')}}}}", path(name).string());
  }
  std::string extended(std::string_view name) const {
    return fmt::format("${{SPACE.__class__.__name__ or open('{}','w')}}", path(name).string());
  }
  std::vector<std::string> payloads(std::string_view prefix) const {
    return {inline_python(std::string(prefix) + "-inline"), extended(std::string(prefix) + "-extended"),
            "before " + inline_python(std::string(prefix) + "-embedded") + " after"};
  }
  std::vector<fs::path> files(std::string_view prefix) const {
    return {path(std::string(prefix) + "-inline"), path(std::string(prefix) + "-extended"),
            path(std::string(prefix) + "-embedded")};
  }
};

json::array as_array(const std::vector<std::string>& strings) {
  json::array out;
  for (const auto& s : strings) out.emplace_back(s);
  return out;
}

// A protocol 4 pickle of a list of str: PROTO 4, EMPTY_LIST, MARK, SHORT_BINUNICODE..., APPENDS, STOP.
std::string pickle_hex(const std::vector<std::string>& strings) {
  std::string bytes = "\x80\x04]";
  bytes += '(';
  for (const auto& s : strings) {
    bytes += '\x8c';
    bytes += static_cast<char>(s.size());
    bytes += s;
  }
  bytes += "e.";
  std::string hex;
  for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
  return hex;
}
json::value pickled(const std::vector<std::string>& strings) {
  return json::object{{"__pickled__", pickle_hex(strings)}};
}

class ArgumentsTest : public GatewayTest {
 protected:
  void start_gateway() {
    auto evaluating = test_library("Evaluating", {"--evaluate"});
    auto escaping = test_library("EvaluatingEscape", {"--evaluate"});
    escaping.extra_toml = "arguments = \"escape\"\n";
    auto as_is = test_library("EvaluatingAsIs", {"--evaluate"});
    as_is.extra_toml = "arguments = \"as-is\"\n";
    auto native = test_library("Native");
    GatewayOptions options;
    options.env["HOME"] = "/home/from-env";
    start({evaluating, escaping, as_is, native}, options);
  }

  json::object echo(client::RpcClient& client, const std::string& token, json::array args, json::object kwargs) {
    auto reply = client.run_keyword(token, "Echo Arguments", std::move(args), std::move(kwargs));
    EXPECT_TRUE(reply.ok() && !reply.keyword_error()) << describe(reply);
    auto v = keyword_value(reply);
    return v.is_object() ? v.as_object() : json::object{};
  }

  json::object import_args(client::RpcClient& client, const std::string& token) {
    auto reply = client.run_keyword(token, "Get Resolved Import Args");
    EXPECT_TRUE(reply.ok() && !reply.keyword_error()) << describe(reply);
    auto v = keyword_value(reply);
    return v.is_object() ? v.as_object() : json::object{};
  }

  // Every form as positional args, named values, names, import args and kw_args (names and values):
  // the library receives exactly what was sent, and no payload runs.
  void expect_unchanged(const std::string& library) {
    SCOPED_TRACE(library);
    TempDir dir("rjg-markers");
    Markers markers(dir.path());
    auto all = forms();
    for (auto& p : markers.payloads("kw")) all.push_back(p);
    json::object named, by_name, kw_args;
    for (std::size_t i = 0; i < all.size(); ++i) {
      named[fmt::format("value{}", i)] = all[i];
      if (!all[i].empty()) by_name[all[i]] = fmt::format("v{}", i);
    }
    // Import: positional args, kw_args values and names, and the import payloads.
    auto import_positional = forms();
    for (auto& p : markers.payloads("import")) import_positional.push_back(p);
    kw_args = named;
    for (auto& [k, v] : by_name) kw_args[k] = v;
    client::RpcClient client = connect();
    const std::string token = open_library(client, library, as_array(import_positional), kw_args);

    auto resolved = import_args(client, token);
    EXPECT_EQ(resolved["args"], as_array(import_positional));
    EXPECT_EQ(resolved["kw_args"], kw_args);
    EXPECT_FALSE(resolved.contains("alias"));

    auto got = echo(client, token, as_array(all), {});
    EXPECT_EQ(got["args"], as_array(all));
    EXPECT_EQ(got["kwargs"], json::object());
    got = echo(client, token, {}, named);
    EXPECT_EQ(got["args"], json::array());
    EXPECT_EQ(got["kwargs"], named);
    got = echo(client, token, as_array(forms()), by_name);
    EXPECT_EQ(got["args"], as_array(forms()));
    EXPECT_EQ(got["kwargs"], by_name);

    for (const auto& prefix : {"kw", "import"})
      for (const auto& file : markers.files(prefix)) EXPECT_FALSE(fs::exists(file)) << file << " was created";
  }
};

TEST_F(ArgumentsTest, AutoDetectsTheEvaluatingWorkerAndEveryFormArrivesUnchanged) {
  start_gateway();
  expect_unchanged("Evaluating");
  // The gateway logged at debug that it escaped (the worker's own stderr, which it relays, may name
  // values: the gateway's lines do not).
  EXPECT_TRUE(contains(gateway().log(), "argument string(s) for worker pid")) << "no debug line about escaping";
}

TEST_F(ArgumentsTest, EscapeAlwaysEscapes) {
  start_gateway();
  expect_unchanged("EvaluatingEscape");
}

TEST_F(ArgumentsTest, AsIsLetsTheWorkerEvaluateAndThePayloadsRun) {
  start_gateway();
  TempDir dir("rjg-markers");
  Markers markers(dir.path());
  client::RpcClient client = connect();
  auto import_payloads = markers.payloads("import");
  const std::string token = open_library(client, "EvaluatingAsIs", as_array(import_payloads),
                                         json::object{{"flag", "${TRUE}"}, {"text", "a\\b"}});
  for (const auto& file : markers.files("import")) EXPECT_TRUE(fs::exists(file)) << file << " was not created";
  auto resolved = import_args(client, token);
  EXPECT_EQ(resolved["kw_args"], (json::object{{"flag", true}, {"text", "ab"}}));

  // Each of these is evaluated into something else (or into named arguments, or consumed).
  const std::vector<std::pair<std::string, json::value>> evaluated = {
      {"${SPACE}", " "},     {"${EMPTY}", ""},      {"${TRUE}", true},       {"${1}", 1},
      {"%{HOME}", "/home/from-env"}, {"%{RJG_NOT_SET=fallback}", "fallback"}, {"${{1+1}}", "EVALUATED(1+1)"},
      {"a\\b", "ab"},        {"a\\", "a"},          {"\\x41", "A"},          {"\\${SPACE}", "${SPACE}"},
      {"x${EMPTY}y", "xy"},  {"\\n", "\n"},
  };
  for (const auto& [sent, expected] : evaluated) {
    SCOPED_TRACE(sent);
    auto got = echo(client, token, json::array{json::value(sent)}, {});
    EXPECT_EQ(got["args"], json::array{expected});
    got = echo(client, token, {}, json::object{{"value", sent}});
    EXPECT_EQ(got["kwargs"], (json::object{{"value", expected}}));
  }
  auto got = echo(client, token, json::array{"@{LIST}", "AND", "plain", "name=value"}, {});
  EXPECT_EQ(got["args"], (json::array{"a", "b", "plain"}));
  EXPECT_EQ(got["kwargs"], (json::object{{"name", "value"}}));
  got = echo(client, token, json::array{"&{DICT}"}, {});
  EXPECT_EQ(got["kwargs"], (json::object{{"a", "1"}}));
  auto failed = client.run_keyword(token, "Echo Arguments", json::array{"${nope}"});
  ASSERT_NE(failed.keyword_error(), nullptr) << describe(failed);

  auto payloads = markers.payloads("kw");
  got = echo(client, token, json::array{json::value(payloads[0])}, json::object{{"x", payloads[1]}, {"y", payloads[2]}});
  for (const auto& file : markers.files("kw")) EXPECT_TRUE(fs::exists(file)) << file << " was not created";
}

TEST_F(ArgumentsTest, NativeWorkerUnderAutoGetsStringsAsSent) {
  start_gateway();
  auto all = forms();
  json::object named, kw_args;
  for (std::size_t i = 0; i < all.size(); ++i) named[fmt::format("value{}", i)] = all[i];
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].empty()) kw_args[all[i]] = all[i];
  client::RpcClient client = connect();
  const std::string token = open_library(client, "Native", as_array(all), kw_args);
  auto resolved = import_args(client, token);
  EXPECT_EQ(resolved["args"], as_array(all));
  EXPECT_EQ(resolved["kw_args"], kw_args);
  auto got = echo(client, token, as_array(all), named);
  EXPECT_EQ(got["args"], as_array(all));
  EXPECT_EQ(got["kwargs"], named);
  // Byte for byte: the worker's answer (which echoes what it received) holds each string literal as the
  // client's encoder wrote it, escaped only by JSON.
  auto reply = client.run_keyword(token, "Echo Arguments", json::array{"a\\b${x}=AND"});
  EXPECT_TRUE(contains(reply.text, R"("a\\b${x}=AND")")) << reply.text;
  // A list with syntax in kw_args is not checked either: the native worker does not evaluate it.
  client::RpcClient other = connect();
  other.initialize();
  auto import = other.import_library("Native", {}, json::object{{"opts", pickled({"${SPACE}"})}});
  EXPECT_TRUE(import.ok()) << describe(import);
}

TEST_F(ArgumentsTest, KwArgsThatBecomeTextAreRefusedWhenAStringInThemWouldBeEvaluated) {
  start_gateway();
  for (const std::string library : {"Evaluating", "EvaluatingEscape"}) {
    SCOPED_TRACE(library);
    struct Case {
      json::value value;
      std::string shown;  // the string the message names
    };
    const std::vector<Case> refused = {
        {pickled({"plain", "${SPACE}"}), "${SPACE}"},
        {pickled({"${{__import__('os').system('true')}}"}), "${{__import__('os').system('true')}}"},
        {pickled({"a\\b"}), "a\\\\b"},  // shown printable: the backslash doubled
        {json::array{"ok", "%{HOME}"}, "%{HOME}"},
        {json::object{{"@{LIST}", 1}}, "@{LIST}"},
        {json::array{1, json::array{pickled({"&{DICT}"})}}, "&{DICT}"},
    };
    for (const auto& c : refused) {
      SCOPED_TRACE(json::serialize(c.value));
      client::RpcClient client = connect();
      client.initialize();
      auto reply = client.import_library(library, {}, json::object{{"opts", c.value}});
      ASSERT_FALSE(reply.ok()) << describe(reply);
      EXPECT_EQ(reply.error_code(), protocol::kPickleRefused) << describe(reply);
      const std::string msg = reply.error_message();
      EXPECT_TRUE(contains(msg, "kw_args.opts")) << msg;
      EXPECT_TRUE(contains(msg, c.shown)) << msg;
      EXPECT_TRUE(contains(msg, library)) << msg;
      EXPECT_TRUE(contains(msg, "arguments = \"as-is\"")) << msg;
    }
    // Clean lists and pickles pass (their text holds nothing the worker evaluates).
    client::RpcClient client = connect();
    client.initialize();
    auto ok = client.import_library(library, {}, json::object{{"opts", pickled({"plain", "text=1 AND"})},
                                                               {"list", json::array{"a", 1, true}}});
    ASSERT_TRUE(ok.ok()) << describe(ok);
    const std::string token(ok.result->as_object().at("token").as_string());
    auto resolved = import_args(client, token);
    EXPECT_EQ(resolved["kw_args"].as_object()["list"], json::value("['a', 1, True]"));
  }
  // The refusals did not log the strings.
  EXPECT_FALSE(contains(gateway().log(), "__import__")) << "an argument value was logged";
}

}  // namespace
}  // namespace rjg::test
