// A client session through the real gateway: handshake, import, keyword calls, ids, errors, logs.
#include "tests/integration/gateway_test.hpp"

#include "common/protocol/framing.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rjg::test {
namespace {

json::value parse(std::string_view text) { return json::parse(text); }

bool has_keyword(const json::object& definition, std::string_view name) {
  auto it = definition.find("keywords");
  if (it == definition.end() || !it->value().is_array()) return false;
  for (const auto& kw : it->value().get_array()) {
    if (kw.is_object() && kw.get_object().contains("name") && kw.get_object().at("name") == json::value(name))
      return true;
  }
  return false;
}

using SessionTest = GatewayTest;

TEST_F(SessionTest, FullSessionLikeTheRealClient) {
  start();
  client::RpcClient c = connect();

  json::object init_params;
  init_params["capabilities"] = json::object{};
  init_params["client_info"] = json::object{{"name", "RobotFramework JsonRpcRemote Client"}, {"version", "0.2.0"}};
  auto init = c.request(protocol::kInitialize, init_params);
  RJG_ASSERT_OK(init);
  EXPECT_EQ(init.id, json::value("1"));
  ASSERT_TRUE(init.result->is_object()) << describe(init);
  const auto& result = init.result->get_object();
  ASSERT_TRUE(result.contains("capabilities")) << describe(init);
  const auto& caps = result.at("capabilities").as_object();
  EXPECT_EQ(caps.at("support_exit"), json::value(true)) << describe(init);
  EXPECT_EQ(caps.at("libraries"), parse(R"(["TestLibrary","SecondLibrary"])")) << describe(init);
  ASSERT_TRUE(result.contains("server_info")) << describe(init);
  const auto& info = result.at("server_info").as_object();
  EXPECT_EQ(info.at("name"), json::value("robot-jsonrpc-gateway"));
  ASSERT_TRUE(info.contains("version") && info.at("version").is_string()) << describe(init);
  EXPECT_FALSE(info.at("version").get_string().empty());
  c.notify(protocol::kInitialized, json::object{});

  // Import arguments reach the worker unchanged.
  json::array import_args = parse(R"(["a", 1, 2.5, null, true, {"__pickled__": "8004950b000000000000005d94284b014b024b03652e"}, [1, {"x": "y"}]])").as_array();
  json::object import_kwargs = parse(R"({"k": "v", "n": 2, "nested": {"list": [1, 2, {"deep": null}]}, "ü": "ß"})").as_object();
  auto imported = c.import_library("TestLibrary", import_args, import_kwargs);
  RJG_ASSERT_OK(imported);
  const auto& ir = imported.result->as_object();
  ASSERT_TRUE(ir.contains("token") && ir.at("token").is_string()) << describe(imported);
  std::string token(ir.at("token").get_string());
  EXPECT_FALSE(token.empty());
  ASSERT_TRUE(ir.contains("definition") && ir.at("definition").is_object()) << describe(imported);
  const auto& definition = ir.at("definition").get_object();
  for (auto name : {"Echo", "Sleep", "Log Messages", "Fail", "Crash", "Get Pid", "Get Import Args"})
    EXPECT_TRUE(has_keyword(definition, name)) << "definition lacks keyword " << name << ": " << describe(imported);

  auto got = c.run_keyword(token, "Get Import Args");
  RJG_ASSERT_KEYWORD_OK(got);
  json::object expected_import{{"args", import_args}, {"kw_args", import_kwargs}};
  EXPECT_EQ(keyword_value(got), json::value(expected_import)) << describe(got);

  // Echo: every kind of JSON value comes back identical.
  for (std::string_view text :
       {R"("hello")", R"("")", R"("ünïcødé ✓ 😀 \u0000 \n\t \"q\" \\")", "0", "-1", "42", "9223372036854775807",
        "-9223372036854775808", "18446744073709551615", "3.5", "-0.125", "1e300", "true", "false", "null", "[]",
        "{}", R"([1, "two", 3.0, null, [false, {"a": {}}]])",
        R"({"a": [1, {"b": null}], "c": {"d": "e", "f": [[], {}]}, "": "empty key"})",
        R"({"__pickled__": "8004950b000000000000005d94284b014b024b03652e"})",
        R"([{"__pickled__": "8004950b000000000000005d94284b014b024b03652e"}, {"__pickled__": "8004950a000000000000007d948c0161944b01732e"}])"}) {
    json::value value = parse(text);
    auto reply = c.run_keyword(token, "Echo", json::array{value});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), value) << "Echo " << text << " -> " << describe(reply);
  }
  // Named argument.
  {
    auto reply = c.run_keyword(token, "Echo", {}, json::object{{"value", "by name"}});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), json::value("by name")) << describe(reply);
  }

  // A failing keyword is a normal response carrying RunKeywordResult.error.
  {
    auto reply = c.run_keyword(token, "Fail", json::array{"it broke", "ValueError", "Traceback: here"});
    RJG_ASSERT_OK(reply);
    const auto* err = reply.keyword_error();
    ASSERT_NE(err, nullptr) << describe(reply);
    EXPECT_EQ(err->at("message"), json::value("it broke")) << describe(reply);
    EXPECT_EQ(err->at("type"), json::value("ValueError")) << describe(reply);
    EXPECT_EQ(err->at("traceback"), json::value("Traceback: here")) << describe(reply);
  }

  pid_t pid = remember_pid(worker_pid(c, token));
  ASSERT_GT(pid, 0);
  EXPECT_NE(pid, gateway().pid());

  auto fin = c.finalize_library(token);
  RJG_ASSERT_OK(fin);
  EXPECT_EQ(*fin.result, json::value(json::object{})) << describe(fin);
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " still exists (or is an unreaped zombie) "
                                       << "after robot/finalize_library";

  auto down = c.shutdown();
  RJG_ASSERT_OK(down);
  EXPECT_EQ(*down.result, json::value(json::object{})) << describe(down);
  c.exit();
  EXPECT_TRUE(c.wait_closed(20s)) << "the gateway did not close the connection after robot/exit";
}

TEST_F(SessionTest, GatewayTokenIsNotTheWorkersAndEachImportGetsItsOwn) {
  start();
  auto [c, token] = session();
  auto second = c.import_library("TestLibrary");
  RJG_ASSERT_OK(second);
  std::string token2(second.result->as_object().at("token").as_string());
  EXPECT_NE(token, token2);

  // The same worker, reached directly, hands out its own tokens; the gateway must not pass them on.
  // robot-test-worker always supports --tcp, so a worker that does not start is a failure, not a skip.
  DirectWorker direct("TestLibrary");
  try {
    direct.start();
  } catch (const std::exception& e) {
    FAIL() << "cannot compare with a direct worker: " << e.what();
  }
  client::RpcClient d(20s);
  d.connect(direct.host(), direct.port());
  d.initialize();
  auto dimport = d.import_library("TestLibrary");
  RJG_ASSERT_OK(dimport);
  const auto& dr = dimport.result->as_object();
  std::string worker_token(dr.at("token").as_string());
  EXPECT_NE(token, worker_token);
  EXPECT_NE(token2, worker_token);
  // The definition is the worker's, unchanged.
  auto gimport = c.import_library("TestLibrary");
  RJG_ASSERT_OK(gimport);
  const auto& gdef = gimport.result->as_object().at("definition");
  EXPECT_EQ(gdef, dr.at("definition")) << "gateway: " << json::serialize(gdef)
                                       << "\ndirect: " << json::serialize(dr.at("definition"));
}

TEST_F(SessionTest, RequestIdsRoundTripExactly) {
  start();
  client::RpcClient c = connect();
  auto init = c.request_with_id(json::value(7), protocol::kInitialize, json::object{});
  RJG_ASSERT_OK(init);
  ASSERT_TRUE(init.id.is_int64()) << describe(init);
  EXPECT_EQ(init.id.get_int64(), 7);
  c.notify(protocol::kInitialized, json::object{});

  auto imported = c.request_with_id(json::value(0), protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  RJG_ASSERT_OK(imported);
  ASSERT_TRUE(imported.id.is_int64()) << describe(imported);
  EXPECT_EQ(imported.id.get_int64(), 0);
  std::string token(imported.result->as_object().at("token").as_string());

  auto echo = [&](const json::value& id) {
    json::object params{{"library_token", token}, {"name", "Echo"}, {"args", json::array{"x"}}, {"kwargs", json::object{}}};
    auto reply = c.request_with_id(id, protocol::kRunKeyword, params);
    RJG_EXPECT_KEYWORD_OK(reply);
    return reply.id;
  };
  for (std::string_view id_text : {R"(42)", R"(-5)", R"(9007199254740993)", R"("abc")", R"("42")", R"("ü id \"q\"")",
                                   R"("")", R"("7")"}) {
    json::value id = parse(id_text);
    json::value back = echo(id);
    EXPECT_EQ(back.kind(), id.kind()) << "sent id " << id_text << ", got " << json::serialize(back);
    EXPECT_EQ(back, id) << "sent id " << id_text << ", got " << json::serialize(back);
  }
  // The errors the gateway makes itself also carry the request's id.
  auto unknown = c.request_with_id(json::value(99), "robot/no_such_method", json::object{});
  RJG_ASSERT_ERROR(unknown, protocol::kMethodNotFound);
  ASSERT_TRUE(unknown.id.is_int64()) << describe(unknown);
  EXPECT_EQ(unknown.id.get_int64(), 99);
}

TEST_F(SessionTest, PipelinedHandshakeLikeTheRealClient) {
  // The real client sends initialize, initialized and import_library back to back.
  start();
  client::RpcClient c = connect();
  std::string bytes = protocol::encode_frame(protocol::make_request("1", protocol::kInitialize, json::object{})) +
                      protocol::encode_frame(protocol::make_notification(protocol::kInitialized, json::object{})) +
                      protocol::encode_frame(protocol::make_request("2", protocol::kImportLibrary, json::object{{"name", "TestLibrary"}}));
  c.send_raw(bytes);
  auto init = c.wait_reply("1");
  RJG_ASSERT_OK(init);
  auto imported = c.wait_reply("2");
  RJG_ASSERT_OK(imported);
  std::string token(imported.result->as_object().at("token").as_string());
  // finalize, shutdown, exit back to back, then close without reading (the real client may).
  c.send_raw(protocol::encode_frame(protocol::make_request("3", protocol::kFinalizeLibrary, json::object{{"token", token}})) +
             protocol::encode_frame(protocol::make_request("4", protocol::kShutdown, json::object{})) +
             protocol::encode_frame(protocol::make_notification(protocol::kExit, json::object{})));
  auto fin = c.wait_reply("3");
  RJG_EXPECT_OK(fin);
  auto down = c.wait_reply("4");
  RJG_EXPECT_OK(down);
  EXPECT_TRUE(c.wait_closed(20s));
  // And the gateway still serves new sessions.
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}

TEST_F(SessionTest, UnknownFieldsSurvive) {
  start();
  auto [c, token] = session();
  json::value value = parse(R"({"keep": {"me": [1, 2, 3]}, "x-unknown": {"__pickled__": "80049509000000000000004b018c01789486942e"}, "__pickled__x": 1})");
  json::object message = parse(R"({"jsonrpc": "2.0", "id": "u1", "method": "robot/run_keyword", "x_top_level": {"a": 1},
                                   "params": {"name": "Echo", "kwargs": {}, "x_future_field": {"a": [1, 2]}}})")
                             .as_object();
  message["params"].as_object()["library_token"] = token;
  message["params"].as_object()["args"] = json::array{value};
  c.send_raw(protocol::encode_frame(json::serialize(message)));
  auto reply = c.wait_reply("u1");
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_EQ(keyword_value(reply), value) << describe(reply);
  // Absent args and kwargs are fine too.
  c.send_raw(protocol::encode_frame(json::serialize(json::object{
      {"jsonrpc", "2.0"}, {"id", "u2"}, {"method", "robot/run_keyword"},
      {"params", json::object{{"library_token", token}, {"name", "Get Pid"}}}})));
  auto pid_reply = c.wait_reply("u2");
  RJG_ASSERT_KEYWORD_OK(pid_reply);
  EXPECT_TRUE(keyword_value(pid_reply).is_number()) << describe(pid_reply);
}

TEST_F(SessionTest, EmptyNameImportsTheFirstConfiguredLibrary) {
  start({test_library("TestLibrary"), test_library("SecondLibrary")});
  auto [c, token] = session("");
  auto env = c.run_keyword(token, "Get Env", json::array{"RJG_TEST_LIBRARY"});
  RJG_ASSERT_KEYWORD_OK(env);
  EXPECT_EQ(keyword_value(env), json::value("TestLibrary")) << describe(env);

  // And a named import gets that library.
  auto second = c.import_library("SecondLibrary");
  RJG_ASSERT_OK(second);
  std::string token2(second.result->as_object().at("token").as_string());
  auto env2 = c.run_keyword(token2, "Get Env", json::array{"RJG_TEST_LIBRARY"});
  RJG_ASSERT_KEYWORD_OK(env2);
  EXPECT_EQ(keyword_value(env2), json::value("SecondLibrary")) << describe(env2);
}

TEST_F(SessionTest, UnknownLibraryNamesTheRequestAndTheAvailableOnes) {
  start();
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("NoSuchLib");
  RJG_ASSERT_ERROR(reply, protocol::kUnknownLibrary);
  EXPECT_EQ(reply.id, json::value("2"));
  auto msg = reply.error_message();
  EXPECT_TRUE(contains(msg, "NoSuchLib")) << msg;
  EXPECT_TRUE(contains(msg, "TestLibrary")) << msg;
  EXPECT_TRUE(contains(msg, "SecondLibrary")) << msg;
  // The session is still usable.
  auto ok = c.import_library("TestLibrary");
  RJG_EXPECT_OK(ok);
}

TEST_F(SessionTest, RequestsBeforeInitializeAreRefusedWithTheirId) {
  start();
  client::RpcClient c = connect();
  auto run = c.request(protocol::kRunKeyword, parse(R"({"library_token": "x", "name": "Echo", "args": [1]})"));
  RJG_ASSERT_ERROR(run, protocol::kNotInitialized);
  EXPECT_EQ(run.id, json::value("1")) << describe(run);
  auto imp = c.request_with_id(json::value(5), protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  RJG_ASSERT_ERROR(imp, protocol::kNotInitialized);
  ASSERT_TRUE(imp.id.is_int64()) << describe(imp);
  EXPECT_EQ(imp.id.get_int64(), 5);

  // Initialize answered but robot/initialized not yet sent: still refused.
  auto init = c.request(protocol::kInitialize, json::object{});
  RJG_ASSERT_OK(init);
  auto imp2 = c.request(protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  RJG_ASSERT_ERROR(imp2, protocol::kNotInitialized);
  EXPECT_EQ(imp2.id, json::value("3")) << describe(imp2);
  auto run2 = c.request(protocol::kRunKeyword, parse(R"({"library_token": "x", "name": "Echo", "args": [1]})"));
  RJG_ASSERT_ERROR(run2, protocol::kNotInitialized);
  EXPECT_EQ(run2.id, json::value("4")) << describe(run2);

  // After robot/initialized the session works.
  c.notify(protocol::kInitialized, json::object{});
  auto imp3 = c.import_library("TestLibrary");
  RJG_ASSERT_OK(imp3);
  std::string token(imp3.result->as_object().at("token").as_string());
  auto echo = c.run_keyword(token, "Echo", json::array{"after"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("after"));
}

TEST_F(SessionTest, MalformedJsonIsAnsweredAndTheConnectionStaysUsable) {
  start();
  client::RpcClient c = connect();
  // Before initialize.
  c.send_raw(protocol::encode_frame(R"({"jsonrpc": "2.0", "method": )"));
  auto m = c.read_message(20s);
  ASSERT_TRUE(m.has_value()) << "no answer to malformed JSON";
  ASSERT_EQ(m->kind, protocol::Message::Kind::error_response) << m->text();
  EXPECT_EQ(m->error().at("code"), json::value(protocol::kParseError)) << m->text();

  std::string token = open_library(c, "TestLibrary");
  // After import, between keywords.
  c.send_raw(protocol::encode_frame("this is not json at all"));
  m = c.read_message(20s);
  ASSERT_TRUE(m.has_value()) << "no answer to malformed JSON";
  ASSERT_EQ(m->kind, protocol::Message::Kind::error_response) << m->text();
  EXPECT_EQ(m->error().at("code"), json::value(protocol::kParseError)) << m->text();

  auto echo = c.run_keyword(token, "Echo", json::array{"still here"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("still here"));
}

TEST_F(SessionTest, UnknownMethodIsAnsweredWithItsIdAndUnknownNotificationsAreIgnored) {
  start();
  auto [c, token] = session();
  auto reply = c.request("robot/no_such_method", json::object{{"x", 1}});
  RJG_ASSERT_ERROR(reply, protocol::kMethodNotFound);
  EXPECT_TRUE(reply.id.is_string()) << describe(reply);
  // A notification is never answered, not even when unknown: the next answer is the Echo's.
  c.notify("robot/no_such_notification", json::object{});
  c.notify("$/cancelRequest", json::object{{"id", "999"}});
  auto echo = c.run_keyword(token, "Echo", json::array{"next"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("next"));
  EXPECT_EQ(c.pending_messages(), 0u);
}

TEST_F(SessionTest, LogsArriveInOrderBeforeTheAnswer) {
  start();
  auto [c, token] = session();
  std::vector<json::object> logs;
  auto on_log = [&](const protocol::Message& m) {
    if (m.method() == protocol::kLog && m.params().is_object()) logs.push_back(m.params().get_object());
  };
  auto reply = c.run_keyword(token, "Log Messages", json::array{200}, {}, on_log);
  RJG_ASSERT_KEYWORD_OK(reply);
  ASSERT_EQ(logs.size(), 200u) << "robot/log notifications before the answer";
  for (std::size_t i = 0; i < logs.size(); ++i) {
    std::string msg(logs[i].at("message").as_string());
    ASSERT_TRUE(msg.starts_with(fmt::format("{}:", i))) << "log #" << i << " is '" << msg.substr(0, 40) << "'";
  }
  // No log of that keyword comes after its answer.
  std::vector<json::object> late;
  auto echo = c.run_keyword(token, "Echo", json::array{"x"}, {}, [&](const protocol::Message& m) {
    if (m.method() == protocol::kLog && m.params().is_object()) late.push_back(m.params().get_object());
  });
  RJG_ASSERT_KEYWORD_OK(echo);
  for (const auto& l : late) {
    std::string msg(l.at("message").as_string());
    EXPECT_FALSE(msg.find(':') != std::string::npos && std::isdigit(static_cast<unsigned char>(msg[0])) &&
                 contains(msg, ":xxxx"))
        << "a Log Messages log arrived after its answer: " << msg;
  }

  // Level and size travel through.
  logs.clear();
  auto warn = c.run_keyword(token, "Log Messages", json::array{3}, json::object{{"size", 100}, {"level", "WARN"}}, on_log);
  RJG_ASSERT_KEYWORD_OK(warn);
  ASSERT_EQ(logs.size(), 3u);
  for (const auto& l : logs) {
    EXPECT_EQ(l.at("level"), json::value("WARN")) << json::serialize(l);
    EXPECT_GE(l.at("message").as_string().size(), 100u) << json::serialize(l);
  }
}

TEST_F(SessionTest, PipelinedCallsOnOneTokenKeepTheirLogs) {
  // Logs carry no id: the gateway must run one keyword at a time per worker and attribute each
  // log to the call in flight, so each call's logs come after the previous answer.
  start();
  auto [c, token] = session();
  std::vector<json::value> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(c.send_request(protocol::kRunKeyword,
                                 json::object{{"library_token", token},
                                              {"name", "Log Messages"},
                                              {"args", json::array{20}},
                                              {"kwargs", json::object{{"size", i + 1}}}}));
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> logs;
    auto reply = c.wait_reply(ids[i], [&](const protocol::Message& m) {
      if (m.method() == protocol::kLog) logs.emplace_back(m.params().as_object().at("message").as_string());
    });
    RJG_ASSERT_KEYWORD_OK(reply);
    ASSERT_EQ(logs.size(), 20u) << "call " << i;
    for (std::size_t k = 0; k < logs.size(); ++k)
      EXPECT_EQ(logs[k], fmt::format("{}:{}", k, std::string(static_cast<std::size_t>(i + 1), 'x'))) << "call " << i;
  }
}

TEST_F(SessionTest, LogsGoOnlyToTheSessionThatRunsTheKeyword) {
  start();
  auto [a, ta] = session();
  auto [b, tb] = session();
  std::size_t a_logs = 0, b_logs = 0;
  auto ra = a.run_keyword(ta, "Log Messages", json::array{50}, {}, [&](const protocol::Message& m) {
    if (m.method() == protocol::kLog) ++a_logs;
  });
  RJG_ASSERT_KEYWORD_OK(ra);
  auto rb = b.run_keyword(tb, "Echo", json::array{"b"}, {}, [&](const protocol::Message& m) {
    if (m.method() == protocol::kLog) ++b_logs;
  });
  RJG_ASSERT_KEYWORD_OK(rb);
  EXPECT_EQ(a_logs, 50u);
  EXPECT_EQ(b_logs, 0u);
}

TEST_F(SessionTest, TwoSessionsRunConcurrently) {
  start();
  auto [a, ta] = session();
  json::value sleep_id = a.send_request(
      protocol::kRunKeyword,
      json::object{{"library_token", ta}, {"name", "Sleep"}, {"args", json::array{3}}, {"kwargs", json::object{}}});

  auto [b, tb] = session();
  for (int i = 0; i < 20; ++i) {
    auto reply = b.run_keyword(tb, "Echo", json::array{i});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), json::value(i));
  }
  // Ordering fact, not a timing threshold: B got all 20 answers while A's Sleep was still running.
  auto early = a.read_message(std::chrono::milliseconds(0));
  EXPECT_FALSE(early.has_value()) << "A's Sleep 3 answered before B finished 20 Echo calls: "
                                  << early->text();
  auto slept = a.wait_reply(sleep_id, {}, 30s);
  RJG_ASSERT_KEYWORD_OK(slept);
}

TEST_F(SessionTest, WriteGarbageIsSkipped) {
  start();
  auto [c, token] = session();
  auto garbage = c.run_keyword(token, "Write Garbage");
  RJG_ASSERT_KEYWORD_OK(garbage);
  EXPECT_EQ(keyword_value(garbage), json::value("ok"));
  auto echo = c.run_keyword(token, "Echo", json::array{"after garbage"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("after garbage"));
  // Garbage without a newline, and garbage that looks like the start of a header.
  for (std::string_view text : {"no newline at all", "Content-Type: nonsense\r\n", "\x01\x02 binary\n"}) {
    auto g = c.run_keyword(token, "Write Garbage", json::array{text});
    RJG_ASSERT_KEYWORD_OK(g);
    EXPECT_EQ(keyword_value(g), json::value("ok")) << describe(g);
    auto e = c.run_keyword(token, "Echo", json::array{1});
    RJG_ASSERT_KEYWORD_OK(e);
    EXPECT_EQ(keyword_value(e), json::value(1));
  }
}

TEST_F(SessionTest, BigValuesComeThroughIntact) {
  start();
  auto [c, token] = session();
  constexpr std::size_t kBig = 8u * 1024 * 1024;
  auto big = c.run_keyword(token, "Big Value", json::array{kBig});
  RJG_ASSERT_KEYWORD_OK(big);
  auto v = keyword_value(big);
  ASSERT_TRUE(v.is_string()) << describe(big);
  ASSERT_EQ(v.get_string().size(), kBig);
  EXPECT_TRUE(std::all_of(v.get_string().begin(), v.get_string().end(), [](char ch) { return ch == 'x'; }));

  // And in the other direction: a 4 MiB argument.
  std::string arg(4u * 1024 * 1024, 'y');
  auto echo = c.run_keyword(token, "Echo", json::array{json::string(arg)});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_TRUE(keyword_value(echo) == json::value(arg)) << "4 MiB Echo came back different";

  auto small = c.run_keyword(token, "Echo", json::array{"small"});
  RJG_ASSERT_KEYWORD_OK(small);

  // Values this large are scanned and pickle-checked off the event loop, both ways.
  const auto log = gateway().log();
  EXPECT_TRUE(contains(log, "robot/run_keyword of ") && contains(log, "params bound and pickles checked off the event loop"))
      << log;
  EXPECT_TRUE(contains(log, "bytes of values: pickles checked off the event loop")) << log;
}

TEST_F(SessionTest, TokensAreValidOnlyOnTheirConnectionAndUntilFinalized) {
  start();
  auto [a, ta] = session();
  auto [b, tb] = session();
  auto foreign = b.run_keyword(ta, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(foreign, protocol::kUnknownToken);
  auto foreign_fin = b.finalize_library(ta);
  RJG_ASSERT_ERROR(foreign_fin, protocol::kUnknownToken);
  auto bogus = b.run_keyword("no-such-token", "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(bogus, protocol::kUnknownToken);
  // A's token still works on A after B's attempts.
  auto mine = a.run_keyword(ta, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_OK(mine);

  RJG_ASSERT_OK(a.finalize_library(ta));
  auto after = a.run_keyword(ta, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(after, protocol::kUnknownToken);
  // A second finalize: the reference server answers {}, an unknown-token error is also fair.
  auto twice = a.finalize_library(ta);
  EXPECT_TRUE(twice.ok() ? *twice.result == json::value(json::object{}) : twice.error_code() == protocol::kUnknownToken)
      << describe(twice);
  // B's own token is unaffected.
  auto b_ok = b.run_keyword(tb, "Echo", json::array{2});
  RJG_ASSERT_KEYWORD_OK(b_ok);
}

// A client that pipelines requests gets at most 64 of them in flight; each keyword beyond fails at once
// (GatewayAtCapacity, as a result), in order, and the connection stays usable.
TEST_F(SessionTest, PipelinedRequestsBeyondTheCapAreRefusedAtOnce) {
  start();
  auto [c, token] = session();
  std::string frames;
  for (int i = 0; i < 100; ++i) {
    frames += protocol::encode_frame(json::serialize(json::object{
        {"jsonrpc", "2.0"}, {"id", "p" + std::to_string(i)}, {"method", "robot/run_keyword"},
        {"params", json::object{{"library_token", token}, {"name", "Sleep"}, {"args", json::array{30}}}}}));
  }
  c.send_raw(frames);
  // The first 64 wait behind a 30 s keyword; the other 36 are refused without waiting for them.
  std::vector<std::string> refused;
  while (refused.size() < 36) {
    auto m = c.read_message(std::chrono::seconds(20));
    ASSERT_TRUE(m) << "only " << refused.size() << " refusals arrived";
    ASSERT_EQ(m->kind, protocol::Message::Kind::response) << m->text();
    const auto failure = keyword_failure_of(*m);
    ASSERT_TRUE(failure) << m->text();
    EXPECT_EQ(failure->type, protocol::keyword_error_type(protocol::kAtCapacity)) << m->text();
    EXPECT_TRUE(contains(failure->message, "max_pending_requests")) << m->text();
    refused.emplace_back(m->id().as_string());
  }
  for (int i = 0; i < 36; ++i) EXPECT_EQ(refused[i], "p" + std::to_string(64 + i));
  c.close();
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}


}  // namespace
}  // namespace rjg::test
