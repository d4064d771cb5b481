// The pickle policy: real pickles of Robot data (tests/data/pickles/benign and the recorded traces) pass the
// data-only check, and every route to running code we know of is refused, with a message that says
// what, where, and which configuration key changes it.
//
// Malicious pickles are hex literals here: the ones named "python" were made by pickle.dumps of a class
// whose __reduce__ returns (os.system, ("id",)) (or eval, subprocess.Popen); the rest are built by hand
// with the small builders below, opcode by opcode.
#include "common/pickle/pickle_policy.hpp"

#include "common/protocol/json_text.hpp"
#include "tests/unit/hash_flood.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace json = boost::json;
using rjg::pickle::check_pickle_data_only;
using rjg::pickle::describe;
using rjg::pickle::inspect_pickles;
using rjg::pickle::PickleLimits;
using rjg::pickle::PickleMode;

// ---------------------------------------------------------------------------------------------------
// Builders for hand-made pickles.

std::string hex_to_bytes(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string le(std::uint64_t v, int width) {
  std::string out;
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

std::string op(unsigned char c) { return std::string(1, static_cast<char>(c)); }
const std::string P4 = "\x80\x04";
const std::string P5 = "\x80\x05";
const std::string kMark = "(", kStop = ".", kMemo = "\x94", kStackGlobal = "\x93", kReduce = "R", kBuild = "b";
const std::string kEmptyTuple = ")", kTuple1 = "\x85", kTuple2 = "\x86", kTuple3 = "\x87", kTuple = "t";
const std::string kEmptyList = "]", kEmptyDict = "}", kEmptySet = "\x8f", kAppend = "a", kAppends = "e";
const std::string kSetItem = "s", kSetItems = "u", kAddItems = "\x90", kNone = "N";
std::string str(std::string_view s) { return "\x8c" + le(s.size(), 1) + std::string(s); }
std::string bytes(std::string_view s) { return "C" + le(s.size(), 1) + std::string(s); }
std::string int1(unsigned v) { return "K" + le(v, 1); }
std::string binput(unsigned i) { return "q" + le(i, 1); }
std::string binget(unsigned i) { return "h" + le(i, 1); }
std::string global(std::string_view module, std::string_view name) { return str(module) + str(name) + kStackGlobal; }
std::string frame(std::uint64_t n) { return "\x95" + le(n, 8); }

std::optional<std::string> check(std::string_view bytes, std::size_t* offset = nullptr, const PickleLimits& limits = {}) {
  return check_pickle_data_only(bytes, offset, limits);
}

// Expects a refusal whose reason contains `what`; returns the offset.
std::size_t expect_refused(std::string_view pickle, std::string_view what, const PickleLimits& limits = {}) {
  std::size_t offset = 12345;
  auto why = check(pickle, &offset, limits);
  EXPECT_TRUE(why.has_value()) << "admitted: " << to_hex(pickle);
  if (why) {
    EXPECT_NE(why->find(what), std::string::npos) << "reason: " << *why << "\nwanted: " << what;
  }
  EXPECT_LE(offset, pickle.size());
  return offset;
}

void expect_admitted(std::string_view pickle, const PickleLimits& limits = {}) {
  std::size_t offset = 0;
  auto why = check(pickle, &offset, limits);
  EXPECT_FALSE(why.has_value()) << *why << " at byte " << offset << " of " << to_hex(pickle).substr(0, 400);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------------------------------------------
// The benign corpus and the recorded traces.

TEST(PickleCorpus, EveryBenignPickleIsAdmitted) {
  std::filesystem::path dir(RJG_PICKLES_DIR);
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "fixture missing: benign pickles folder " << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pkl") continue;
    ++files;
    auto data = read_file(entry.path());
    std::size_t offset = 0;
    auto why = check(data, &offset);
    EXPECT_FALSE(why.has_value()) << entry.path().filename() << ": " << *why << " at byte " << offset;
  }
  EXPECT_GE(files, 174);
}

// Every proper prefix of a real pickle is a truncated stream: refused, and never read out of bounds.
TEST(PickleCorpus, EveryTruncationOfABenignPickleIsRefused) {
  std::filesystem::path dir(RJG_PICKLES_DIR);
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "fixture missing: benign pickles folder " << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pkl") continue;
    ++files;
    auto data = read_file(entry.path());
    std::vector<std::size_t> cuts;
    if (data.size() <= 4096) {
      for (std::size_t n = 0; n < data.size(); ++n) cuts.push_back(n);
    } else {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{11},
                            std::size_t{20}, data.size() / 2, data.size() - 2, data.size() - 1})
        cuts.push_back(n);
    }
    for (auto n : cuts)
      EXPECT_TRUE(check(std::string_view(data).substr(0, n)).has_value())
          << entry.path().filename() << " cut at " << n << " was admitted";
  }
  EXPECT_GT(files, 0) << "fixture missing: no .pkl file in " << dir;
}

int count_pickled(const json::value& v) {
  int n = 0;
  if (auto* o = v.if_object()) {
    if (o->contains("__pickled__")) return 1;
    for (auto& m : *o) n += count_pickled(m.value());
  } else if (auto* a = v.if_array()) {
    for (auto& e : *a) n += count_pickled(e);
  }
  return n;
}

TEST(PickleCorpus, EveryPickledValueInTheTracesIsAdmitted) {
  std::filesystem::path dir(RJG_TRACES_DIR);
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "fixture missing: traces folder " << dir;
  int files = 0, pickled = 0, denied = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jsonl") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto body = std::string(json::parse(line).as_object().at("body").as_string());
      json::error_code ec;
      auto v = json::parse(body, ec);
      if (ec) continue;  // the malformed-JSON probe
      int here = count_pickled(v);
      pickled += here;
      auto refusal = inspect_pickles(v, PickleMode::data_only, "");
      EXPECT_FALSE(refusal.has_value()) << entry.path().filename() << ": " << (refusal ? describe(*refusal, "X") : "");
      if (here) {
        auto d = inspect_pickles(v, PickleMode::deny, "");
        EXPECT_TRUE(d.has_value());
        if (d) {
          ++denied;
          EXPECT_TRUE(d->path == "params.args[0]" || d->path == "result.result") << d->path;
        }
      }
    }
  }
  EXPECT_GT(files, 0) << "fixture missing: no .jsonl file in " << dir;
  EXPECT_GE(pickled, 28);
  EXPECT_EQ(denied, pickled);  // one pickled value per body in these traces
}

// ---------------------------------------------------------------------------------------------------
// Plain data built by hand: what the data-only policy is for.

TEST(PickleDataOnly, AdmitsPlainDataShapes) {
  // DotDict as Robot sends it: STACK_GLOBAL, EMPTY_TUPLE, REDUCE, then SETITEMS on the result.
  expect_admitted(P4 + global("robot.utils.dotdict", "DotDict") + kMemo + kEmptyTuple + kReduce + kMemo + kMark +
                  str("a") + int1(1) + str("b") + binget(0) + kEmptyTuple + kReduce + kSetItems + kStop);
  // a memo'd list referenced twice
  expect_admitted(P5 + kEmptyList + kMemo + kMark + kEmptyList + kMemo + int1(1) + kAppend + binget(1) + binget(1) +
                  kAppends + kStop);
  // BINPUT and MEMOIZE mixed, in order
  expect_admitted(P4 + str("datetime") + binput(0) + str("date") + kMemo + kStackGlobal + bytes("\x07\xe8\x01\x02") +
                  kTuple1 + kReduce + kStop);
  // text PUT/GET with plain decimal arguments
  expect_admitted(P4 + str("x") + "p0\n" + "g0\n" + kTuple2 + kStop);
  // timezone with a name inside a time
  expect_admitted(P4 + global("datetime", "time") + bytes(std::string("\x01\x02\x03\x00\x00\x00", 6)) +
                  global("datetime", "timezone") + global("datetime", "timedelta") + int1(0) + int1(60) + int1(0) +
                  kTuple3 + kReduce + str("X") + kTuple2 + kReduce + kTuple2 + kReduce + kStop);
  // bytearray both ways, Decimal, frozenset of tuples, set, nested dict keys
  expect_admitted(P4 + global("builtins", "bytearray") + kEmptyTuple + kReduce + kStop);
  expect_admitted(P5 + "\x96" + le(2, 8) + "ab" + kStop);
  expect_admitted(P4 + global("decimal", "Decimal") + str("-1.5E+3") + kTuple1 + kReduce + kStop);
  expect_admitted(P4 + kMark + int1(1) + int1(2) + kTuple2 + kNone + "\x88" + "\x89" + "\x91" + kStop);
  expect_admitted(P4 + kEmptyDict + kMark + int1(1) + int1(2) + kTuple2 + str("v") + str("k") + kEmptySet + kMark +
                  int1(1) + kAddItems + kSetItems + kStop);
  // a LONG4 integer (2**3000)
  expect_admitted(P4 + "\x8b" + le(376, 4) + std::string(375, '\0') + "\x01" + kStop);
  // strings with every UTF-8 width, and an encoded surrogate (CPython decodes with surrogatepass)
  expect_admitted(P4 + str("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") + kStop);
  expect_admitted(P4 + str("\xed\xa0\x80") + kStop);
}

// ---------------------------------------------------------------------------------------------------
// Pickles made by Python from a __reduce__ that returns os.system, eval or subprocess.Popen.

struct PythonMade {
  const char* name;
  const char* hex;
  const char* what;
};

const PythonMade kPythonMade[] = {
    {"os.system p0", "63706f7369780a73797374656d0a70300a285669640a70310a7470320a5270330a2e", "not PROTO"},
    {"os.system p2", "800263706f7369780a73797374656d0a71005802000000696471018571025271032e", "protocol 2"},
    {"os.system p3", "800363706f7369780a73797374656d0a71005802000000696471018571025271032e", "protocol 3"},
    {"os.system p4", "8004951d000000000000008c05706f736978948c0673797374656d9493948c02696494859452942e",
     "class posix.system is not allowed"},
    {"os.system p5", "8005951d000000000000008c05706f736978948c0673797374656d9493948c02696494859452942e",
     "class posix.system is not allowed"},
    {"eval p4",
     "80049539000000000000008c086275696c74696e73948c046576616c9493948c1d5f5f696d706f72745f5f28276f7327292e73797374"
     "656d28276964272994859452942e",
     "class builtins.eval is not allowed"},
    {"Popen p5",
     "80059524000000000000008c0a73756270726f63657373948c05506f70656e9493945d948c0269649461859452942e",
     "class subprocess.Popen is not allowed"},
    {"os.system inside {'a': [1, Evil()]}",
     "8004952a000000000000007d948c0161945d94284b018c05706f736978948c0673797374656d9493948c026964948594529465732e",
     "class posix.system is not allowed"},
    {"a class as the value (datetime.date itself)",
     "80049515000000000000008c086461746574696d65948c04646174659493942e", "class datetime.date used as a value"},
    {"ValueError('x')", "80049523000000000000008c086275696c74696e73948c0a56616c75654572726f729493948c017894859452942e",
     "class builtins.ValueError is not allowed"},
};

TEST(PickleDataOnly, RefusesPythonMadeExploits) {
  for (const auto& p : kPythonMade) {
    SCOPED_TRACE(p.name);
    expect_refused(hex_to_bytes(p.hex), p.what);
  }
  // The REDUCE of os.system is refused where the class is named: at its STACK_GLOBAL, byte 28.
  EXPECT_EQ(expect_refused(hex_to_bytes(kPythonMade[3].hex), "posix.system"), 28u);
}

// ---------------------------------------------------------------------------------------------------
// Names: only exact allowlisted pairs, whatever route they take to STACK_GLOBAL.

TEST(PickleDataOnly, RefusesEveryNameOffTheAllowlist) {
  const std::pair<const char*, const char*> names[] = {
      {"os", "system"},
      {"posix", "system"},
      {"nt", "system"},
      {"builtins", "eval"},
      {"builtins", "exec"},
      {"builtins", "getattr"},
      {"builtins", "__import__"},
      {"builtins", "open"},
      {"subprocess", "Popen"},
      {"subprocess", "check_output"},
      {"operator", "attrgetter"},
      {"_operator", "methodcaller"},
      {"functools", "partial"},
      {"importlib", "import_module"},
      {"pkgutil", "resolve_name"},
      {"runpy", "_run_code"},
      {"pickle", "loads"},
      {"_pickle", "loads"},
      {"marshal", "loads"},
      {"copyreg", "_reconstructor"},
      {"timeit", "timeit"},
      {"pty", "spawn"},
      {"code", "InteractiveInterpreter"},
      // dotted names walk attributes in Python (protocol 4+): each starts at an allowed class
      {"robot.utils.dotdict", "DotDict.__init__.__globals__"},
      {"collections", "OrderedDict.__init__.__globals__"},
      {"collections", "OrderedDict.fromkeys"},
      {"datetime", "datetime.fromisoformat"},
      {"datetime", "sys"},
      {"decimal", "Decimal.__reduce__"},
      {"builtins", "bytearray.fromhex"},
      {"builtins", "bytearray.__class__"},
      // near misses of allowed pairs
      {"robot.utils", "DotDict"},
      {"robot.utils.dotdict.DotDict", "__init__"},
      {"robot.utils.dotdict", "dotdict"},
      {"Datetime", "date"},
      {"datetime ", "date"},
      {"datetime", "date "},
      {"__builtin__", "bytearray"},
      {"", "bytearray"},
      {"datetime", ""},
  };
  for (const auto& [module, name] : names) {
    std::string expected = std::string("class ") + module + "." + name + " is not allowed";
    SCOPED_TRACE(expected);
    expect_refused(P4 + global(module, name) + kMemo + str("id") + kTuple1 + kReduce + kStop, expected);
    // the same through the memo: names stored and fetched back are still exactly these constants
    expect_refused(P4 + str(module) + kMemo + str(name) + kMemo + kNone + kTuple1 + binget(0) + binget(1) +
                       kStackGlobal + kEmptyTuple + kReduce + kTuple2 + kStop,
                   expected);
  }
  // NUL and non-ASCII bytes inside a name
  expect_refused(P4 + global(std::string("datetime\0", 9), "date") + kStop, "is not allowed");
  expect_refused(P4 + global("d\xc3\xa4tetime", "date") + kStop, "is not allowed");
}

TEST(PickleDataOnly, RefusesStackGlobalOperandsThatAreNotStringConstants) {
  // bytes, an int, a tuple, None and a list where the module or the name should be
  expect_refused(P4 + bytes("datetime") + str("date") + kStackGlobal + kStop, "two string constants, got bytes and str");
  expect_refused(P4 + str("datetime") + int1(0) + kStackGlobal + kStop, "got str and int");
  expect_refused(P4 + str("datetime") + str("date") + kTuple1 + str("date") + kStackGlobal + kStop, "got tuple");
  expect_refused(P4 + kNone + kNone + kStackGlobal + kStop, "got None and None");
  expect_refused(P4 + kEmptyList + kMemo + binget(0) + kStackGlobal + kStop, "got list and list");
  // a memo entry holding an int fetched where a name should be
  expect_refused(P4 + int1(7) + kMemo + str("datetime") + binget(0) + kStackGlobal + kStop, "got str and int");
  // the result of a REDUCE (a Decimal) as a module name
  expect_refused(P4 + global("decimal", "Decimal") + str("1") + kTuple1 + kReduce + str("x") + kStackGlobal + kStop,
                 "got decimal.Decimal and str");
  // too few operands, and operands below a MARK
  expect_refused(P4 + str("datetime") + kStackGlobal + kStop, "stack underflow");
  expect_refused(P4 + str("datetime") + str("date") + kMark + kStackGlobal + kStop, "stack underflow");
}

// ---------------------------------------------------------------------------------------------------
// The memo.

TEST(PickleDataOnly, RefusesMemoTricks) {
  // memoize the allowed names, then overwrite entry 0 with "os" through BINPUT: a scanner that follows
  // MEMOIZE only would think entry 0 still says "datetime"
  expect_refused(P4 + str("datetime") + kMemo + str("date") + kMemo + str("os") + binput(0) + binget(0) +
                     str("system") + kStackGlobal + kStop,
                 "memo index 0 is not the next free one (2)");
  // memoize an allowed class, then replace it at the same index
  expect_refused(P4 + global("datetime", "date") + binput(0) + str("x") + binput(0) + kStop, "memo index 0");
  // out-of-order text PUTs (picklescan issue 22): PUT 2 first
  expect_refused(P4 + str("os") + "p2\n" + kStop, "memo index 2 is not the next free one (0)");
  // a gap, and an index far away
  expect_refused(P4 + str("a") + binput(1) + kStop, "memo index 1");
  expect_refused(P4 + str("a") + "r" + le(0xffffffff, 4) + kStop, "memo index 4294967295");
  // GET of an entry never set, near and far
  expect_refused(P4 + binget(0) + kStop, "memo index 0 was never set");
  expect_refused(P4 + str("a") + kMemo + "j" + le(0xffffffff, 4) + kStop, "memo index 4294967295 was never set");
  expect_refused(P4 + "g99999999\n" + kStop, "never set");
  // GET of an entry that holds something else than the class: a list is not callable
  expect_refused(P4 + kEmptyList + kMemo + binget(0) + kEmptyTuple + kReduce + kStop, "REDUCE calls a list");
  // text arguments that int() would read but that are not plain digits
  for (const char* arg : {"+0", "-0", " 0", "0 ", "0_0", "", "0x0", "1234567890"})
    expect_refused(P4 + str("a") + "p" + arg + "\n" + kStop, "not a plain decimal number");
  expect_refused(P4 + str("a") + "p0" + kStop, "no end of line");
  // MEMOIZE with nothing above the MARK (the C unpickler would memoize the value below it)
  expect_refused(P4 + str("a") + kMark + kMemo + kStop, "stack underflow");
  // the memo bound
  PickleLimits small;
  small.max_memo = 2;
  expect_admitted(P4 + kNone + kMemo + kNone + kMemo + kTuple2 + kStop, small);
  expect_refused(P4 + kNone + kMemo + kNone + kMemo + kNone + kMemo + kTuple3 + kStop, "more than 2 memo entries",
                 small);
}

// ---------------------------------------------------------------------------------------------------
// Opcodes.

TEST(PickleDataOnly, RefusesEveryOpcodeOutsideThePlainDataSet) {
  // the opcodes plain data needs (every other byte must be refused as an opcode)
  const std::set<int> admitted = {'(', '.', 'J', 'K', 'M', 0x8a, 0x8b, 'G', 'N', 0x88, 0x89, 'X', 0x8c, 0x8d,
                                  'B', 'C', 0x8e, 0x96, ')', 0x85, 0x86, 0x87, 't', ']', 'a', 'e', '}', 's',
                                  'u', 0x8f, 0x90, 0x91, 0x93, 'R', 0x94, 'p', 'q', 'r', 'g', 'h', 'j', 0x80,
                                  0x95, 0x81, 'b'};
  int refused = 0;
  for (int c = 0; c < 256; ++c) {
    if (admitted.count(c)) continue;
    auto why = check(P4 + kNone + op(static_cast<unsigned char>(c)) + std::string(8, '\0') + "\n\n" + kStop);
    ASSERT_TRUE(why.has_value()) << "opcode 0x" << std::hex << c;
    EXPECT_NE(why->find("opcode"), std::string::npos) << *why;
    ++refused;
  }
  EXPECT_EQ(refused, 256 - static_cast<int>(admitted.size()));
}

TEST(PickleDataOnly, RefusesCodeRunningOpcodesByName) {
  struct Case {
    std::string pickle;
    const char* what;
  };
  const Case cases[] = {
      {P4 + "cos\nsystem\n" + str("id") + kTuple1 + kReduce + kStop, "opcode GLOBAL is not allowed"},
      {P4 + kMark + str("id") + "ios\nsystem\n" + kStop, "opcode INST is not allowed"},
      {P4 + kMark + global("datetime", "date") + str("id") + "o" + kStop, "opcode OBJ is not allowed"},
      {P4 + global("collections", "OrderedDict") + kEmptyTuple + "\x81" + kStop,
       "NEWOBJ on collections.OrderedDict is not allowed"},
      {P4 + global("collections", "OrderedDict") + kEmptyTuple + kEmptyDict + "\x92" + kStop,
       "opcode NEWOBJ_EX is not allowed"},
      {P4 + "\x82\x01" + kStop, "opcode EXT1 is not allowed"},
      {P4 + "\x83\x01\x00" + kStop, "opcode EXT2 is not allowed"},
      {P4 + "\x84\x01\x00\x00\x00" + kStop, "opcode EXT4 is not allowed"},
      {P4 + "Pos.system\n" + kStop, "opcode PERSID is not allowed"},
      {P4 + str("x") + "Q" + kStop, "opcode BINPERSID is not allowed"},
      {P5 + "\x97" + kStop, "opcode NEXT_BUFFER is not allowed"},
      {P5 + kNone + "\x98" + kStop, "opcode READONLY_BUFFER is not allowed"},
      {P4 + kNone + "2" + kTuple2 + kStop, "opcode DUP is not allowed"},
      {P4 + kNone + "0" + kNone + kStop, "opcode POP is not allowed"},
      {P4 + kMark + "1" + kNone + kStop, "opcode POP_MARK is not allowed"},
      {P4 + "S'os'\n" + kStop, "opcode STRING is not allowed"},
      {P4 + "Vos\n" + kStop, "opcode UNICODE is not allowed"},
      {P4 + "U\x02os" + kStop, "opcode SHORT_BINSTRING is not allowed"},
      {P4 + "I01\n" + kStop, "opcode INT is not allowed"},
      {P4 + kMark + "l" + kStop, "opcode LIST is not allowed"},
      {P4 + kMark + "d" + kStop, "opcode DICT is not allowed"},
      {P4 + "\xff" + kStop, "opcode 0xff (not a pickle opcode) is not allowed"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto offset = expect_refused(c.pickle, c.what);
    EXPECT_GT(offset, 1u);
  }
}

TEST(PickleDataOnly, RefusesBuildOnAllowedClasses) {
  // setstate injection: BUILD with a dict (instance __dict__) or a (state, slotstate) pair on a DotDict,
  // and on a datetime
  expect_refused(P4 + global("robot.utils.dotdict", "DotDict") + kEmptyTuple + kReduce + kEmptyDict + str("__class__") +
                     str("x") + kSetItem + kBuild + kStop,
                 "BUILD on a robot.utils.dotdict.DotDict (only on a new");
  expect_refused(P4 + global("collections", "OrderedDict") + kEmptyTuple + kReduce + kNone + kEmptyDict + kTuple2 +
                     kBuild + kStop,
                 "BUILD on a collections.OrderedDict (only on a new");
  expect_refused(P4 + global("datetime", "date") + bytes("\x07\xe8\x01\x02") + kTuple1 + kReduce + kEmptyDict + kBuild +
                     kStop,
                 "BUILD on a datetime.date (only on a new");
  // and on the values REDUCE makes of the classes added for Robot's standard libraries
  expect_refused(P4 + global("pathlib", "PosixPath") + kEmptyTuple + kReduce + kEmptyDict + kBuild + kStop,
                 "BUILD on a pathlib.PosixPath");
  expect_refused(P4 + global("builtins", "complex") + int1(1) + int1(2) + kTuple2 + kReduce + kEmptyDict + kBuild +
                     kStop,
                 "BUILD on a complex");
}

// ---------------------------------------------------------------------------------------------------
// The classes Robot Framework's standard libraries return and take (issue #23 item 6), each in the
// exact shape CPython writes and nothing more. The review of each is next to kAllowed.

// Real pickles (pickle.dumps, protocol 4) of XML's Parse XML result for
//   <root xmlns:n="urn:x" a="1"><n:item id="1">one</n:item>between<item id="2">two<sub/>tail</item></root>
// by CPython 3.8 with the C accelerator (_elementtree) and with the pure-Python module (the same bytes
// in 3.11 and 3.13), and of lists of complex numbers and paths, and of a Secret.
const char* const kElementC =
    "8004955d010000000000008c15786d6c2e65747265652e456c656d656e7454726565948c07456c656d656e749493942981947d94288c03"
    "746167948c04726f6f74948c095f6368696c6472656e945d942868022981947d94288c03746167948c0b7b75726e3a787d6974656d948c"
    "095f6368696c6472656e945d948c06617474726962947d948c026964948c013194738c0474657874948c036f6e65948c047461696c948c"
    "076265747765656e94756268022981947d94288c03746167948c046974656d948c095f6368696c6472656e945d9468022981947d94288c"
    "03746167948c03737562948c095f6368696c6472656e945d948c06617474726962947d948c0474657874944e8c047461696c948c047461"
    "696c947562618c06617474726962947d9468118c013294738c0474657874948c0374776f948c047461696c944e7562658c066174747269"
    "62947d948c0161946812738c0474657874944e8c047461696c944e75622e";
const char* const kElementPurePython =
    "800495f4000000000000008c15786d6c2e65747265652e456c656d656e7454726565948c07456c656d656e749493942981947d94288c03"
    "746167948c04726f6f74948c06617474726962947d948c0161948c013194738c095f6368696c6472656e945d942868022981947d942868"
    "058c0b7b75726e3a787d6974656d9468077d948c02696494680a73680b5d948c0474657874948c036f6e65948c047461696c948c076265"
    "747765656e94756268022981947d942868058c046974656d9468077d9468118c01329473680b5d9468022981947d942868058c03737562"
    "9468077d94680b5d9468158c047461696c9475626168138c0374776f9475626575622e";
// [1+2j, complex(-0.0, inf), 3j]
const char* const kComplexes =
    "80049562000000000000005d94288c086275696c74696e73948c07636f6d706c6578949394473ff0000000000000474000000000000000"
    "869452946803478000000000000000477ff000000000000086945294680347000000000000000047400800000000000086945294652e";
// [PosixPath('/tmp/a b'), PurePosixPath('a/b'), PosixPath('.'), PosixPath('//x/y')]: 3.8 to 3.12 write
// the parts, 3.13 the raw segments under the module name pathlib._local.
const char* const kPaths =
    "80049569000000000000005d94288c07706174686c6962948c09506f736978506174689493948c012f948c03746d70948c036120629487"
    "94529468018c0d50757265506f736978506174689493948c0161948c01629486945294680329529468038c022f2f948c0178948c017994"
    "87945294652e";
const char* const kPaths313 =
    "8004956b000000000000005d94288c0e706174686c69622e5f6c6f63616c948c09506f736978506174689493948c082f746d702f612062"
    "948594529468018c0d50757265506f736978506174689493948c0161948c0162948694529468038c012e948594529468038c052f2f782f"
    "799485945294652e";
// Secret('s3cr3t')
const char* const kSecret =
    "80049539000000000000008c12726f626f742e7574696c732e736563726574948c065365637265749493942981947d948c0576616c7565"
    "948c067333637233749473622e";

TEST(PickleStandardLibraries, AdmitsWhatCPythonWritesForThem) {
  for (const char* hex : {kElementC, kElementPurePython, kComplexes, kPaths, kPaths313, kSecret}) {
    SCOPED_TRACE(std::string(hex).substr(0, 120));
    expect_admitted(hex_to_bytes(hex));
  }
  // inside the JSON the stock client sends, at any depth
  const auto args = json::parse(std::string(R"([{"__pickled__": ")") + kElementC + R"("}, 1])");
  EXPECT_FALSE(inspect_pickles(args, PickleMode::data_only, "args").has_value());
}

// Builders for the object shapes: NEWOBJ of the class with (), then BUILD with the state dict.
std::string element_new() { return global("xml.etree.ElementTree", "Element") + kEmptyTuple + "\x81"; }
std::string secret_new() { return global("robot.utils.secret", "Secret") + kEmptyTuple + "\x81"; }
// An Element's state: tag, then the other members (key and value pickles) as they come.
std::string element_state(const std::string& tag_value, const std::string& members = "") {
  return kEmptyDict + kMark + str("tag") + tag_value + members + kSetItems;
}
std::string leaf(std::string_view tag) {
  return element_new() + element_state(str(tag), str("attrib") + kEmptyDict + str("_children") + kEmptyList) + kBuild;
}

TEST(PickleStandardLibraries, AdmitsElementStatesInEveryFormCPythonWrites) {
  // only the tag (the pure-Python pickler leaves unset text and tail out), text and tail None or str,
  // attributes str to str, children as APPEND and APPENDS, a child shared through the memo
  expect_admitted(P4 + element_new() + element_state(str("a")) + kBuild + kStop);
  expect_admitted(P4 + element_new() +
                  element_state(str("a"), str("text") + kNone + str("tail") + str("t") + str("attrib") + kEmptyDict +
                                              str("k") + str("v") + kSetItem) +
                  kBuild + kStop);
  expect_admitted(P4 + element_new() +
                  element_state(str("a"), str("_children") + kEmptyList + kMark + leaf("b") + leaf("c") + kAppends) +
                  kBuild + kStop);
  expect_admitted(P4 + element_new() +
                  element_state(str("a"), str("_children") + kEmptyList + leaf("b") + kMemo + kAppend + binget(0) + kAppend) +
                  kBuild + kStop);
  // a list of Elements (XML's Get Elements) and Elements as dict values
  expect_admitted(P4 + kEmptyList + kMark + leaf("a") + leaf("b") + kAppends + kStop);
  expect_admitted(P4 + kEmptyDict + str("k") + leaf("a") + kSetItem + kStop);
  expect_admitted(P4 + secret_new() + kEmptyDict + str("value") + str("") + kSetItem + kBuild + kStop);
}

TEST(PickleStandardLibraries, RefusesElementNearMisses) {
  struct Case {
    std::string pickle;
    const char* what;
  };
  const std::string with_children = str("_children") + kEmptyList;
  const Case cases[] = {
      // the tag: a class (the C __setstate__ stores any object), an int, missing
      {P4 + element_new() + element_state(global("datetime", "date")) + kBuild + kStop,
       "class datetime.date used as a value"},
      {P4 + element_new() + element_state(global("xml.etree.ElementTree", "Element")) + kBuild + kStop,
       "class xml.etree.ElementTree.Element used as a value"},
      {P4 + element_new() + element_state(int1(1)) + kBuild + kStop, "tag must be a str"},
      {P4 + element_new() + kEmptyDict + str("text") + str("t") + kSetItem + kBuild + kStop, "tag must be a str"},
      // attributes that are not str to str, or not a plain dict
      {P4 + element_new() + element_state(str("a"), str("attrib") + kEmptyDict + str("k") + int1(1) + kSetItem) +
           kBuild + kStop,
       "attrib must be a dict of str to str"},
      {P4 + element_new() + element_state(str("a"), str("attrib") + kEmptyDict + int1(1) + str("v") + kSetItem) +
           kBuild + kStop,
       "attrib must be a dict of str to str"},
      {P4 + element_new() +
           element_state(str("a"), str("attrib") + global("robot.utils.dotdict", "DotDict") + kEmptyTuple + kReduce) +
           kBuild + kStop,
       "attrib must be a dict of str to str"},
      {P4 + element_new() + element_state(str("a"), str("attrib") + kEmptyList) + kBuild + kStop,
       "attrib must be a dict of str to str"},
      // text and tail
      {P4 + element_new() + element_state(str("a"), str("text") + int1(1)) + kBuild + kStop, "text must be a str or None"},
      {P4 + element_new() + element_state(str("a"), str("tail") + bytes("t")) + kBuild + kStop,
       "tail must be a str or None"},
      // children: not a list, holding something else than Elements
      {P4 + element_new() + element_state(str("a"), str("_children") + kEmptyTuple) + kBuild + kStop,
       "_children must be a list of Elements"},
      {P4 + element_new() + element_state(str("a"), with_children + str("b") + kAppend) + kBuild + kStop,
       "_children must be a list of Elements"},
      {P4 + element_new() + element_state(str("a"), with_children + kMark + leaf("b") + int1(1) + kAppends) + kBuild +
           kStop,
       "_children must be a list of Elements"},
      // other keys: what a __setstate__-minded pickle would set
      {P4 + element_new() + element_state(str("a"), str("__class__") + str("x")) + kBuild + kStop,
       "a key other than tag"},
      {P4 + element_new() + element_state(str("a"), str("value") + str("x")) + kBuild + kStop, "a key other than tag"},
      {P4 + element_new() + element_state(str("a"), int1(1) + str("x")) + kBuild + kStop, "a key other than tag"},
      // the state: not a dict, the (state, slotstate) pair, an OrderedDict
      {P4 + element_new() + kNone + kEmptyDict + kTuple2 + kBuild + kStop, "with a tuple as its state"},
      {P4 + element_new() + global("collections", "OrderedDict") + kEmptyTuple + kReduce + kBuild + kStop,
       "with a collections.OrderedDict as its state"},
      // NEWOBJ with arguments, REDUCE instead of NEWOBJ, BUILD twice
      {P4 + global("xml.etree.ElementTree", "Element") + str("a") + kTuple1 + "\x81" + kStop,
       "NEWOBJ on xml.etree.ElementTree.Element with arguments (str,) is not allowed"},
      {P4 + global("xml.etree.ElementTree", "Element") + str("a") + kTuple1 + kReduce + kStop,
       "REDUCE on xml.etree.ElementTree.Element"},
      {P4 + leaf("a") + element_state(str("b")) + kBuild + kStop, "second BUILD"},
      // an Element used before its state is set, or never given one; its state holding itself
      {P4 + kEmptyList + element_new() + kAppend + kStop, "used as a value before BUILD"},
      {P4 + element_new() + kStop, "used as a value before BUILD"},
      {P4 + element_new() + kMemo + element_state(str("a"), with_children + binget(0) + kAppend) + kBuild + kStop,
       "used as a value before BUILD"},
      // an Element as a key (Python hashes it by identity; copies would merge or split)
      {P4 + kEmptyDict + leaf("a") + int1(1) + kSetItem + kStop, "unhashable xml.etree.ElementTree.Element as a dict key"},
      // its attributes changed after BUILD (the C __setstate__ keeps that very dict)
      {P4 + kEmptyDict + kMemo + element_new() + kEmptyDict + str("tag") + str("a") + kSetItem + str("attrib") +
           binget(0) + kSetItem + kBuild + binget(0) + str("k") + str("v") + kSetItem + kStop,
       "changed after it was placed in another value"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    expect_refused(c.pickle, c.what);
  }
}

TEST(PickleStandardLibraries, RefusesSecretPathAndComplexNearMisses) {
  struct Case {
    std::string pickle;
    const char* what;
  };
  const std::string value = str("value") + str("x");
  const Case cases[] = {
      // Secret: exactly {"value": str}
      {P4 + secret_new() + kEmptyDict + kMark + value + str("other") + str("y") + kSetItems + kBuild + kStop,
       "the state must be exactly {\"value\": str}"},
      {P4 + secret_new() + kEmptyDict + kMark + value + str("__setstate__") + str("y") + kSetItems + kBuild + kStop,
       "the state must be exactly"},
      {P4 + secret_new() + kEmptyDict + str("value") + int1(1) + kSetItem + kBuild + kStop, "the state must be exactly"},
      {P4 + secret_new() + kEmptyDict + kBuild + kStop, "the state must be exactly"},
      {P4 + secret_new() + kEmptyDict + str("tag") + str("x") + kSetItem + kBuild + kStop, "the state must be exactly"},
      {P4 + secret_new() + kNone + kEmptyDict + value + kSetItem + kTuple2 + kBuild + kStop, "with a tuple as its state"},
      {P4 + global("robot.utils.secret", "Secret") + str("x") + kTuple1 + kReduce + kStop,
       "REDUCE on robot.utils.secret.Secret"},
      {P4 + global("robot.utils.secret", "Secret") + str("x") + kTuple1 + "\x81" + kStop, "with arguments (str,)"},
      // paths: str parts only, REDUCE only, POSIX only
      {P4 + global("pathlib", "PosixPath") + str("/") + int1(1) + kTuple2 + kReduce + kStop,
       "REDUCE on pathlib.PosixPath with arguments (str, int) is not allowed (expected a tuple of str)"},
      {P4 + global("pathlib", "PosixPath") + bytes("/tmp") + kTuple1 + kReduce + kStop, "with arguments (bytes[4],)"},
      {P4 + global("pathlib", "PurePosixPath") + kMark + str("a") + str("b") + str("c") + kNone + kTuple + kReduce +
           kStop,
       "a tuple of more than 3 items"},
      {P4 + global("pathlib", "PosixPath") + global("pathlib", "PosixPath") + kEmptyTuple + kReduce + kTuple1 + kReduce +
           kStop,
       "with arguments (pathlib.PosixPath,)"},
      {P4 + global("pathlib", "PosixPath") + kEmptyTuple + "\x81" + kStop, "NEWOBJ on pathlib.PosixPath is not allowed"},
      {P4 + global("pathlib", "Path") + kEmptyTuple + kReduce + kStop, "class pathlib.Path is not allowed"},
      {P4 + global("pathlib", "WindowsPath") + kEmptyTuple + kReduce + kStop, "class pathlib.WindowsPath is not allowed"},
      {P4 + global("pathlib", "PosixPath.__new__") + kEmptyTuple + kReduce + kStop, "is not allowed"},
      // complex: two numbers
      {P4 + global("builtins", "complex") + str("1+2j") + kTuple1 + kReduce + kStop,
       "REDUCE on builtins.complex with arguments (str,) is not allowed (expected (float, float))"},
      {P4 + global("builtins", "complex") + str("1") + str("2") + kTuple2 + kReduce + kStop, "with arguments (str, str)"},
      {P4 + global("builtins", "complex") + int1(1) + int1(2) + int1(3) + kTuple3 + kReduce + kStop,
       "(int, int, int)"},
      {P4 + global("builtins", "complex") + kNone + int1(2) + kTuple2 + kReduce + kStop, "(None, int)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    expect_refused(c.pickle, c.what);
  }
  // the admitted shapes next to them
  expect_admitted(P4 + global("builtins", "complex") + int1(1) + int1(2) + kTuple2 + kReduce + kStop);
  expect_admitted(P4 + global("pathlib", "PurePosixPath") + kMark + str("a") + str("b") + str("c") + str("d") + kTuple +
                  kReduce + kStop);
  expect_admitted(P4 + kEmptyDict + global("pathlib", "PosixPath") + str("/") + kTuple1 + kReduce + int1(1) + kSetItem +
                  global("builtins", "complex") + int1(1) + int1(0) + kTuple2 + kReduce + int1(2) + kSetItem + kStop);
}

TEST(PickleDataOnly, RefusesWrongArgumentShapes) {
  struct Case {
    std::string module, name, args;
    const char* what;
  };
  const std::string ten(10, '\x01');
  const std::string tz = global("datetime", "timezone") + global("datetime", "timedelta") + int1(0) + int1(0) +
                         int1(0) + kTuple3 + kReduce + kTuple1 + kReduce;
  const Case cases[] = {
      {"robot.utils.dotdict", "DotDict", kEmptyDict + kTuple1, "with arguments (dict,)"},
      {"robot.utils.dotdict", "DotDict", str("a") + int1(1) + kTuple2, "with arguments (str, int)"},
      {"collections", "OrderedDict", kEmptyList + kTuple1, "with arguments (list,)"},
      {"collections", "OrderedDict", kEmptyTuple + kTuple1, "with arguments (tuple,)"},
      {"collections", "OrderedDict", kNone, "with arguments None"},
      {"datetime", "datetime", int1(1) + int1(1) + int1(1) + kTuple3, "with arguments (int, int, int)"},
      {"datetime", "datetime", bytes(ten.substr(0, 9)) + kTuple1, "(bytes[9],)"},
      {"datetime", "datetime", str(ten) + kTuple1, "(str,)"},
      {"datetime", "datetime", bytes(ten) + str("UTC") + kTuple2, "(bytes[10], str)"},
      {"datetime", "datetime", bytes(ten) + tz + kNone + kTuple3, "(bytes[10], datetime.timezone, None)"},
      {"datetime", "date", bytes("\x07\xe8\x01") + kTuple1, "(bytes[3],)"},
      {"datetime", "date", bytes("\x07\xe8\x01\x02") + tz + kTuple2, "(bytes[4], datetime.timezone)"},
      {"datetime", "time", bytes(ten) + kTuple1, "(bytes[10],)"},
      {"datetime", "timedelta", int1(1) + int1(1) + kTuple2, "(int, int)"},
      {"datetime", "timedelta", int1(1) + int1(1) + str("1") + kTuple3, "(int, int, str)"},
      {"datetime", "timezone", int1(1) + kTuple1, "(int,)"},
      {"datetime", "timezone", global("datetime", "timedelta") + int1(0) + int1(0) + int1(0) + kTuple3 + kReduce +
                                   int1(5) + kTuple2,
       "(datetime.timedelta, int)"},
      {"decimal", "Decimal", int1(1) + kTuple1, "(int,)"},
      {"decimal", "Decimal", kMark + int1(0) + kMark + int1(1) + kTuple + int1(0) + kTuple, "(int, tuple, int)"},
      {"decimal", "Decimal", str("1") + str("x") + kTuple2, "(str, str)"},
      {"builtins", "bytearray", str("ab") + str("latin-1") + kTuple2, "(str, str)"},
      {"builtins", "bytearray", int1(100) + kTuple1, "(int,)"},
      {"builtins", "bytearray", kMark + int1(1) + int1(2) + int1(3) + int1(4) + kTuple, "more than 3 items"},
  };
  for (const auto& c : cases) {
    std::string expected = "REDUCE on " + c.module + "." + c.name;
    SCOPED_TRACE(expected + " " + c.what);
    auto reason = check(P4 + global(c.module, c.name) + c.args + kReduce + kStop);
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->find(expected), std::string::npos) << *reason;
    EXPECT_NE(reason->find(c.what), std::string::npos) << *reason;
  }
  // REDUCE on things that are not classes
  expect_refused(P4 + str("os") + kEmptyTuple + kReduce + kStop, "REDUCE calls a str");
  expect_refused(P4 + kNone + kEmptyTuple + kReduce + kStop, "REDUCE calls a None");
  expect_refused(P4 + global("robot.utils.dotdict", "DotDict") + kEmptyTuple + kReduce + kEmptyTuple + kReduce + kStop,
                 "REDUCE calls a robot.utils.dotdict.DotDict");
}

TEST(PickleDataOnly, RefusesMutationOfTheWrongTarget) {
  // CPython calls the target's own append/extend/add when it is not exactly a list or set: a method call
  expect_refused(P4 + global("robot.utils.dotdict", "DotDict") + kEmptyTuple + kReduce + kMark + int1(1) + kAppends +
                     kStop,
                 "opcode APPENDS on a robot.utils.dotdict.DotDict");
  expect_refused(P4 + global("builtins", "bytearray") + kEmptyTuple + kReduce + int1(1) + kAppend + kStop,
                 "opcode APPEND on a bytearray");
  expect_refused(P4 + kEmptyList + kMark + int1(1) + kAddItems + kStop, "opcode ADDITEMS on a list");
  expect_refused(P4 + kEmptyList + str("k") + int1(1) + kSetItem + kStop, "opcode SETITEM on a list");
  expect_refused(P4 + global("datetime", "date") + int1(1) + kAppend + kStop, "opcode APPEND on a class");
  expect_refused(P4 + kEmptyTuple + kMark + int1(1) + kAppends + kStop, "on a tuple");
  // values that cannot be keys or set elements
  expect_refused(P4 + kEmptyDict + kEmptyList + int1(1) + kSetItem + kStop, "unhashable list as a dict key");
  expect_refused(P4 + kEmptySet + kMark + kEmptyDict + kAddItems + kStop, "unhashable dict as a set element");
  expect_refused(P4 + kMark + kEmptyList + kTuple1 + "\x91" + kStop, "unhashable tuple as a frozenset element");
  expect_refused(P4 + kEmptyDict + kMark + str("k") + kSetItems + kStop, "odd number");
  // a class placed inside data
  expect_refused(P4 + kEmptyList + global("datetime", "date") + kAppend + kStop, "class datetime.date used as a value");
  // a target below the MARK of its items
  expect_refused(P4 + kEmptyList + kMark + kMark + int1(1) + kAppends + kStop, "stack underflow");
  expect_refused(P4 + kMark + int1(1) + kAppends + kStop, "stack underflow");
  expect_refused(P4 + int1(1) + kAppends + kStop, "without a MARK");
}

TEST(PickleDataOnly, RefusesCyclesAndLateMutation) {
  // a list that contains itself
  expect_refused(P4 + kEmptyList + kMemo + binget(0) + kAppend + kStop, "cycles are not plain data");
  // a dict nested in a list, then changed through the memo
  expect_refused(P4 + kEmptyList + kEmptyDict + kMemo + kAppend + binget(0) + str("k") + int1(1) + kSetItem + kStop,
                 "changed after it was placed");
}

// ---------------------------------------------------------------------------------------------------
// Framing of the stream: PROTO, FRAME, STOP, lengths.

TEST(PickleDataOnly, RefusesBadProtocolHeaders) {
  expect_refused("", "empty pickle");
  expect_refused("N.", "not PROTO");
  for (unsigned p : {0u, 1u, 2u, 3u, 6u, 255u}) expect_refused("\x80" + le(p, 1) + "N.", "protocol " + std::to_string(p));
  EXPECT_EQ(expect_refused(P4 + kNone + P4 + kStop, "second PROTO"), 3u);
  expect_refused(P5 + P4 + kNone + kStop, "second PROTO");
  expect_refused("\x80", "truncated");
}

TEST(PickleDataOnly, RefusesFramesThatDisagreeWithTheStream) {
  const std::string body = str("abc") + kTuple1;  // 6 bytes
  expect_admitted(P4 + frame(6) + body + kStop);
  expect_admitted(P4 + frame(7) + body + kStop);
  // the frame ends inside SHORT_BINUNICODE
  expect_refused(P4 + frame(3) + body + kStop, "straddles the end of its frame");
  EXPECT_EQ(expect_refused(P4 + frame(3) + str("abc") + kStop, "straddles"), 11u);
  // longer than what remains
  expect_refused(P4 + frame(100) + body + kStop, "FRAME of 100 bytes, only 7 remain");
  expect_refused(P4 + frame(std::uint64_t{1} << 63) + kNone + kStop, "FRAME of 9223372036854775808 bytes");
  // a frame inside a frame
  expect_refused(P4 + frame(11) + frame(1) + kNone + kStop, "FRAME inside an unfinished frame");
  // the frame ends inside a text PUT
  expect_refused(P4 + frame(5) + str("a") + "p0\n" + kStop, "no end of line");
  // truncated length fields
  expect_refused(P4 + "\x95\x01\x00", "truncated");
}

TEST(PickleDataOnly, RefusesEverythingAroundStop) {
  expect_refused(P4 + kNone + kStop + "x", "1 bytes after STOP");
  expect_refused(P4 + kNone + kStop + kStop, "bytes after STOP");
  expect_refused(P4 + kNone + kNone + kStop, "STOP with 2 values on the stack");
  expect_refused(P4 + kStop, "STOP with 0 values");
  expect_refused(P4 + kNone + kMark + kStop, "open MARK");
  expect_refused(P4 + kNone, "ends without STOP");
  expect_refused(P4, "ends without STOP");
}

TEST(PickleDataOnly, RefusesHugeAndBrokenLengths) {
  const std::uint64_t huge = std::uint64_t{1} << 63;
  expect_refused(P4 + "\x8d" + le(huge, 8) + "abc" + kStop, "BINUNICODE8 declares 9223372036854775808 bytes");
  expect_refused(P4 + "\x8d" + le(~std::uint64_t{0}, 8) + kStop, "BINUNICODE8 declares");
  expect_refused(P4 + "\x8e" + le(huge, 8) + kStop, "BINBYTES8 declares");
  expect_refused(P5 + "\x96" + le(huge, 8) + kStop, "BYTEARRAY8 declares");
  expect_refused(P4 + "X" + le(0xffffffff, 4) + kStop, "BINUNICODE declares 4294967295 bytes");
  expect_refused(P4 + "B" + le(0xffffffff, 4) + kStop, "BINBYTES declares");
  expect_refused(P4 + "\x8c\x05" + "ab", "SHORT_BINUNICODE declares 5 bytes, only 2 remain");
  expect_refused(P4 + "\x8b" + le(0xffffffff, 4) + kStop, "LONG4 with a negative length");
  expect_refused(P4 + "\x8b" + le(5000, 4) + std::string(5000, '\1') + kStop, "integer of 5000 bytes");
  expect_refused(P4 + "J\x01\x02", "truncated");
  expect_refused(P4 + str("\xff") + kStop, "not valid UTF-8");
  expect_refused(P4 + str("\xc0\xaf") + kStop, "not valid UTF-8");  // overlong "/"
  expect_refused(P4 + str("\xf4\x90\x80\x80") + kStop, "not valid UTF-8");
  expect_refused(P4 + str("\xe2\x82") + kStop, "not valid UTF-8");
}

// ---------------------------------------------------------------------------------------------------
// Bounds: generous enough for real data, and each one enforced.

std::string list_of_ints(std::size_t n) {
  std::string p = P4 + kEmptyList + kMemo;
  for (std::size_t i = 0; i < n; i += 1000) {
    p += kMark;
    for (std::size_t j = i; j < std::min(n, i + 1000); ++j) p += "M" + le(j & 0xffff, 2);
    p += kAppends;
  }
  return p + kStop;
}

std::string nested_lists(std::size_t depth) {
  std::string p = P4;
  for (std::size_t i = 0; i < depth; ++i) p += kEmptyList;
  for (std::size_t i = 1; i < depth; ++i) p += kAppend;
  return p + kStop;
}

TEST(PickleBounds, LargePlainDataIsAdmitted) {
  expect_admitted(list_of_ints(100000));
  expect_admitted(P5 + "\x8e" + le(1 << 20, 8) + std::string(1 << 20, 'y') + kStop);
}

TEST(PickleBounds, NestingAtTheLimitIsAdmittedAndOneDeeperRefused) {
  expect_admitted(nested_lists(128));
  expect_refused(nested_lists(129), "nesting deeper than 128 levels");
  // tuples too
  std::string p = P4 + kEmptyTuple;
  for (int i = 1; i < 128; ++i) p += kTuple1;
  expect_admitted(p + kStop);
  expect_refused(p + kTuple1 + kStop, "nesting deeper than 128 levels");
  // open MARKs
  expect_refused(P4 + std::string(129, '(') + kStop, "more than 128 open MARKs");
}

TEST(PickleBounds, StackAtTheLimitIsAdmittedAndOneMoreRefused) {
  PickleLimits limits;
  std::string items;
  for (std::size_t i = 0; i < limits.max_stack; ++i) items += int1(1);
  expect_admitted(P4 + kMark + items + kTuple + kStop);
  expect_refused(P4 + kMark + items + int1(1) + kTuple + kStop, "more than 1048576 values on the stack");
}

TEST(PickleBounds, SharedReferencesCannotExpandWithoutBound) {
  // "billion laughs": a list of 1000 ints, a list of 1000 references to it, a list of 1000 of those
  std::string p = P4 + kEmptyList + kMemo + kMark;
  for (int i = 0; i < 1000; ++i) p += int1(1);
  p += kAppends + kEmptyList + kMemo + kMark;
  for (int i = 0; i < 1000; ++i) p += binget(0);
  std::string two_levels = p + kAppends;
  expect_admitted(P4 + two_levels.substr(2) + kTuple2 + kStop);  // about a million elements: fine
  two_levels += kEmptyList + kMemo + kMark;
  for (int i = 0; i < 1000; ++i) two_levels += binget(1);
  expect_refused(two_levels + kAppends + kStop, "when expanded");
}

TEST(PickleBounds, EachLimitIsEnforcedJustAboveIt) {
  PickleLimits limits;
  limits.max_bytes = 100;
  std::string at = P4 + "X" + le(100 - 8, 4) + std::string(100 - 8, 'a') + kStop;  // 2 + 5 + 92 + 1
  ASSERT_EQ(at.size(), 100u);
  expect_admitted(at, limits);
  expect_refused(P4 + "X" + le(93, 4) + std::string(93, 'a') + kStop, "pickle of 101 bytes is larger than the limit of 100",
                 limits);

  limits = {};
  limits.max_opcodes = 5;  // PROTO, 3 x NONE, TUPLE3 ... STOP is the 6th
  expect_admitted(P4 + kNone + kNone + kTuple2 + kStop, limits);
  expect_refused(P4 + kNone + kNone + kNone + kTuple3 + kStop, "more than 5 opcodes", limits);

  limits = {};
  limits.max_containers = 3;
  expect_admitted(P4 + kEmptyList + kEmptyDict + kEmptySet + kTuple3 + kStop, limits);
  expect_refused(P4 + kEmptyList + kEmptyDict + kEmptySet + kEmptyList + kStop, "more than 3 lists", limits);

  limits = {};
  limits.max_expanded = 10;
  expect_admitted(P4 + str("abcdefgh") + kTuple1 + kStop, limits);  // 1 + (1 + 8)
  expect_refused(P4 + str("abcdefghi") + kTuple1 + kStop, "larger than 10 elements", limits);
}

// ---------------------------------------------------------------------------------------------------
// The JSON side: recognizing {"__pickled__": ...} exactly, modes, paths and messages.

std::string pickled_json(std::string_view pickle) { return R"({"__pickled__":")" + to_hex(pickle) + R"("})"; }

const std::string kPlain = P4 + kEmptyList + kMemo + int1(1) + kAppend + kStop;
const std::string kEvil = hex_to_bytes(kPythonMade[3].hex);

// The tree inspector and the text inspector (what the gateway uses) on the same value: they must agree
// on every refusal, its path, reason and offset.
std::optional<rjg::pickle::PickleRefusal> inspect_both(const json::value& v, PickleMode mode, std::string_view path,
                                               const PickleLimits& limits = {}) {
  auto tree = inspect_pickles(v, mode, path, limits);
  auto text = rjg::pickle::inspect_pickles_text(json::serialize(v), mode, path, limits);
  EXPECT_EQ(tree.has_value(), text.has_value()) << json::serialize(v).substr(0, 200);
  if (tree && text) {
    EXPECT_EQ(tree->path, text->path);
    EXPECT_EQ(tree->reason, text->reason);
    EXPECT_EQ(tree->offset, text->offset);
    EXPECT_EQ(tree->mode, text->mode);
  }
  return text;
}


TEST(PickleJson, ValuesWithoutPicklesPassInEveryMode) {
  auto v = json::parse(R"({"args":[1,"x",null,true,[{"a":{"b":[]}}]],"kwargs":{"__pickled":"8004"}})");
  for (auto mode : {PickleMode::allow, PickleMode::data_only, PickleMode::deny})
    EXPECT_FALSE(inspect_both(v, mode, "").has_value());
}

TEST(PickleJson, FindsPickledValuesAnywhereAndNamesTheirPath) {
  auto v = json::parse(R"({"args":[1,)" + pickled_json(kPlain) + "," + pickled_json(kEvil) + R"(]})");
  auto r = inspect_both(v.at("args"), PickleMode::data_only, "args");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "args[2]");
  EXPECT_EQ(r->reason, "class posix.system is not allowed");
  EXPECT_EQ(r->offset, 28u);

  v = json::parse(R"({"data":{"x":[)" + pickled_json(kEvil) + "]}}");
  r = inspect_both(v, PickleMode::data_only, "kwargs");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "kwargs.data.x[0]");

  v = json::parse(R"({"keywords":[{},{},{},{"args":[{"name":"a"},{"name":"b","default":)" + pickled_json(kEvil) +
                  "}]}]}");
  r = inspect_both(v, PickleMode::data_only, "definition");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "definition.keywords[3].args[1].default");

  v = json::parse(R"({"my key":{"0":)" + pickled_json(kEvil) + "}}");
  r = inspect_both(v, PickleMode::data_only, "");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, R"(["my key"]["0"])");

  r = inspect_both(json::parse(pickled_json(kEvil)), PickleMode::data_only, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "result");
}

TEST(PickleJson, ModesApplyToWellFormedValues) {
  auto plain = json::parse(pickled_json(kPlain));
  auto evil = json::parse(pickled_json(kEvil));
  EXPECT_FALSE(inspect_both(plain, PickleMode::data_only, "result").has_value());
  EXPECT_TRUE(inspect_both(evil, PickleMode::data_only, "result").has_value());
  EXPECT_FALSE(inspect_both(plain, PickleMode::allow, "result").has_value());
  EXPECT_FALSE(inspect_both(evil, PickleMode::allow, "result").has_value());
  auto denied = inspect_both(plain, PickleMode::deny, "result");
  ASSERT_TRUE(denied.has_value());
  EXPECT_FALSE(denied->offset.has_value());
  EXPECT_EQ(denied->mode, PickleMode::deny);
}

TEST(PickleJson, MalformedPickledObjectsAreRefusedUnlessAllowed) {
  const std::string hex = to_hex(kPlain);
  std::string upper = hex;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::pair<std::string, const char*> cases[] = {
      {R"({"__pickled__":")" + hex + R"(","x":1})", "other members (\"x\")"},
      {R"({"a":1,"__pickled__":")" + hex + R"("})", "other members (\"a\")"},
      {R"({"__pickled__":")" + upper + R"("})", "is not lowercase hex"},
      {R"({"__pickled__":")" + hex + R"(0"})", "odd number of hex digits"},
      {R"({"__pickled__":")" + hex.substr(0, 4) + " " + hex.substr(5) + R"("})", "is not lowercase hex"},
      {R"({"__pickled__":")" + hex.substr(0, 4) + "zz" + hex.substr(6) + R"("})", "is not lowercase hex"},
      {R"({"__pickled__":12})", "is not a string"},
      {R"({"__pickled__":null})", "is not a string"},
      {R"({"__pickled__":[")" + hex + R"("]})", "is not a string"},
      {R"({"__pickled__":{"__pickled__":")" + hex + R"("}})", "is not a string"},
      {R"({"__pickled__":""})", "empty pickle"},
  };
  for (const auto& [text, what] : cases) {
    SCOPED_TRACE(text.substr(0, 80));
    auto v = json::parse("[0," + text + "]");
    auto r = inspect_both(v, PickleMode::data_only, "args");
    ASSERT_TRUE(r.has_value());
    EXPECT_NE(r->reason.find(what), std::string::npos) << r->reason;
    EXPECT_EQ(r->path, "args[1]");
    EXPECT_TRUE(inspect_both(v, PickleMode::deny, "args").has_value());
    EXPECT_FALSE(inspect_both(v, PickleMode::allow, "args").has_value());
  }
}

// The key as Python's json reads it: escapes decoded, and of duplicate keys the last one counts (as in
// Boost.JSON), so the value checked is the value a Python peer would unpickle.
TEST(PickleJson, KeysAreRecognizedAsAPythonPeerReadsThem) {
  auto escaped = json::parse(R"({"\u005f_pickled__":")" + to_hex(kEvil) + R"("})");
  auto r = inspect_both(escaped, PickleMode::data_only, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "class posix.system is not allowed");

  auto duplicate = json::parse(R"({"__pickled__":")" + to_hex(kPlain) + R"(","__pickled__":")" + to_hex(kEvil) + R"("})");
  r = inspect_both(duplicate, PickleMode::data_only, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "class posix.system is not allowed");
}

TEST(PickleJson, DescribeSaysWhatWhereAndWhichKeyToChange) {
  auto r = inspect_both(json::parse(R"({"data":)" + pickled_json(kEvil) + "}"), PickleMode::data_only, "kwargs");
  ASSERT_TRUE(r.has_value());
  auto text = describe(*r, "Echo");
  EXPECT_NE(text.find("kwargs.data"), std::string::npos) << text;
  EXPECT_NE(text.find("class posix.system is not allowed"), std::string::npos) << text;
  EXPECT_NE(text.find("byte 28"), std::string::npos) << text;
  EXPECT_NE(text.find("set pickle = \"allow\" for library 'Echo'"), std::string::npos) << text;

  r = inspect_both(json::parse(pickled_json(kPlain)), PickleMode::deny, "result");
  ASSERT_TRUE(r.has_value());
  text = describe(*r, "Echo");
  EXPECT_NE(text.find("result"), std::string::npos) << text;
  EXPECT_NE(text.find("pickle = \"data-only\""), std::string::npos) << text;
  EXPECT_EQ(text.find("byte"), std::string::npos) << text;
}

TEST(PickleJson, OversizedHexIsRefusedBeforeDecoding) {
  PickleLimits limits;
  limits.max_bytes = 8;
  auto v = json::parse(pickled_json(P4 + str("abcdefgh") + kStop));
  auto r = inspect_both(v, PickleMode::data_only, "result", limits);
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(r->reason.find("larger than the limit of 8"), std::string::npos) << r->reason;
}

}  // namespace

namespace rjg_pickle_text {

using rjg::pickle::inspect_pickles_text;

// What only the text inspector can do: values a tree cannot hold travel past it, and keys are read as
// written (escapes, duplicates) without a tree.
TEST(PickleText, WalksValuesNoTreeCanHold) {
  const std::string evil = R"({"__pickled__":")" + to_hex(kEvil) + R"("})";
  const std::string around = R"({"n":[NaN,Infinity,-Infinity,1e400,1234567890123456789012345678901234567890,-0.0],"v":)";
  auto r = inspect_pickles_text(around + evil + "}", PickleMode::data_only, "kwargs");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "kwargs.v");
  EXPECT_EQ(r->reason, "class posix.system is not allowed");
  EXPECT_FALSE(inspect_pickles_text(around + pickled_json(kPlain) + "}", PickleMode::data_only, "kwargs").has_value());
  EXPECT_FALSE(inspect_pickles_text("[NaN,-Infinity]", PickleMode::deny, "args").has_value());
}

TEST(PickleText, KeysAsAPythonPeerReadsThem) {
  // An escaped key is the same key; so is one with every character escaped.
  auto r = inspect_pickles_text(R"({"\u005f_pickled__":")" + to_hex(kEvil) + R"("})", PickleMode::data_only, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "class posix.system is not allowed");
  std::string all_escaped = "\"";
  for (char c : std::string_view("__pickled__")) all_escaped += fmt::format("\\u{:04x}", c);
  r = inspect_pickles_text("[{" + all_escaped + R"(":")" + to_hex(kEvil) + R"("}])", PickleMode::data_only, "args");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "args[0]");
  // Of two, the last counts (as in Python): a benign last one is admitted, an evil last one refused.
  const std::string plain_hex = to_hex(kPlain), evil_hex = to_hex(kEvil);
  EXPECT_FALSE(inspect_pickles_text(R"({"__pickled__":")" + evil_hex + R"(","__pickled__":")" + plain_hex + R"("})",
                                    PickleMode::data_only, "result"));
  EXPECT_TRUE(inspect_pickles_text(R"({"__pickled__":")" + plain_hex + R"(","__pickled__":")" + evil_hex + R"("})",
                                   PickleMode::data_only, "result"));
  // A hex string with escapes is read decoded.
  std::string escaped_hex = plain_hex;
  escaped_hex.replace(0, 1, "\\u0038");  // '8'
  EXPECT_FALSE(inspect_pickles_text(R"({"__pickled__":")" + escaped_hex + R"("})", PickleMode::data_only, "r"));
  // Many other members are summarized.
  std::string many = R"({"__pickled__":")" + plain_hex + "\"";
  for (int i = 0; i < 20; ++i) many += fmt::format(R"(,"k{}":1)", i);
  r = inspect_pickles_text(many + "}", PickleMode::data_only, "r");
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(r->reason.find("and 12 more"), std::string::npos) << r->reason;
}

TEST(PickleText, PathsNameEveryStep) {
  const std::string evil = pickled_json(kEvil);
  auto r = inspect_pickles_text(R"({"a b":[0,{"x\"y":[[1,)" + evil + "]]}]}", PickleMode::data_only, "kwargs");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, R"(kwargs["a b"][1]["x\"y"][0][1])");
  r = inspect_pickles_text(R"({"params":{"message":)" + evil + "}}", PickleMode::data_only, "");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "params.message");
}

TEST(PickleText, InvalidJsonIsRefused) {
  auto r = inspect_pickles_text("[1,", PickleMode::data_only, "args");
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(r->reason.find("not valid JSON"), std::string::npos) << r->reason;
  EXPECT_FALSE(inspect_pickles_text("[1,", PickleMode::allow, "args").has_value());
}

// The walk costs the same for keys that flood Boost.JSON's hash table as for ordinary keys, and twice
// the keys cost twice the work (counted by protocol::operations(), not timed).
TEST(PickleText, WorkIsLinearUnderCollidingKeys) {
  std::vector<double> per_byte;
  for (unsigned stages : {15u, 16u}) {  // 2^15 and 2^16 keys, as in json_text_test's Flood
    const std::string flood = "[" + rjg::test::object_of_keys(rjg::test::colliding_keys(stages)) + "," + pickled_json(kPlain) + "]";
    const std::string plain = "[" + rjg::test::object_of_keys(rjg::test::ordinary_keys(stages)) + "," + pickled_json(kPlain) + "]";
    ASSERT_EQ(flood.size(), plain.size());
    auto before = rjg::protocol::operations();
    EXPECT_FALSE(inspect_pickles_text(flood, PickleMode::data_only, "args").has_value());
    const auto flood_work = rjg::protocol::operations() - before;
    before = rjg::protocol::operations();
    EXPECT_FALSE(inspect_pickles_text(plain, PickleMode::data_only, "args").has_value());
    EXPECT_EQ(rjg::protocol::operations() - before, flood_work);
    per_byte.push_back(static_cast<double>(flood_work) / static_cast<double>(flood.size()));
  }
  EXPECT_NEAR(per_byte[1], per_byte[0], per_byte[0] / 100);
}

}  // namespace rjg_pickle_text
