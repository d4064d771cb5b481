// The classic Remote front ([classic] listen), end to end: Python's own xmlrpc.client, used the way
// Robot Framework's `Remote` library uses it (tests/integration/classic_client.py), against the real
// gateway and the real test worker. Every method of the classic remote API, values of every kind both
// ways, failures and their modes, logs in `output`, two libraries on two paths, a crashed worker
// replaced, a hung keyword ended by keyword_timeout while another library's call proceeds, and bad
// requests answered with a fault or an HTTP error. Nothing is timed: every wait is a bound.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <thread>

namespace rjg::test {
namespace {

const std::string kClient = std::string(RJG_TEST_SOURCE_DIR) + "/classic_client.py";

std::string python() {
  auto found = find_program("python3");
  if (!found) throw std::runtime_error("python3 is not installed (deploy/install-deps.sh installs it)");
  return *found;
}

class ClassicTest : public GatewayTest {
 protected:
  void start_classic(std::vector<LibrarySpec> libraries = default_libraries(), std::string classic_toml = {},
                     GatewayOptions options = {}) {
    classic_port_ = free_port();
    options.extra_toml = fmt::format("[classic]\nlisten = [\"tcp://127.0.0.1:{}\"]\n{}", classic_port_, classic_toml);
    start(std::move(libraries), std::move(options));
    ASSERT_TRUE(eventually([&] { return can_connect(classic_port_); }, 10s)) << gateway().log_tail();
  }

  std::string url(std::string_view path) const { return fmt::format("http://127.0.0.1:{}{}", classic_port_, path); }

  // Runs the calls (each [METHOD, PARAMS...]) with xmlrpc.client; one JSON value per call.
  std::vector<json::value> calls(std::string_view path, const json::array& list) {
    auto result = run_process({python(), kClient, url(path), json::serialize(list)}, gateway().dir(), 120s);
    EXPECT_TRUE(result.exited_with(0)) << result.describe() << "\n" << result.err;
    std::vector<json::value> out;
    std::size_t pos = 0;
    while (pos < result.out.size()) {
      auto nl = result.out.find('\n', pos);
      if (nl == std::string::npos) nl = result.out.size();
      if (nl > pos) out.push_back(json::parse(std::string_view(result.out).substr(pos, nl - pos)));
      pos = nl + 1;
    }
    EXPECT_EQ(out.size(), list.size()) << result.out << result.err;
    while (out.size() < list.size()) out.emplace_back(json::object{{"$error", "no answer printed"}});
    return out;
  }
  json::value call(std::string_view path, json::array one) {
    json::array list;
    list.emplace_back(std::move(one));  // not {one}: Boost.JSON copies an array from a one-array list
    return calls(path, list).front();
  }
  json::value run(std::string_view path, std::string_view keyword, json::array args = {}, json::object kwargs = {}) {
    json::array c{"run_keyword", keyword, std::move(args)};
    if (!kwargs.empty()) c.push_back(std::move(kwargs));
    return call(path, std::move(c));
  }

  // A raw HTTP exchange: what the server answers to `request` before it closes (bounded).
  std::string raw_http(const std::string& request, std::uint16_t port = 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port ? port : classic_port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return "connect failed";
    }
    for (std::size_t sent = 0; sent < request.size();) {
      auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    std::string out;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
    ::close(fd);
    return out;
  }
  std::string post(std::string_view path, std::string_view body) {
    return raw_http(fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n"
                                "Connection: close\r\n\r\n{}",
                                path, body.size(), body));
  }

  static std::string fault_of(const json::value& v) {
    const auto* o = v.if_object();
    const auto* f = o ? o->if_contains("$fault") : nullptr;
    return f && f->is_string() ? std::string(f->get_string()) : std::string();
  }
  static const json::object& result_struct(const json::value& v) {
    static const json::object empty;
    return v.is_object() ? v.get_object() : empty;
  }

  std::uint16_t classic_port_ = 0;
};

json::value bytes_value(std::string_view b64) { return json::object{{"$bytes", b64}}; }

TEST_F(ClassicTest, LibraryInformationDescribesEveryKeywordTheWayRobotReadsIt) {
  start_classic();
  const auto info = call("/TestLibrary", {"get_library_information"});
  ASSERT_TRUE(info.is_object()) << info;
  const auto& i = info.get_object();
  ASSERT_TRUE(i.contains("Echo") && i.contains("Log Messages") && i.contains("__intro__") && i.contains("__init__"))
      << info;
  EXPECT_EQ(i.at("Echo").at("args"), (json::array{"value"}));
  EXPECT_EQ(i.at("Log Messages").at("args"), (json::array{"count", "size=10", "level=INFO"}));
  EXPECT_EQ(i.at("Log Messages").at("types"), (json::object{{"count", "int"}, {"size", "int"}, {"level", "str"}}));
  EXPECT_EQ(i.at("Echo Arguments").at("args"), (json::array{"*args", "**kwargs"}));
  EXPECT_TRUE(contains(json::value_to<std::string>(i.at("Echo").at("doc")), "unchanged")) << i.at("Echo");
  EXPECT_TRUE(i.at("Echo").at("tags").is_array());

  // The older per-keyword methods, for Robot before 4.0 and other classic clients.
  const auto answers = calls("/TestLibrary", {{"get_keyword_names"},
                                              {"get_keyword_arguments", "Log Messages"},
                                              {"get_keyword_types", "Sleep"},
                                              {"get_keyword_tags", "Echo"},
                                              {"get_keyword_documentation", "Echo"},
                                              {"get_keyword_documentation", "__intro__"},
                                              {"get_keyword_documentation", "__init__"},
                                              {"get_keyword_arguments", "No Such Keyword"}});
  const auto& names = answers[0].as_array();
  EXPECT_NE(std::find(names.begin(), names.end(), json::value("Echo")), names.end()) << answers[0];
  EXPECT_NE(std::find(names.begin(), names.end(), json::value("Hang")), names.end()) << answers[0];
  EXPECT_EQ(answers[1], (json::array{"count", "size=10", "level=INFO"}));
  EXPECT_EQ(answers[2], (json::object{{"seconds", "float"}}));
  EXPECT_EQ(answers[3], json::array{});
  EXPECT_EQ(answers[4], i.at("Echo").at("doc"));
  EXPECT_TRUE(answers[5].is_string()) << answers[5];
  EXPECT_EQ(answers[6], "");
  EXPECT_TRUE(contains(fault_of(answers[7]), "has no keyword 'No Such Keyword'")) << answers[7];
}

TEST_F(ClassicTest, ArgumentsAndReturnValuesOfEveryKindRoundTrip) {
  start_classic();
  const json::array values = {
      "text",
      "non-ASCII: äöü € 😀",
      "",
      0,
      -42,
      1.5,
      -0.25,
      true,
      false,
      bytes_value("AAEC/f7/"),  // bytes 00 01 02 fd fe ff
      json::object{{"$datetime", "2024-02-29T23:59:58"}},
      json::array{1, "two", json::array{3.0, bytes_value("eA==")}},
      json::object{{"key", "value"}, {"n", 1}, {"nested", json::object{{"b", bytes_value("eQ==")}}}},
      json::array{},
      json::object{},
  };
  json::array list;
  for (const auto& v : values) list.push_back(json::array{"run_keyword", "Echo", json::array{v}});
  const auto answers = calls("/TestLibrary", list);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto& r = result_struct(answers[i]);
    ASSERT_EQ(r.if_contains("status") ? r.at("status") : json::value(), "PASS") << i << ": " << answers[i];
    EXPECT_EQ(r.at("return"), values[i]) << i << ": " << answers[i];
  }

  // Named arguments (the third parameter), and what the worker received for them.
  const auto named = run("/TestLibrary", "Echo Arguments", {1, bytes_value("AQI=")}, {{"x", "y"}, {"b", true}});
  EXPECT_EQ(result_struct(named).at("return"),
            (json::object{{"args", json::array{1, bytes_value("AQI=")}}, {"kwargs", json::object{{"x", "y"}, {"b", true}}}}))
      << named;
  // Bytes reach a worker as Python's pickle of bytes, the way a Python JSON-RPC client sends them: the
  // worker's view of the text, re-read by the gateway as a plain dict (its pickle decoded again).
  const auto raw = run("/TestLibrary", "Echo Raw", {bytes_value("AQI=")});
  EXPECT_EQ(result_struct(raw).at("return"), (json::object{{"args", json::array{bytes_value("AQI=")}}, {"kwargs", json::object{}}}))
      << raw;

  // What a worker returns that XML-RPC has no type for: None as "", NaN as the float, a big int as its
  // digits, a non-string key as its str().
  const auto odd = calls("/TestLibrary", {{"run_keyword", "Return Raw", json::array{"null"}},
                                          {"run_keyword", "Return Raw", json::array{"NaN"}},
                                          {"run_keyword", "Return Raw", json::array{"123456789012345678901234567890"}},
                                          {"run_keyword", "Return Raw", json::array{"[null, {\"a\": null}]"}},
                                          {"run_keyword", "Return Raw", json::array{"1099511627776"}}});
  EXPECT_EQ(result_struct(odd[0]).at("return"), "") << odd[0];
  EXPECT_EQ(result_struct(odd[1]).at("return"), (json::object{{"$float", "nan"}})) << odd[1];
  EXPECT_EQ(result_struct(odd[2]).at("return"), "123456789012345678901234567890") << odd[2];
  EXPECT_EQ(result_struct(odd[3]).at("return"), (json::array{"", json::object{{"a", ""}}})) << odd[3];
  // Beyond 32 bits: <i8>, which Python's client reads (it cannot send one: OverflowError).
  EXPECT_EQ(result_struct(odd[4]).at("return"), std::int64_t{1} << 40) << odd[4];
}

TEST_F(ClassicTest, FailuresCarryTheirMessageTracebackAndMode) {
  start_classic();
  const auto answers = calls(
      "/TestLibrary",
      {{"run_keyword", "Fail", json::array{"plain failure"}},
       {"run_keyword", "Fail", json::array{"bad value", "ValueError", "Traceback (most recent call last): ..."}},
       {"run_keyword", "Fail", json::array{"go on", "AssertionError", "", "CONTINUABLE"}},
       {"run_keyword", "Fail", json::array{"stop all", "AssertionError", "", "FATAL"}},
       {"run_keyword", "No Such Keyword", json::array{}}});
  auto r = [&](std::size_t i) { return result_struct(answers[i]); };
  EXPECT_EQ(r(0).at("status"), "FAIL");
  EXPECT_EQ(r(0).at("error"), "plain failure");
  EXPECT_EQ(r(0).at("continuable"), false);
  EXPECT_EQ(r(0).at("fatal"), false);
  EXPECT_EQ(r(1).at("error"), "ValueError: bad value");
  EXPECT_EQ(r(1).at("traceback"), "Traceback (most recent call last): ...");
  EXPECT_EQ(r(2).at("continuable"), true);
  EXPECT_EQ(r(2).at("fatal"), false);
  EXPECT_EQ(r(3).at("fatal"), true);
  EXPECT_EQ(r(4).at("status"), "FAIL") << answers[4];
  EXPECT_TRUE(contains(json::value_to<std::string>(r(4).at("error")), "No Such Keyword")) << answers[4];
}

TEST_F(ClassicTest, LogsComeBackInOutputInOrderWithTheirLevels) {
  start_classic();
  const auto answers =
      calls("/TestLibrary", {{"run_keyword", "Log Messages", json::array{3, 2, "WARN"}},
                             {"run_keyword", "Log Raw", json::array{R"({"message": "<b>bold</b>", "level": "INFO", "html": true})"}},
                             {"run_keyword", "Log Messages", json::array{200, 1, "DEBUG"}}});
  EXPECT_EQ(result_struct(answers[0]).at("output"), "*WARN* 0:xx\n*WARN* 1:xx\n*WARN* 2:xx\n") << answers[0];
  EXPECT_EQ(result_struct(answers[1]).at("output"), "*HTML* <b>bold</b>\n") << answers[1];
  std::string expected;
  for (int i = 0; i < 200; ++i) expected += fmt::format("*DEBUG* {}:x\n", i);
  EXPECT_EQ(result_struct(answers[2]).at("output"), json::value(expected));
}

TEST_F(ClassicTest, TwoLibrariesOnTwoPathsAndTheDefaultOnTheRoot) {
  start_classic();
  const auto env = json::array{"RJG_TEST_LIBRARY"};
  EXPECT_EQ(result_struct(run("/TestLibrary", "Get Env", env)).at("return"), "TestLibrary");
  EXPECT_EQ(result_struct(run("/SecondLibrary", "Get Env", env)).at("return"), "SecondLibrary");
  // Python's client posts to /RPC2 when the URL has no path; "/" too: the first library.
  EXPECT_EQ(result_struct(run("", "Get Env", env)).at("return"), "TestLibrary");
  EXPECT_EQ(result_struct(run("/RPC2", "Get Env", env)).at("return"), "TestLibrary");
  const auto unknown = run("/NoSuchLibrary", "Echo", {1});
  EXPECT_TRUE(contains(fault_of(unknown), "No library 'NoSuchLibrary' is served here")) << unknown;
  EXPECT_TRUE(contains(fault_of(unknown), "TestLibrary, SecondLibrary")) << unknown;
}

TEST_F(ClassicTest, DefaultLibraryIsConfigurable) {
  start_classic(default_libraries(), "default_library = \"SecondLibrary\"\n");
  EXPECT_EQ(result_struct(run("/", "Get Env", {"RJG_TEST_LIBRARY"})).at("return"), "SecondLibrary");
}

TEST_F(ClassicTest, ClientsShareOneImportAndACrashedWorkerIsReplaced) {
  start_classic();
  const auto first = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  // A second client, later: the same instance in the same worker, as on a classic server.
  EXPECT_EQ(result_struct(run("/TestLibrary", "Get Pid")).at("return"), first);
  remember_pid(static_cast<pid_t>(as_int(first)));

  const auto crashed = run("/TestLibrary", "Crash", {"sigkill"});
  EXPECT_EQ(result_struct(crashed).at("status"), "FAIL") << crashed;
  EXPECT_TRUE(contains(json::value_to<std::string>(result_struct(crashed).at("error")), "TestLibrary")) << crashed;
  EXPECT_TRUE(contains(json::value_to<std::string>(result_struct(crashed).at("output")), "about to crash")) << crashed;

  const auto after = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  ASSERT_TRUE(after.is_int64()) << after;
  EXPECT_NE(after, first);
  remember_pid(static_cast<pid_t>(as_int(after)));
}

TEST_F(ClassicTest, AHungKeywordIsEndedByItsTimeoutWhileAnotherLibraryServes) {
  auto libraries = default_libraries();
  libraries[0].extra_toml = "keyword_timeout = \"3s\"\n";
  start_classic(libraries);
  const auto pid = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  remember_pid(static_cast<pid_t>(as_int(pid)));

  // Client A hangs TestLibrary's one instance; client B waits behind it (calls are serialized, as on a
  // classic server); client C uses SecondLibrary meanwhile.
  json::value hung, queued;
  std::thread a([&] { hung = run("/TestLibrary", "Hang"); });
  ASSERT_TRUE(log_eventually("running keyword 'Hang'", 1, 30s)) << gateway().log_tail();
  std::thread b([&] { queued = run("/TestLibrary", "Echo", {"after the hang"}); });
  const auto other = run("/SecondLibrary", "Echo", {"meanwhile"});
  EXPECT_EQ(result_struct(other).at("return"), "meanwhile") << other;
  a.join();
  b.join();
  EXPECT_EQ(result_struct(hung).at("status"), "FAIL") << hung;
  EXPECT_TRUE(contains(json::value_to<std::string>(result_struct(hung).at("error")), "keyword_timeout")) << hung;
  EXPECT_EQ(result_struct(queued).at("return"), "after the hang") << queued;
  // The hung worker was ended; a fresh one serves from now on.
  EXPECT_TRUE(wait_pid_gone(static_cast<pid_t>(as_int(pid)), 30s));
  const auto fresh = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  EXPECT_NE(fresh, pid);
  remember_pid(static_cast<pid_t>(as_int(fresh)));
}

// The admin endpoint's /status shows what classic clients hold: each library they called, its imports
// (instances), which serve a call and how many calls wait; libraries nobody called are not there.
TEST_F(ClassicTest, TheStatusPageShowsTheImportsClassicClientsHold) {
  auto libraries = default_libraries();
  // The page is read while the hang runs: the second call must arrive and be seen waiting before the
  // timeout ends the first. 3 s was too short once, under ASan with four tests and a build at once.
  libraries[0].extra_toml = "keyword_timeout = \"15s\"\n";
  const auto admin_port = free_port();
  start_classic(libraries, fmt::format("\n[admin]\nlisten = [\"tcp://127.0.0.1:{}\"]\n", admin_port));
  ASSERT_TRUE(eventually([&] { return can_connect(admin_port); }, 10s)) << gateway().log_tail();
  auto classic_status = [&] {
    const auto answer = raw_http("GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", admin_port);
    const auto body = answer.find("\r\n\r\n");
    if (body == std::string::npos) return json::object{};
    const auto status = json::parse(answer.substr(body + 4));
    const auto* classic = status.as_object().if_contains("classic");
    return classic && classic->is_object() ? classic->as_object() : json::object{};
  };
  auto library_status = [&](const json::object& classic) {
    for (const auto& l : classic.at("libraries").as_array())
      if (l.at("library") == "TestLibrary") return l.as_object();
    return json::object{};
  };

  const auto pid = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  remember_pid(static_cast<pid_t>(as_int(pid)));
  auto idle = classic_status();
  ASSERT_TRUE(idle.contains("libraries")) << idle;
  EXPECT_EQ(idle.at("calls_running"), 0) << idle;
  EXPECT_EQ(idle.at("libraries").as_array().size(), 1u) << "only the library that was called: " << idle;
  EXPECT_EQ(library_status(idle),
            (json::object{{"library", "TestLibrary"}, {"instances", 1}, {"imported", 1}, {"busy", 0}, {"calls_waiting", 0}}))
      << idle;

  // A call hangs the one instance and another waits behind it; keyword_timeout ends the first.
  json::value hung, queued;
  std::thread a([&] { hung = run("/TestLibrary", "Hang"); });
  ASSERT_TRUE(log_eventually("running keyword 'Hang'", 1, 30s)) << gateway().log_tail();
  std::thread b([&] { queued = run("/TestLibrary", "Echo", {"after the hang"}); });
  json::object busy;
  EXPECT_TRUE(eventually(
      [&] {
        busy = classic_status();
        const auto l = library_status(busy);
        return !l.empty() && l.at("busy") == 1 && l.at("calls_waiting") == 1;
      },
      20s))
      << busy;
  EXPECT_EQ(busy.at("calls_running"), 2) << busy;
  a.join();
  b.join();
  EXPECT_EQ(result_struct(queued).at("return"), "after the hang") << queued;
  const auto after = library_status(classic_status());
  EXPECT_EQ(after.at("busy"), 0) << after;
  EXPECT_EQ(after.at("calls_waiting"), 0) << after;
}

TEST_F(ClassicTest, ClassicInstancesSpreadCallsOverImportsInSeveralWorkers) {
  auto libraries = default_libraries();
  libraries[0].extra_toml = "classic_instances = 2\n";
  start_classic(libraries);
  const auto file = gateway().dir() / "go";
  auto waiting = [&] { run("/TestLibrary", "Wait For File", {file.string(), 60.0}); };
  std::thread a(waiting);
  std::thread b(waiting);
  // Both calls run at once, each on an import of its own in a worker of its own: only then is the file
  // written.
  const bool both = log_eventually("running keyword 'Wait For File'", 2, 30s);
  write_file(file, "go");
  a.join();
  b.join();
  ASSERT_TRUE(both) << gateway().log_tail();
  const auto pids = pids_eventually(R"(classic TestLibrary #\d: imported library TestLibrary in worker pid (\d+))", 2);
  ASSERT_EQ(pids.size(), 2u) << gateway().log_tail();
  EXPECT_NE(pids[0], pids[1]);
}

TEST_F(ClassicTest, BadRequestsGetAFaultOrAnHttpErrorAndTheFrontGoesOn) {
  start_classic(default_libraries(), "max_body_bytes = \"64KiB\"\n");
  auto fault = [](const std::string& answer) {
    return contains(answer, "HTTP/1.1 200") && contains(answer, "<fault>") ? answer : "no fault in: " + answer;
  };
  EXPECT_TRUE(contains(fault(post("/TestLibrary", "this is not XML")), "not an XML-RPC call"));
  EXPECT_TRUE(contains(fault(post("/TestLibrary", "<?xml version='1.0'?><!DOCTYPE x [<!ENTITY a 'b'>]>"
                                                  "<methodCall><methodName>&a;</methodName></methodCall>")),
                       "not an XML-RPC call"));
  EXPECT_TRUE(contains(fault(post("/TestLibrary", "<?xml version='1.0'?><methodCall><methodName>rm_rf</methodName>"
                                                  "<params/></methodCall>")),
                       "Unknown method 'rm_rf'"));
  EXPECT_TRUE(contains(fault(post("/TestLibrary", "<?xml version='1.0'?><methodCall><methodName>run_keyword"
                                                  "</methodName><params><param><value><int>1</int></value></param>"
                                                  "</params></methodCall>")),
                       "run_keyword takes a keyword name"));
  EXPECT_TRUE(contains(fault(post("/Test%ZZ", "<methodCall><methodName>get_keyword_names</methodName></methodCall>")),
                       "malformed"));
  EXPECT_TRUE(contains(fault(post("/TestLibrary", "<?xml version='1.0'?><methodCall><methodName>stop_remote_server"
                                                  "</methodName><params/></methodCall>")),
                       "not stopped by its clients"));
  const auto get = raw_http("GET /TestLibrary HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(contains(get, "HTTP/1.1 405") && contains(get, "Allow: POST")) << get;
  // Over [classic] max_body_bytes: a fault naming it (Robot shows a fault's text, of an HTTP error only its
  // status), sent without reading the body.
  const auto large = post("/TestLibrary", std::string(200'000, 'x'));
  EXPECT_TRUE(contains(fault(large), "[classic] max_body_bytes = 65536")) << large.substr(0, 1000);
  // Robot's client (Python's xmlrpc.client) sends a body whole before it reads the answer: it gets the fault
  // too, not a broken connection.
  const auto too_large = run("/TestLibrary", "Echo", {json::object{{"$repeat", json::array{"x", 8'000'000}}}});
  EXPECT_TRUE(contains(fault_of(too_large), "[classic] max_body_bytes = 65536")) << too_large;
  // And the front still serves.
  EXPECT_EQ(result_struct(run("/TestLibrary", "Echo", {"still here"})).at("return"), "still here");
  EXPECT_TRUE(gateway().running());
}

TEST_F(ClassicTest, ThePicklePolicyAppliesToClassicClientsToo) {
  auto libraries = default_libraries();
  libraries[0].extra_toml = "pickle = \"deny\"\n";
  start_classic(libraries);
  // Bytes travel pickled, which this library's policy refuses: the keyword fails saying so, and no call
  // reaches the worker.
  const auto refused = run("/TestLibrary", "Echo", {bytes_value("AQI=")});
  EXPECT_EQ(result_struct(refused).at("status"), "FAIL") << refused;
  EXPECT_TRUE(contains(json::value_to<std::string>(result_struct(refused).at("error")), "pickle")) << refused;
  EXPECT_EQ(result_struct(run("/TestLibrary", "Echo Count")).at("return"), 0);
}

// ---- What classic clients may hold: [classic] max_imports, idle_timeout, max_sessions_per_client ----

constexpr std::string_view kGetKeywordNames =
    "<?xml version='1.0'?><methodCall><methodName>get_keyword_names</methodName><params/></methodCall>";

// The front with an admin endpoint, whose /status shows what the front holds.
class ClassicLimitsTest : public ClassicTest {
 protected:
  void start_with_status(std::vector<LibrarySpec> libraries, std::string classic_toml = {}, GatewayOptions options = {}) {
    admin_port_ = free_port();
    start_classic(std::move(libraries),
                  fmt::format("{}\n[admin]\nlisten = [\"tcp://127.0.0.1:{}\"]\n", classic_toml, admin_port_),
                  std::move(options));
    ASSERT_TRUE(eventually([&] { return can_connect(admin_port_); }, 10s)) << gateway().log_tail();
  }

  // /status's "classic": connections, calls running, imports held, and the libraries in the front's table.
  json::object classic_status() {
    const auto answer = raw_http("GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", admin_port_);
    const auto body = answer.find("\r\n\r\n");
    if (body == std::string::npos) return json::object{};
    const auto status = json::parse(answer.substr(body + 4));
    const auto* classic = status.as_object().if_contains("classic");
    return classic && classic->is_object() ? classic->as_object() : json::object{};
  }
  // Waits (bounded) until /status shows `imports` held and `libraries` in the table; returns the last one seen.
  json::object status_eventually(std::size_t imports, std::size_t libraries) {
    json::object status;
    eventually(
        [&] {
          status = classic_status();
          return status.contains("imports") && status.at("imports") == imports &&
                 status.at("libraries").as_array().size() == libraries;
        },
        30s);
    return status;
  }
  static std::set<std::string> names_in(const json::object& status) {
    std::set<std::string> names;
    if (const auto* libraries = status.if_contains("libraries"))
      for (const auto& l : libraries->as_array()) names.insert(json::value_to<std::string>(l.at("library")));
    return names;
  }

  // A glob entry served by the test worker, which takes any name.
  static LibrarySpec any_name(const std::string& glob, std::vector<std::string> extra = {}, std::string more = {}) {
    LibrarySpec spec;
    spec.name = glob;
    spec.command = {test_worker_binary(), "--name", "{library}"};
    for (auto& arg : extra) spec.command.push_back(std::move(arg));
    spec.extra_toml = std::move(more);
    return spec;
  }

  std::uint16_t admin_port_ = 0;
};

// Issue 22's reproducer: one client names ten libraries through a glob entry whose worker takes any name,
// with [gateway] max_workers = 8. The front holds at most max_imports (4 by default) at once, ending the one
// used least recently for the next; those workers stop, the names leave /status, and an exact library still
// imports for a JSON-RPC client. (Before, all eight workers stayed held for good, and it was at capacity.)
TEST_F(ClassicLimitsTest, ImportsAreCappedAndLeaveWorkersForJsonRpcClients) {
  auto exact = test_library("TestLibrary");
  exact.extra_toml = "queue_timeout = \"3s\"\n";
  GatewayOptions options;
  options.extra_gateway_toml = "max_workers = 8\n";
  start_with_status({exact, any_name("CalcX*", {}, "queue_timeout = \"3s\"\n")}, {}, options);

  for (int i = 0; i < 10; ++i) {
    const auto path = fmt::format("/CalcX{}", i);
    const auto answer = post(path, kGetKeywordNames);
    EXPECT_TRUE(contains(answer, ">Echo<") && !contains(answer, "<fault>")) << path << ": " << answer;
  }
  const auto status = status_eventually(4, 4);
  EXPECT_EQ(status.at("imports"), 4) << status;
  EXPECT_EQ(names_in(status), (std::set<std::string>{"CalcX6", "CalcX7", "CalcX8", "CalcX9"})) << status;
  const auto pids = pids_eventually(R"(classic CalcX\d: imported library CalcX\d in worker pid (\d+))", 10);
  ASSERT_EQ(pids.size(), 10u) << gateway().log_tail();
  for (std::size_t i = 0; i < 6; ++i) EXPECT_TRUE(wait_pid_gone(pids[i], 30s)) << "the import of CalcX" << i;
  for (std::size_t i = 6; i < 10; ++i) EXPECT_FALSE(pid_gone(pids[i])) << "the import of CalcX" << i;
  EXPECT_TRUE(log_eventually("making room for an import of another library ([classic] max_imports)", 6));

  auto [client, token] = session("TestLibrary");
  RJG_ASSERT_KEYWORD_OK(client.run_keyword(token, "Echo", json::array{"room for JSON-RPC clients"}));
  // And the classic names are served still, each making room in turn.
  EXPECT_TRUE(contains(post("/CalcX0", kGetKeywordNames), ">Echo<"));
}

// An import that no call used for idle_timeout ends: its worker stops and the library leaves /status. One
// that serves a call does not, however long the call takes; the next call imports afresh.
TEST_F(ClassicLimitsTest, AnImportNoCallUsedForIdleTimeoutEnds) {
  start_with_status(default_libraries(), "idle_timeout = \"1s\"\n");
  const auto first = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  ASSERT_TRUE(first.is_int64()) << first;
  const auto pid = remember_pid(static_cast<pid_t>(as_int(first)));
  EXPECT_TRUE(wait_pid_gone(pid, 30s)) << gateway().log_tail();
  const auto gone = status_eventually(0, 0);
  EXPECT_EQ(gone.at("imports"), 0) << gone;
  EXPECT_TRUE(gone.at("libraries").as_array().empty()) << gone;
  EXPECT_TRUE(log_eventually("ending the import of library TestLibrary: no classic call used it for 1s ([classic] "
                             "idle_timeout)"));

  // A keyword longer than idle_timeout keeps its import: the idle clock runs only between calls.
  const auto slept = run("/TestLibrary", "Sleep", {2.5});
  EXPECT_EQ(result_struct(slept).at("status"), "PASS") << slept;
  const auto again = result_struct(run("/TestLibrary", "Get Pid")).at("return");
  ASSERT_TRUE(again.is_int64()) << again;
  EXPECT_NE(again, first);
  remember_pid(static_cast<pid_t>(as_int(again)));
}

// Names that fail to import are forgotten at once, and released ones once they end: the table (and /status)
// does not grow with the distinct names clients try.
TEST_F(ClassicLimitsTest, TheTableOfNamesDoesNotGrowWithFailedOrReleasedNames) {
  start_with_status({test_library("TestLibrary"), any_name("BadX*", {"--fail-import"})}, "idle_timeout = \"1s\"\n");
  for (int i = 0; i < 30; ++i) {
    const auto path = fmt::format("/BadX{}", i);
    const auto answer = post(path, kGetKeywordNames);
    EXPECT_TRUE(contains(answer, "<fault>") && contains(answer, "simulated import failure")) << path << ": " << answer;
  }
  auto status = status_eventually(0, 0);
  EXPECT_EQ(status.at("imports"), 0) << status;
  EXPECT_TRUE(status.at("libraries").as_array().empty()) << status;

  // Names that imported leave too, once their imports have ended.
  EXPECT_TRUE(contains(post("/TestLibrary", kGetKeywordNames), ">Echo<"));
  EXPECT_TRUE(log_eventually("ending the import of library TestLibrary"));
  status = status_eventually(0, 0);
  EXPECT_TRUE(status.at("libraries").as_array().empty()) << status;
}

// At the cap with every import serving a call, a call that needs another waits up to its library's
// queue_timeout, then gets a fault naming the key to raise. Once the call ends, its import is the one ended
// to make room.
TEST_F(ClassicLimitsTest, AtTheCapWithEveryImportBusyACallWaitsThenGetsAFaultNamingTheKey) {
  auto libraries = default_libraries();
  libraries[1].extra_toml = "queue_timeout = \"2s\"\n";
  start_with_status(libraries, "max_imports = 1\n");
  const auto file = gateway().dir() / "go";
  json::value waited;
  std::thread busy([&] { waited = run("/TestLibrary", "Wait For File", {file.string(), 60.0}); });
  const bool running = log_eventually("running keyword 'Wait For File'", 1, 30s);
  const auto refused = run("/SecondLibrary", "Echo", {"no room"});
  write_file(file, "go");
  busy.join();
  ASSERT_TRUE(running) << gateway().log_tail();
  EXPECT_TRUE(contains(fault_of(refused), "[classic] max_imports = 1")) << refused;
  EXPECT_TRUE(contains(fault_of(refused), "queue_timeout")) << refused;
  EXPECT_EQ(result_struct(waited).at("status"), "PASS") << waited;

  EXPECT_EQ(result_struct(run("/SecondLibrary", "Echo", {"room now"})).at("return"), "room now");
  const auto status = status_eventually(1, 1);
  EXPECT_EQ(names_in(status), std::set<std::string>{"SecondLibrary"}) << status;
}

// The imports the front makes for an address's calls count as its sessions (max_sessions_per_client), with
// its JSON-RPC sessions: at the limit, neither front lets it hold more.
TEST_F(ClassicLimitsTest, ImportsCountAsSessionsOfTheClientWhoseCallMadeThem) {
  GatewayOptions options;
  options.extra_gateway_toml = "max_sessions_per_client = 2\n";
  start_with_status(default_libraries(), {}, options);
  EXPECT_EQ(result_struct(run("/TestLibrary", "Echo", {"one"})).at("return"), "one");
  auto [client, token] = session("TestLibrary");  // the second
  const auto refused = run("/SecondLibrary", "Echo", {"three"});
  EXPECT_TRUE(contains(fault_of(refused), "max_sessions_per_client = 2")) << refused;
  EXPECT_TRUE(contains(fault_of(refused), "127.0.0.1")) << refused;
  // An import held already serves it all the same.
  EXPECT_EQ(result_struct(run("/TestLibrary", "Echo", {"held"})).at("return"), "held");

  // Its JSON-RPC session ends: room for the classic import, after which a new session is refused.
  client.close();
  json::value made;
  EXPECT_TRUE(eventually(
      [&] {
        made = run("/SecondLibrary", "Echo", {"now"});
        return result_struct(made).if_contains("return") && result_struct(made).at("return") == "now";
      },
      30s, 200ms))
      << made;
  client::RpcClient refused_session = connect();
  const auto closing = refused_session.read_message(20s);
  ASSERT_TRUE(closing) << "no answer from the gateway";
  EXPECT_EQ(closing->kind, protocol::Message::Kind::error_response);
  EXPECT_TRUE(contains(closing->error_message(), "max_sessions_per_client")) << closing->error_message();
}

}  // namespace
}  // namespace rjg::test
