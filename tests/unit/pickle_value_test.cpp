// The pickle value codec: every real pickle of the benign corpus decodes to the value CPython made it
// from (the expectations below are literals, written from what CPython's pickle.load printed), every
// kind of value survives encode -> decode, the encoder writes what CPython's pickler writes, and the
// real python3 reads what it writes. Hand-made pickles (built opcode by opcode) cover Python's rules
// for repeated keys and what the decoder refuses.
#include "common/pickle/pickle_value.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::pickle {
// GoogleTest prints values in failure messages as Python would.
void PrintTo(const PyValue& v, std::ostream* os) { *os << py_repr(v); }
}  // namespace rjg::pickle

namespace {

using namespace rjg::pickle;
using rjg::pickle::PickleLimits;

// ---------------------------------------------------------------------------------------------------
// Helpers.

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

PyValue datetime_of(int y, int mo, int d, int h = 0, int mi = 0, int s = 0, int us = 0,
                    std::optional<int> offset = std::nullopt, std::string name = "", int fold = 0) {
  PyDateTime dt;
  dt.year = y, dt.month = mo, dt.day = d, dt.hour = h, dt.minute = mi, dt.second = s, dt.microsecond = us;
  dt.utc_offset_seconds = offset;
  dt.tz_name = std::move(name);
  dt.fold = fold;
  return dt;
}

PyValue time_of(int h, int mi, int s = 0, int us = 0, std::optional<int> offset = std::nullopt, std::string name = "",
                int fold = 0) {
  PyTime t;
  t.hour = h, t.minute = mi, t.second = s, t.microsecond = us;
  t.utc_offset_seconds = offset;
  t.tz_name = std::move(name);
  t.fold = fold;
  return t;
}

PyValue dot_dict(std::vector<std::pair<PyValue, PyValue>> items) {
  return PyDict{std::move(items), PyDict::Kind::dot_dict};
}

// The decoded value, or a test failure naming the reason.
PyValue decoded(std::string_view pickle, const PickleLimits& limits = {}) {
  auto r = decode_pickle(pickle, limits);
  if (const auto* why = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << "refused: " << *why << "\npickle: " << to_hex(pickle).substr(0, 400);
    return PyValue();
  }
  return std::get<PyValue>(std::move(r));
}

// The refusal, or a test failure when the pickle decodes.
std::string refusal(std::string_view pickle, const PickleLimits& limits = {}) {
  auto r = decode_pickle(pickle, limits);
  if (const auto* v = std::get_if<PyValue>(&r)) {
    ADD_FAILURE() << "decoded to " << py_repr(*v) << "\npickle: " << to_hex(pickle).substr(0, 400);
    return "";
  }
  return std::get<std::string>(r);
}

void expect_round_trip(const PyValue& v) {
  std::string bytes;
  try {
    bytes = encode_pickle(v);
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << "encode refused " << py_repr(v).substr(0, 300) << ": " << e.what();
    return;
  }
  EXPECT_EQ(decoded(bytes), v) << "pickle: " << to_hex(bytes).substr(0, 400);
  EXPECT_EQ(encode_pickle_hex(v), to_hex(bytes));
}

std::string big_str(std::size_t n, char c) { return std::string(n, c); }

PyList ints(std::int64_t first, std::int64_t last) {
  PyList l;
  for (std::int64_t i = first; i <= last; ++i) l.items.emplace_back(i);
  return l;
}

// Builders for hand-made pickles, opcode by opcode.
std::string le(std::uint64_t v, int width) {
  std::string out;
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
const std::string P4 = "\x80\x04";
const std::string kMark = "(", kStop = ".", kMemo = "\x94", kStackGlobal = "\x93", kReduce = "R";
const std::string kEmptyTuple = ")", kTuple1 = "\x85", kTuple2 = "\x86", kTuple3 = "\x87";
const std::string kEmptyList = "]", kEmptyDict = "}", kEmptySet = "\x8f", kAppend = "a", kAppends = "e";
const std::string kSetItem = "s", kSetItems = "u", kAddItems = "\x90", kFrozenSet = "\x91", kNone = "N";
const std::string kTrue = "\x88";
std::string str(std::string_view s) { return "\x8c" + le(s.size(), 1) + std::string(s); }
std::string bytes(std::string_view s) { return "C" + le(s.size(), 1) + std::string(s); }
std::string int1(unsigned v) { return "K" + le(v, 1); }
std::string int4(std::int32_t v) { return "J" + le(static_cast<std::uint32_t>(v), 4); }
std::string long1(std::string_view le_bytes) { return "\x8a" + le(le_bytes.size(), 1) + std::string(le_bytes); }
std::string float8(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, 8);
  std::string out = "G";
  for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
  return out;
}
std::string binget(unsigned i) { return "h" + le(i, 1); }
std::string global(std::string_view module, std::string_view name) { return str(module) + str(name) + kStackGlobal; }
std::string decimal(std::string_view text) { return global("decimal", "Decimal") + str(text) + kTuple1 + kReduce; }
std::string timedelta(const std::string& args3) { return global("datetime", "timedelta") + args3 + kTuple3 + kReduce; }

// ---------------------------------------------------------------------------------------------------
// The benign corpus: real pickles of Robot values by CPython 3.8, 3.12 and 3.13, protocols 4 and 5.

// The 29 values of tests/data/pickles/benign (see its README), as CPython's pickle.load gives them.
std::map<std::string, PyValue> corpus_values() {
  std::map<std::string, PyValue> v;
  v["Decimal"] = PyDecimal{"1.10"};
  v["Decimal_nan"] = PyDecimal{"NaN"};
  v["DotDict"] = dot_dict({{"a", 1},
                           {"b", dot_dict({{"c", PyList{{1, 2}}}, {"d", dot_dict({{"x", PyTuple{{1, 2}}}})}})}});
  PyDict big{{}, PyDict::Kind::dot_dict};
  for (int i = 0; i < 1500; ++i) big.items.emplace_back(std::to_string(i), i);
  v["DotDict_big"] = big;
  v["DotDict_empty"] = dot_dict({});
  v["OrderedDict"] = PyDict{{{"a", 1}}, PyDict::Kind::ordered_dict};
  v["big_bytes"] = PyBytes{big_str(100000, 'y')};
  v["big_str"] = big_str(70000, 'x');
  v["bytearray"] = PyBytes{"ab", true};
  v["bytes"] = PyBytes{std::string("\x00\x01", 2)};
  v["date"] = PyDate{2024, 1, 2};
  v["datetime"] = datetime_of(2024, 1, 2, 3, 4, 5, 6);
  v["datetime_tz"] = datetime_of(2024, 1, 2, 0, 0, 0, 0, 0);
  v["datetime_tzname"] = datetime_of(2024, 1, 2, 0, 0, 0, 0, 7200, "EET");
  v["dict_keys"] = PyDict{{{PyTuple{{1, "a"}}, 1},
                           {PySet{{2}, true}, 2},
                           {PyDate{2020, 1, 1}, 3},
                           {PyNone{}, 4},
                           {1.5, 5}}};
  v["dict_str_int"] = PyDict{{{"a", 1}, {"b", 2}}};
  v["empty_dict"] = PyDict{};
  v["empty_list"] = PyList{};
  v["frozenset"] = PySet{{1}, true};
  v["interleaved"] = PyList{{1, PyBytes{big_str(100000, 'y')}, 2}};
  v["list_2001"] = ints(0, 2000);
  v["list_int"] = PyList{{1, 2, 300, -5, std::int64_t{1099511627776}}};
  v["mixed"] = PyList{{1.5, PyBigInt{"1180591620717411303424"}, -1, PyNone{}, true, false, "\u00e9\u20ac\U0001f600"}};
  v["set"] = PySet{{"x", 1, 2}};
  v["shared"] = PyList{{PyList{{1}}, PyList{{1}}, PyList{{1}}}};  // one list three times: three copies
  v["time"] = time_of(1, 2, 3);
  v["timedelta"] = PyTimedelta{1, 2, 0};
  v["tuple"] = PyTuple{{1, "a"}};
  v["tuple5"] = PyTuple{{1, 2, 3, 4, 5}};
  return v;
}

// A set's items in a fixed order, for comparing sets whatever order they came in.
PyValue sorted_set(PyValue v) {
  if (auto* set = std::get_if<PySet>(&v.v))
    std::sort(set->items.begin(), set->items.end(),
              [](const PyValue& a, const PyValue& b) { return py_repr(a) < py_repr(b); });
  return v;
}

struct CorpusFile {
  std::string value;  // "DotDict_big"
  int protocol;
  std::string python;  // "312"
  std::string bytes;
};

std::vector<CorpusFile> corpus() {
  std::vector<CorpusFile> files;
  std::filesystem::path dir(RJG_PICKLES_DIR);
  if (!std::filesystem::is_directory(dir)) {
    ADD_FAILURE() << "fixture missing: benign pickles folder " << dir;
    return files;
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pkl") continue;
    const std::string stem = entry.path().stem().string();  // VALUE_pN_pyXY
    const auto p = stem.rfind("_p", stem.rfind("_py") - 1);
    const auto py = stem.rfind("_py");
    files.push_back({stem.substr(0, p), std::stoi(stem.substr(p + 2, py - p - 2)), stem.substr(py + 3),
                     read_file(entry.path())});
  }
  return files;
}

TEST(PickleValueCorpus, EveryBenignPickleDecodesToTheValueCPythonPickled) {
  const auto expected = corpus_values();
  ASSERT_EQ(expected.size(), 29u);
  const auto files = corpus();
  ASSERT_GE(files.size(), 174u);
  std::map<std::string, int> seen;
  for (const auto& f : files) {
    SCOPED_TRACE(f.value + " protocol " + std::to_string(f.protocol) + " python " + f.python);
    auto it = expected.find(f.value);
    ASSERT_NE(it, expected.end()) << "no expectation for corpus value " << f.value;
    if (f.value == "set")  // in the sender's hash table order: 'x' first for 3.8, last for 3.12 and 3.13
      EXPECT_EQ(sorted_set(decoded(f.bytes)), sorted_set(it->second));
    else
      EXPECT_EQ(decoded(f.bytes), it->second);
    ++seen[f.value];
  }
  for (const auto& [name, value] : expected) EXPECT_EQ(seen[name], 6) << name << ": 3 Pythons x 2 protocols";
}

// What CPython's repr() printed for some of them (the rest follow from the values above).
TEST(PickleValueCorpus, ReprIsWhatCPythonPrinted) {
  const std::map<std::string, std::string> printed{
      {"Decimal", "Decimal('1.10')"},
      {"Decimal_nan", "Decimal('NaN')"},
      {"OrderedDict", "OrderedDict([('a', 1)])"},
      {"bytearray", "bytearray(b'ab')"},
      {"bytes", "b'\\x00\\x01'"},
      {"date", "datetime.date(2024, 1, 2)"},
      {"datetime", "datetime.datetime(2024, 1, 2, 3, 4, 5, 6)"},
      {"datetime_tz", "datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone.utc)"},
      {"datetime_tzname",
       "datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(seconds=7200), 'EET'))"},
      {"dict_keys", "{(1, 'a'): 1, frozenset({2}): 2, datetime.date(2020, 1, 1): 3, None: 4, 1.5: 5}"},
      {"dict_str_int", "{'a': 1, 'b': 2}"},
      {"frozenset", "frozenset({1})"},
      {"list_int", "[1, 2, 300, -5, 1099511627776]"},
      {"mixed", "[1.5, 1180591620717411303424, -1, None, True, False, '\u00e9\u20ac\U0001f600']"},
      {"shared", "[[1], [1], [1]]"},
      {"time", "datetime.time(1, 2, 3)"},
      {"timedelta", "datetime.timedelta(days=1, seconds=2)"},
      {"tuple", "(1, 'a')"},
      {"tuple5", "(1, 2, 3, 4, 5)"},
  };
  int checked = 0;
  for (const auto& f : corpus()) {
    auto it = printed.find(f.value);
    if (it == printed.end()) continue;
    ++checked;
    EXPECT_EQ(py_repr(decoded(f.bytes)), it->second) << f.value << " protocol " << f.protocol << " python " << f.python;
  }
  EXPECT_EQ(checked, 19 * 6);
}

// Re-encoding a decoded corpus value gives CPython's own protocol-4 bytes, except where CPython wrote
// a shared object once (the tree has copies) or a set's order came from its hash table.
TEST(PickleValueCorpus, EncoderWritesWhatCPythonWrote) {
  int same = 0;
  for (const auto& f : corpus()) {
    if (f.protocol != 4 || f.value == "shared") continue;
    SCOPED_TRACE(f.value + " python " + f.python);
    const PyValue v = decoded(f.bytes);
    const std::string mine = encode_pickle(v);
    EXPECT_EQ(decoded(mine), v);
    EXPECT_EQ(to_hex(mine), to_hex(f.bytes));
    same += mine == f.bytes;
  }
  EXPECT_GE(same, 80);
}

// Every proper prefix of a real pickle is refused, never read past its end.
TEST(PickleValueCorpus, EveryTruncationIsRefused) {
  for (const auto& f : corpus()) {
    if (f.bytes.size() > 4096) continue;
    for (std::size_t n = 0; n < f.bytes.size(); ++n)
      EXPECT_FALSE(refusal(std::string_view(f.bytes).substr(0, n)).empty()) << f.value << " cut at " << n;
  }
}

// The checker and the decoder run one machine over one reader: a real pickle with any one byte changed
// is refused by decode_pickle with the checker's own reason and offset, or decoded, or refused for what
// Python would not build, but never with an "internal error" (the two reading the stream differently).
TEST(PickleValueCorpus, TheDecoderReadsExactlyWhatTheCheckerAdmits) {
  PickleLimits limits;
  limits.max_expanded = 1 << 16;  // a changed memo index may share one list many times
  std::size_t admitted = 0, refused = 0;
  for (const auto& f : corpus()) {
    if (f.bytes.size() > 512) continue;
    for (std::size_t i = 0; i < f.bytes.size(); ++i) {
      for (unsigned flip : {0x01u, 0x80u, 0xffu}) {
        std::string changed = f.bytes;
        changed[i] = static_cast<char>(static_cast<unsigned char>(changed[i]) ^ flip);
        std::size_t offset = 0;
        const auto why = check_pickle_data_only(changed, &offset, limits);
        const auto r = decode_pickle(changed, limits);
        const auto* error = std::get_if<std::string>(&r);
        if (why) {
          ++refused;
          ASSERT_TRUE(error) << f.value << " byte " << i << " ^ " << flip;
          EXPECT_EQ(*error, "byte " + std::to_string(offset) + ": " + *why) << f.value << " byte " << i;
          continue;
        }
        ++admitted;
        if (error) {
          EXPECT_EQ(error->find("internal error"), std::string::npos) << *error << "\n" << to_hex(changed);
        }
      }
    }
  }
  EXPECT_GT(admitted, 100u);
  EXPECT_GT(refused, 100u);
}

// ---------------------------------------------------------------------------------------------------
// Round trips: encode -> decode gives the value back, for every kind.

TEST(PickleValueRoundTrip, Scalars) {
  for (const PyValue& v : std::vector<PyValue>{PyNone{}, true, false}) expect_round_trip(v);
  for (std::int64_t i : std::vector<std::int64_t>{0, 1, 255, 256, 65535, 65536, -1, -128, -129, -255, -256, -257,
                                                  2147483647, 2147483648, -2147483648, -2147483649, 4294967296,
                                                  std::int64_t{1} << 40, -(std::int64_t{1} << 39),
                                                  std::numeric_limits<std::int64_t>::max(),
                                                  std::numeric_limits<std::int64_t>::min()})
    expect_round_trip(i);
}

TEST(PickleValueRoundTrip, BigIntegers) {
  const std::string ten_to_700 = "1" + std::string(700, '0');  // 291 bytes: LONG4
  for (const std::string& d : {std::string("9223372036854775808"), std::string("-9223372036854775809"),
                               std::string("18446744073709551616"), std::string("-18446744073709551617"),
                               std::string("123456789012345678901234567890"), std::string("-123456789012345678901234"),
                               std::string("1606938044258990275541962092341162602522202993782792835301376"),
                               ten_to_700, "-" + ten_to_700})
    expect_round_trip(PyBigInt{d});
  // Values that fit int64 come back as ints, whatever they were given as.
  EXPECT_EQ(decoded(encode_pickle(PyBigInt{"-9223372036854775808"})),
            PyValue(std::numeric_limits<std::int64_t>::min()));
  EXPECT_EQ(decoded(encode_pickle(PyBigInt{"5"})), PyValue(5));
  // CPython's encoding: LONG1 with the shortest two's complement.
  EXPECT_EQ(to_hex(encode_pickle(std::int64_t{2147483648})), "80049508000000000000008a0500000080002e");
  EXPECT_EQ(to_hex(encode_pickle(std::int64_t{-2147483649})), "80049508000000000000008a05ffffff7fff2e");
  EXPECT_EQ(to_hex(encode_pickle(-(std::int64_t{1} << 39))), "80049508000000000000008a0500000000802e");
  EXPECT_EQ(to_hex(encode_pickle(PyBigInt{"18446744073709551616"})), "8004950c000000000000008a090000000000000000012e");
  const std::string long4 = encode_pickle(PyBigInt{ten_to_700});
  EXPECT_EQ(static_cast<unsigned char>(long4[11]), 0x8b);  // after PROTO and FRAME
}

TEST(PickleValueRoundTrip, Floats) {
  for (double x : {0.0, 1.5, -2.25, 0.1, 1e16, 1e-5, 1e300, 5e-324, 1.7976931348623157e308,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()})
    expect_round_trip(x);
  const PyValue neg_zero = decoded(encode_pickle(-0.0));
  ASSERT_NE(neg_zero.get<double>(), nullptr);
  EXPECT_TRUE(*neg_zero.get<double>() == 0 && std::signbit(*neg_zero.get<double>()));
  const PyValue nan = decoded(encode_pickle(std::numeric_limits<double>::quiet_NaN()));
  ASSERT_NE(nan.get<double>(), nullptr);
  EXPECT_TRUE(std::isnan(*nan.get<double>()));
  EXPECT_EQ(to_hex(encode_pickle(1.5)), "8004950a00000000000000473ff80000000000002e");
}

TEST(PickleValueRoundTrip, StringsAndBytes) {
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte += static_cast<char>(i);
  for (const PyValue& v : std::vector<PyValue>{
           "", "a", "\u00e9\u20ac\U0001f600", "it's \"quoted\"\n\t\\", big_str(300, 'z'), big_str(70000, 'x'),
           "\xed\xa0\x80",  // a lone surrogate, as CPython writes it (surrogatepass)
           PyBytes{}, PyBytes{every_byte}, PyBytes{big_str(100000, 'y')}, PyBytes{"", true}, PyBytes{every_byte, true},
           PyList{{PyBytes{every_byte}, every_byte.substr(0, 128), PyBytes{big_str(70000, 'q'), true}}}})
    expect_round_trip(v);
}

TEST(PickleValueRoundTrip, Containers) {
  std::vector<PyValue> values{
      PyList{},
      PyList{{1}},
      PyList{{1, "a", PyNone{}}},
      ints(0, 999),
      ints(0, 1000),
      ints(-5, 2500),
      PyTuple{},
      PyTuple{{1}},
      PyTuple{{1, 2}},
      PyTuple{{1, 2, 3}},
      PyTuple{{1, 2, 3, 4}},
      PyTuple{{PyTuple{}, PyTuple{{PyList{}}}}},
      PySet{},
      PySet{{}, true},
      PySet{{1, "x", PyBytes{"b"}, PyTuple{{1, 2}}, PyNone{}, 2.5}},
      PySet{{PySet{{1, 2}, true}, PyDate{2020, 1, 1}}, true},
      PyDict{},
      PyDict{{{"a", 1}}},
      PyDict{{{"a", PyList{{1, PyDict{{{"b", PySet{{1}}}}}}}}, {PyTuple{{1, "k"}}, 2}}},
      PyDict{{}, PyDict::Kind::ordered_dict},
      PyDict{{{"a", 1}}, PyDict::Kind::ordered_dict},
      dot_dict({}),
      dot_dict({{"a", 1}, {"b", dot_dict({{"c", PyList{{1, 2}}}})}}),
  };
  PyDict many, ordered{{}, PyDict::Kind::ordered_dict};
  PySet set;
  for (int i = 0; i < 2001; ++i) {
    many.items.emplace_back(std::to_string(i), i);
    ordered.items.emplace_back(i, std::to_string(i));
    set.items.emplace_back(i);
  }
  values.insert(values.end(), {many, ordered, set});
  for (const auto& v : values) expect_round_trip(v);
}

TEST(PickleValueRoundTrip, NestingUpToTheCheckersDepth) {
  PyValue v = PyList{{1, 2}};
  for (int depth = 1; depth < 128; ++depth) v = PyList{{v, depth}};
  expect_round_trip(v);
  EXPECT_THROW(encode_pickle(PyList{{v}}), std::invalid_argument);
  PyValue t = PyTuple{{1, 2, 3, 4}};
  for (int depth = 1; depth < 128; ++depth) t = PyTuple{{t, 1, 2, 3, 4}};
  expect_round_trip(t);
}

TEST(PickleValueRoundTrip, DatesTimesAndDecimals) {
  for (const PyValue& v : std::vector<PyValue>{
           datetime_of(2024, 1, 2), datetime_of(2024, 2, 29, 23, 59, 59, 999999), datetime_of(1, 1, 1),
           datetime_of(9999, 12, 31, 23, 59, 59, 999999), datetime_of(2024, 1, 2, 3, 4, 5, 6, 0),
           datetime_of(2024, 1, 2, 3, 4, 5, 6, 7200, "EET"), datetime_of(2024, 1, 2, 3, 4, 5, 6, -19800),
           datetime_of(2024, 1, 2, 3, 4, 5, 6, 86399), datetime_of(2024, 1, 2, 3, 4, 5, 6, -86399, "far"),
           datetime_of(2024, 11, 3, 1, 30, 0, 0, std::nullopt, "", 1), datetime_of(2024, 1, 2, 0, 0, 0, 0, 0, "UTC"),
           PyDate{2024, 1, 2}, PyDate{1, 1, 1}, PyDate{9999, 12, 31}, time_of(0, 0), time_of(23, 59, 59, 999999),
           time_of(1, 2, 3, 4, 0), time_of(1, 2, 3, 4, 3600, "CET", 1), PyTimedelta{}, PyTimedelta{1, 2, 3},
           PyTimedelta{-1, 86399, 999999}, PyTimedelta{999999999, 86399, 999999}, PyTimedelta{-999999999, 0, 0},
           PyDecimal{"1.10"}, PyDecimal{"-0"}, PyDecimal{"0E+5"}, PyDecimal{"1E+3"}, PyDecimal{"1E-7"},
           PyDecimal{"0.000001"}, PyDecimal{"NaN"}, PyDecimal{"-NaN12"}, PyDecimal{"sNaN"}, PyDecimal{"Infinity"},
           PyDecimal{"-Infinity"}, PyDecimal{"1.2345E-999999999999999996"},
           PyList{{datetime_of(2024, 1, 2, 0, 0, 0, 0, 0), datetime_of(2024, 1, 3, 0, 0, 0, 0, 0),
                   time_of(1, 2, 0, 0, 0), PyDecimal{"1"}, PyDecimal{"2"}}}})
    expect_round_trip(v);
  // The encoder writes what Decimal's own str() gives.
  EXPECT_EQ(decoded(encode_pickle(PyDecimal{" 1_000 "})), PyValue(PyDecimal{"1000"}));
  EXPECT_EQ(decoded(encode_pickle(PyDecimal{"1e3"})), PyValue(PyDecimal{"1E+3"}));
  // And normalizes timedeltas as Python does.
  EXPECT_EQ(decoded(encode_pickle(PyTimedelta{0, 90000, 0})), PyValue(PyTimedelta{1, 3600, 0}));
}

// A value of every kind, nested: the shape of what Robot sends.
PyValue rich_value() {
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte += static_cast<char>(i);
  PyDict dict;
  dict.items = {
      {"name", "robot"},
      {"numbers", PyList{{0, -1, 255, 65536, std::int64_t{-2147483649}, std::numeric_limits<std::int64_t>::max(),
                          std::numeric_limits<std::int64_t>::min(), PyBigInt{"123456789012345678901234567890"},
                          PyBigInt{"-1180591620717411303424"}}}},
      {PyTuple{{1, "k"}}, PySet{{1, 2, 3}}},
      {"floats", PyList{{1.5, 0.1, 1e16, 1e-05, 1e22, -0.0, 5e-324, 1.7976931348623157e308, 123456789.123,
                         std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}}},
      {"text", PyList{{"", "a", "it's", "a\"b'c", "\t\n\r\\", std::string("\x00\x7f", 2), "\u0080\u00a0\u00ad",
                       "\u00e9\u20ac\U0001f600", "\u2028\U000e0001", "\xed\xa0\x80", big_str(70000, 'x')}}},
      {"bytes", PyList{{PyBytes{every_byte}, PyBytes{"ab", true}, PyBytes{"", true}, PyBytes{}}}},
      {"tuples", PyTuple{{PyTuple{}, PyTuple{{1}}, PyTuple{{1, 2}}, PyTuple{{1, 2, 3}}, PyTuple{{1, 2, 3, 4, 5}}}}},
      {"sets", PyList{{PySet{}, PySet{{}, true}, PySet{{7}, true}, PySet{{PyTuple{{1, 2}}}, true}}}},
      {"ordered", PyDict{{{"b", 1}, {"a", PyList{{2}}}}, PyDict::Kind::ordered_dict}},
      {"ordered_empty", PyDict{{}, PyDict::Kind::ordered_dict}},
      {"when",
       PyList{{datetime_of(2024, 1, 2, 3, 4, 5, 6), datetime_of(2024, 1, 2), datetime_of(2024, 1, 2, 0, 0, 0, 0, 0),
               datetime_of(2024, 1, 2, 3, 4, 5, 0, 7200, "EET"), datetime_of(2024, 1, 2, 3, 4, 0, 0, -19800, "", 1),
               datetime_of(2024, 1, 2, 0, 0, 0, 0, 3601), datetime_of(2024, 1, 2, 0, 0, 0, 0, 0, "UTC"),
               PyDate{5, 1, 1}, time_of(1, 2), time_of(1, 2, 3, 4, 0, "", 1), time_of(13, 2, 3, 0, -3600),
               PyTimedelta{}, PyTimedelta{1, 7384, 0}, PyTimedelta{-1, 82800, 0}, PyTimedelta{-3, 0, 1}}}},
      {"decimals", PyList{{PyDecimal{"1.10"}, PyDecimal{"-0"}, PyDecimal{"1E+3"}, PyDecimal{"1E-7"}, PyDecimal{"NaN"},
                           PyDecimal{"-Infinity"}, PyDecimal{"sNaN"}}}},
      {"long", ints(0, 1500)},
      {PyNone{}, true},
      {false, PyNone{}}};
  return PyList{{dict, PyList{{PyList{{PyList{}}}}}, "end"}};
}

TEST(PickleValueRoundTrip, RichValue) {
  const PyValue v = rich_value();
  const PyValue back = decoded(encode_pickle(v));
  // NaN is not equal to itself: compare what Python would print.
  EXPECT_EQ(py_repr(back), py_repr(v));
  EXPECT_EQ(encode_pickle(back), encode_pickle(v));
}

// Byte for byte what CPython 3.11's pickle.dumps(value, protocol=4) printed.
TEST(PickleValueEncode, BytesAsCPythonWritesThem) {
  // [1, 'a', b'b', None, True, 1.5, (1, 2), {'k': 1}]
  EXPECT_EQ(encode_pickle_hex(PyList{{1, "a", PyBytes{"b"}, PyNone{}, true, 1.5, PyTuple{{1, 2}}, PyDict{{{"k", 1}}}}}),
            "80049529000000000000005d94284b018c016194430162944e88473ff80000000000004b014b0286947d948c016b944b0173652e");
  // [datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2), 'EET')), date(2020, 1, 1),
  //  time(1, 2, 3, tzinfo=timezone.utc), timedelta(days=-1, seconds=5), Decimal('1.10'),
  //  OrderedDict([('a', 1), ('b', 2)]), bytearray(b'ab'), frozenset({1}), {1, 2}, 2**70, -2**70]:
  // each class written once, then fetched from the memo.
  const PyValue v =
      PyList{{datetime_of(2024, 1, 2, 3, 4, 5, 6, 7200, "EET"), PyDate{2020, 1, 1}, time_of(1, 2, 3, 0, 0),
              PyTimedelta{-1, 5, 0}, PyDecimal{"1.10"}, PyDict{{{"a", 1}, {"b", 2}}, PyDict::Kind::ordered_dict},
              PyBytes{"ab", true}, PySet{{1}, true}, PySet{{1, 2}}, PyBigInt{"1180591620717411303424"},
              PyBigInt{"-1180591620717411303424"}}};
  EXPECT_EQ(encode_pickle_hex(v),
            "80049546010000000000005d94288c086461746574696d65948c086461746574696d65949394430a07e8010203040500000694"
            "68018c0874696d657a6f6e6594939468018c0974696d6564656c74619493944b004d201c4b00879452948c0345455494869452"
            "948694529468018c0464617465949394430407e40101948594529468018c0474696d65949394430601020300000094680668084b"
            "004b004b0087945294859452948694529468084affffffff4b054b00879452948c07646563696d616c948c07446563696d616c94"
            "93948c04312e313094859452948c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294288c016194"
            "4b018c0162944b02758c086275696c74696e73948c09627974656172726179949394430261629485945294284b0191948f9428"
            "4b014b02908a090000000000000000408a090000000000000000c0652e");
  // Batches of 1000: a plain dict or set whose size is a multiple of it ends with an empty batch; a list
  // or an OrderedDict does not.
  PySet set;
  PyDict dict, ordered{{}, PyDict::Kind::ordered_dict};
  for (int i = 0; i < 1000; ++i) {
    set.items.emplace_back(i);
    dict.items.emplace_back(i, i);
    ordered.items.emplace_back(i, i);
  }
  const auto tail = [](const PyValue& value) {
    return encode_pickle_hex(value).substr(encode_pickle_hex(value).size() - 10);
  };
  EXPECT_EQ(tail(set), "039028902e");         // ... 999 ADDITEMS MARK ADDITEMS STOP
  EXPECT_EQ(tail(dict), "037528752e");        // ... 999 SETITEMS MARK SETITEMS STOP
  EXPECT_EQ(tail(ints(0, 999)), "4de703652e");  // ... M 999 APPENDS STOP
  EXPECT_EQ(tail(ordered), "4de703752e");       // ... M 999 SETITEMS STOP
}

TEST(PickleValueEncode, RefusesWhatPythonCannotHold) {
  EXPECT_THROW(encode_pickle(PySet{{PyList{}}}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDict{{{PyDict{}, 1}}}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDict{{{PyTuple{{1, PyBytes{"x", true}}}, 1}}}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PySet{{PyDecimal{"sNaN"}}, true}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDate{2023, 2, 29}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDate{0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(datetime_of(2024, 1, 2, 24)), std::invalid_argument);
  EXPECT_THROW(encode_pickle(datetime_of(2024, 1, 2, 0, 0, 0, 0, 86400)), std::invalid_argument);
  EXPECT_THROW(encode_pickle(datetime_of(2024, 1, 2, 0, 0, 0, 0, std::nullopt, "EET")), std::invalid_argument);
  EXPECT_THROW(encode_pickle(time_of(1, 2, 3, 1000000)), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyTimedelta{1000000000, 0, 0}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDecimal{"abc"}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyBigInt{"12x"}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyBigInt{""}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyBigInt{"1" + std::string(9900, '0')}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(std::string("\xff")), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------
// What a pickle means: Python's rules, on hand-made pickles.

TEST(PickleValueSemantics, RepeatedKeysAreOneKeyAsInPython) {
  // {1: 'a', True: 'b', 1.0: 'c', Decimal('1.0'): 'd'} is {1: 'd'} in Python.
  const std::string p = P4 + kEmptyDict + kMark + int1(1) + str("a") + kTrue + str("b") + float8(1.0) + str("c") +
                        decimal("1.0") + str("d") + "u" + kStop;
  EXPECT_EQ(decoded(p), PyValue(PyDict{{{1, "d"}}}));
  // {0.5: 1, Decimal('0.5'): 2, 0.1: 3, Decimal('0.1'): 4, 2**64: 5, 2.0**64: 6, Decimal(2**64): 7}
  // is {0.5: 2, 0.1: 3, Decimal('0.1'): 4, 18446744073709551616: 7}.
  const std::string two_64 = long1(std::string("\0\0\0\0\0\0\0\0\x01", 9));
  const std::string q = P4 + kEmptyDict + kMark + float8(0.5) + int1(1) + decimal("0.5") + int1(2) + float8(0.1) +
                        int1(3) + decimal("0.1") + int1(4) + two_64 + int1(5) + float8(18446744073709551616.0) +
                        int1(6) + decimal("18446744073709551616") + int1(7) + kSetItems + kStop;
  EXPECT_EQ(py_repr(decoded(q)), "{0.5: 2, 0.1: 3, Decimal('0.1'): 4, 18446744073709551616: 7}");
  // Sets and frozensets keep the first of equal elements: {1, 1.0, True, (1,), (1.0,)} is {1, (1,)}.
  const std::string s = P4 + kEmptySet + kMark + int1(1) + float8(1.0) + kTrue + int1(1) + kTuple1 + float8(1.0) +
                        kTuple1 + kAddItems + kStop;
  EXPECT_EQ(decoded(s), PyValue(PySet{{1, PyTuple{{1}}}}));
  const std::string f = P4 + kMark + str("a") + str("a") + int4(-3) + float8(-3.0) + kFrozenSet + kStop;
  EXPECT_EQ(decoded(f), PyValue(PySet{{"a", -3}, true}));
  // Equal frozensets and aware datetimes at the same instant are one key; naive and aware are not.
  const std::string utc = global("datetime", "timezone") + timedelta(int1(0) + int1(0) + int1(0)) + kTuple1 + kReduce;
  const std::string plus1 =
      global("datetime", "timezone") + timedelta(int1(0) + "M\x10\x0e" + int1(0)) + kTuple1 + kReduce;
  const std::string at_midnight =
      global("datetime", "datetime") + bytes(std::string("\x07\xe8\x01\x02\x00\x00\x00\x00\x00\x00", 10));
  const std::string at_one =
      global("datetime", "datetime") + bytes(std::string("\x07\xe8\x01\x02\x01\x00\x00\x00\x00\x00", 10));
  const std::string k = P4 + kEmptyDict + kMark + kMark + int1(1) + int1(2) + kFrozenSet + int1(1) + kMark + int1(2) +
                        int1(1) + kFrozenSet + int1(2) + at_midnight + utc + kTuple2 + kReduce + int1(3) + at_one +
                        plus1 + kTuple2 + kReduce + int1(4) + at_midnight + kTuple1 + kReduce + int1(5) + kSetItems +
                        kStop;
  EXPECT_EQ(py_repr(decoded(k)),
            "{frozenset({1, 2}): 2, datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone.utc): 4, "
            "datetime.datetime(2024, 1, 2, 0, 0): 5}");
}

TEST(PickleValueSemantics, NaNIsOnlyEqualToItself) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Two NaN objects are two keys; the same one (a memo GET) is one.
  const std::string p = P4 + kEmptyDict + kMark + float8(nan) + int1(1) + float8(nan) + int1(2) + kSetItems + kStop;
  EXPECT_EQ(py_repr(decoded(p)), "{nan: 1, nan: 2}");
  const std::string q =
      P4 + kEmptyDict + kMark + float8(nan) + kMemo + int1(1) + binget(0) + int1(2) + kSetItems + kStop;
  EXPECT_EQ(py_repr(decoded(q)), "{nan: 2}");
  const std::string r =
      P4 + kEmptySet + kMark + decimal("NaN") + kMemo + binget(0) + decimal("NaN") + kAddItems + kStop;
  EXPECT_EQ(py_repr(decoded(r)), "{Decimal('NaN'), Decimal('NaN')}");
}

TEST(PickleValueSemantics, ConstructorsNormalizeAsPythons) {
  // timedelta(0, 90000, 0) is 1 day, 1:00:00; timedelta(0, 0, -1) is -1 day, 23:59:59.999999.
  EXPECT_EQ(decoded(P4 + timedelta(int1(0) + int4(90000) + int1(0)) + kStop), PyValue(PyTimedelta{1, 3600, 0}));
  EXPECT_EQ(decoded(P4 + timedelta(int1(0) + int1(0) + int4(-1)) + kStop), PyValue(PyTimedelta{-1, 86399, 999999}));
  // Decimal's str(): canonical text whatever the pickle spelled.
  EXPECT_EQ(decoded(P4 + decimal(" 1_000 ") + kStop), PyValue(PyDecimal{"1000"}));
  EXPECT_EQ(decoded(P4 + decimal("1e3") + kStop), PyValue(PyDecimal{"1E+3"}));
  EXPECT_EQ(decoded(P4 + decimal("-nan012") + kStop), PyValue(PyDecimal{"-NaN12"}));
  EXPECT_EQ(decoded(P4 + decimal(".5") + kStop), PyValue(PyDecimal{"0.5"}));
  EXPECT_EQ(decoded(P4 + decimal("0.0000001") + kStop), PyValue(PyDecimal{"1E-7"}));
  // The fold bit rides in the month byte of a datetime and the hour byte of a time.
  EXPECT_EQ(decoded(P4 + global("datetime", "datetime") +
                    bytes(std::string("\x07\xe8\x81\x02\x00\x00\x00\x00\x00\x00", 10)) + kTuple1 + kReduce + kStop),
            datetime_of(2024, 1, 2, 0, 0, 0, 0, std::nullopt, "", 1));
  EXPECT_EQ(decoded(P4 + global("datetime", "time") + bytes(std::string("\x81\x02\x00\x00\x00\x00", 6)) + kTuple1 +
                    kReduce + kStop),
            time_of(1, 2, 0, 0, std::nullopt, "", 1));
  // Protocol 5's BYTEARRAY8.
  EXPECT_EQ(decoded("\x80\x05\x96" + le(2, 8) + "ab" + kStop), PyValue(PyBytes{"ab", true}));
}

TEST(PickleValueSemantics, SharedReferencesBecomeCopiesOfTheFinalContents) {
  // l = [1]; t = (l, l); l is filled after being memoized, before being placed: ([1, 2], [1, 2]).
  const std::string p = P4 + kEmptyList + kMemo + int1(1) + kAppend + binget(0) + int1(2) + kAppend + kTuple2 + kStop;
  EXPECT_EQ(decoded(p), PyValue(PyTuple{{PyList{{1, 2}}, PyList{{1, 2}}}}));
}

// ---------------------------------------------------------------------------------------------------
// Refusals: what and where.

TEST(PickleValueRefusal, CodeIsNeverRun) {
  // GLOBAL os.system, then a call: the checker refuses the opcode itself.
  const std::string global_os = P4 + "cos\nsystem\n" + str("id") + kTuple1 + kReduce + kStop;
  EXPECT_EQ(refusal(global_os), "byte 2: opcode GLOBAL is not allowed");
  const std::string stack_global = P4 + global("os", "system") + str("id") + kTuple1 + kReduce + kStop;
  EXPECT_EQ(refusal(stack_global), "byte 14: class os.system is not allowed");
  // BUILD (set state) on an allowed class.
  const std::string build =
      P4 + global("collections", "OrderedDict") + kEmptyTuple + kReduce + kEmptyDict + "b" + kStop;
  EXPECT_EQ(refusal(build).substr(0, 43), "byte 32: BUILD on a collections.OrderedDict");
  // What CPython writes for a class whose __reduce__ returns (os.system, ("id",)).
  const std::string python =
      from_hex("8004951d000000000000008c05706f736978948c0673797374656d9493948c02696494859452942e");
  EXPECT_NE(refusal(python).find("class posix.system is not allowed"), std::string::npos);
}

TEST(PickleValueRefusal, GarbageAndTruncation) {
  EXPECT_EQ(refusal(""), "byte 0: empty pickle");
  EXPECT_NE(refusal("hello world").find("not PROTO"), std::string::npos);
  EXPECT_NE(refusal(P4).find("without STOP"), std::string::npos);
  EXPECT_NE(refusal(P4 + "\xff\xfe").find("not allowed"), std::string::npos);
  EXPECT_EQ(refusal(P4 + str("abc").substr(0, 3)), "byte 2: opcode SHORT_BINUNICODE declares 3 bytes, only 1 remain");
  EXPECT_NE(refusal(P4 + int1(1) + int1(2) + kStop).find("2 values on the stack"), std::string::npos);
  EXPECT_NE(refusal(P4 + kNone + kStop + kNone).find("after STOP"), std::string::npos);
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise += static_cast<char>((i * 2654435761u) >> 13);
  for (std::size_t n = 0; n < noise.size(); n += 97) (void)decode_pickle(P4 + noise.substr(n, 64));  // never crashes
}

TEST(PickleValueRefusal, SelfReferencingContainers) {
  // l = []; l.append(l)
  const std::string list = P4 + kEmptyList + kMemo + binget(0) + kAppend + kStop;
  EXPECT_NE(refusal(list).find("cycles are not plain data"), std::string::npos) << refusal(list);
  // d = {}; d['d'] = d
  const std::string dict = P4 + kEmptyDict + kMemo + str("d") + binget(0) + kSetItem + kStop;
  EXPECT_NE(refusal(dict).find("cycles are not plain data"), std::string::npos) << refusal(dict);
  // l = []; l.append([l])
  const std::string deep = P4 + kEmptyList + kMemo + kEmptyList + binget(0) + kAppend + kAppend + kStop;
  EXPECT_NE(refusal(deep).find("cycles are not plain data"), std::string::npos) << refusal(deep);
}

// The checker admits these (it knows argument shapes, not values); CPython would fail or build a broken
// object; the tree cannot hold the rest.
TEST(PickleValueRefusal, ValuesPythonWouldNotBuild) {
  const auto dt = [](std::string_view state) {
    return P4 + global("datetime", "datetime") + bytes(state) + kTuple1 + kReduce + kStop;
  };
  EXPECT_EQ(refusal(dt(std::string("\x07\xe8\x02\x1e\x00\x00\x00\x00\x00\x00", 10))),
            "byte 36: datetime state \\x07\\xe8\\x02\\x1e\\x00\\x00\\x00\\x00\\x00\\x00 is not a valid datetime");
  EXPECT_NE(refusal(dt(std::string("\x07\xe8\x0d\x01\x00\x00\x00\x00\x00\x00", 10))).find("not a valid datetime"),
            std::string::npos);
  EXPECT_NE(refusal(dt(std::string("\x07\xe8\x01\x01\x18\x00\x00\x00\x00\x00", 10))).find("not a valid datetime"),
            std::string::npos);
  EXPECT_NE(
      refusal(P4 + global("datetime", "date") + bytes(std::string("\x00\x00\x01\x01", 4)) + kTuple1 + kReduce + kStop)
          .find("not a valid date"),
      std::string::npos);
  EXPECT_NE(refusal(P4 + global("datetime", "time") + bytes(std::string("\x01\x3c\x00\x00\x00\x00", 6)) + kTuple1 +
                    kReduce + kStop)
                .find("not a valid time"),
            std::string::npos);
  EXPECT_NE(refusal(P4 + decimal("abc") + kStop).find("Decimal('abc') is not a number"), std::string::npos);
  EXPECT_NE(refusal(P4 + decimal("1e1000000000000000000") + kStop).find("is not a number"), std::string::npos);
  EXPECT_NE(refusal(P4 + timedelta(int4(1000000000) + int1(0) + int1(0)) + kStop).find("OverflowError"),
            std::string::npos);
  const std::string tz_day =
      global("datetime", "timezone") + timedelta(int1(1) + int1(0) + int1(0)) + kTuple1 + kReduce;
  EXPECT_NE(
      refusal(P4 + global("datetime", "datetime") + bytes(std::string("\x07\xe8\x01\x01\x00\x00\x00\x00\x00\x00", 10)) +
              tz_day + kTuple2 + kReduce + kStop)
          .find("strictly within a day"),
      std::string::npos);
  const std::string tz_micro =
      global("datetime", "timezone") + timedelta(int1(0) + int1(0) + int1(1)) + kTuple1 + kReduce;
  EXPECT_NE(
      refusal(P4 + global("datetime", "datetime") + bytes(std::string("\x07\xe8\x01\x01\x00\x00\x00\x00\x00\x00", 10)) +
              tz_micro + kTuple2 + kReduce + kStop)
          .find("microseconds are not supported"),
      std::string::npos);
  // A timezone on its own: [datetime.timezone.utc].
  const std::string utc = global("datetime", "timezone") + timedelta(int1(0) + int1(0) + int1(0)) + kTuple1 + kReduce;
  EXPECT_NE(refusal(P4 + kEmptyList + utc + kAppend + kStop).find("timezone on its own"), std::string::npos);
  // A signaling NaN cannot be hashed.
  EXPECT_NE(refusal(P4 + kEmptySet + kMark + decimal("sNaN") + kAddItems + kStop).find("signaling NaN"),
            std::string::npos);
  // Long integers cost the square of their length to print: 70 of the largest (4096 bytes) are too many.
  std::string many = P4 + kEmptyList + kMark;
  for (int i = 0; i < 70; ++i) many += "\x8b" + le(4096, 4) + std::string(4095, '\x11') + '\x01';
  EXPECT_NE(refusal(many + kAppends + kStop).find("too long in total"), std::string::npos);
  std::string some = P4 + kEmptyList + kMark;
  for (int i = 0; i < 8; ++i) some += "\x8b" + le(4096, 4) + std::string(4095, '\x11') + '\x01';
  EXPECT_EQ(decoded(some + kAppends + kStop).get<PyList>()->items.size(), 8u);
}

TEST(PickleValueRefusal, LimitsAreTheCheckers) {
  PickleLimits small;
  small.max_depth = 3;
  PyValue v = PyList{{PyList{{PyList{{PyList{}}}}}}};
  EXPECT_NE(refusal(encode_pickle(v), small).find("nesting deeper than 3"), std::string::npos);
  small = {};
  small.max_bytes = 10;
  EXPECT_NE(refusal(encode_pickle(PyValue("0123456789")), small).find("larger than the limit"), std::string::npos);
}

TEST(PickleValueRefusal, HexText) {
  EXPECT_EQ(std::get<PyValue>(decode_pickle_hex("80044b012e")), PyValue(1));
  EXPECT_EQ(std::get<PyValue>(decode_pickle_hex(encode_pickle_hex(rich_value()))).get<PyList>()->items.size(), 3u);
  EXPECT_EQ(std::get<std::string>(decode_pickle_hex("80044b012")), "malformed pickled value: odd number of hex digits");
  EXPECT_EQ(std::get<std::string>(decode_pickle_hex("80044B012e")),
            "malformed pickled value: 'B' at hex digit 5 is not lowercase hex");
  EXPECT_EQ(std::get<std::string>(decode_pickle_hex("8004zz2e")),
            "malformed pickled value: 'z' at hex digit 4 is not lowercase hex");
  EXPECT_EQ(std::get<std::string>(decode_pickle_hex("8004632e")), "byte 2: opcode GLOBAL is not allowed");
}

// ---------------------------------------------------------------------------------------------------
// str() and repr(): literals printed by CPython 3.11.

TEST(PickleValuePrint, ReprAndStrAsCPython) {
  struct Case {
    PyValue value;
    std::string repr;
    std::string str;
  };
  const std::vector<Case> cases{
      {PyValue(), R"(None)", R"(None)"},
      {true, R"(True)", R"(True)"},
      {std::int64_t{-5}, R"(-5)", R"(-5)"},
      {PyBigInt{"-123456789012345678901234"}, R"(-123456789012345678901234)", R"(-123456789012345678901234)"},
      {1.0, R"(1.0)", R"(1.0)"},
      {0.1, R"(0.1)", R"(0.1)"},
      {1e16, R"(1e+16)", R"(1e+16)"},
      {1e15, R"(1000000000000000.0)", R"(1000000000000000.0)"},
      {0.0001, R"(0.0001)", R"(0.0001)"},
      {0.00001, R"(1e-05)", R"(1e-05)"},
      {-0.0, R"(-0.0)", R"(-0.0)"},
      {1.5e300, R"(1.5e+300)", R"(1.5e+300)"},
      {5e-324, R"(5e-324)", R"(5e-324)"},
      {123456789.123, R"(123456789.123)", R"(123456789.123)"},
      {std::numeric_limits<double>::infinity(), R"(inf)", R"(inf)"},
      {-std::numeric_limits<double>::infinity(), R"(-inf)", R"(-inf)"},
      {std::numeric_limits<double>::quiet_NaN(), R"(nan)", R"(nan)"},
      {1e22, R"(1e+22)", R"(1e+22)"},
      {2.5e-05, R"(2.5e-05)", R"(2.5e-05)"},
      {"a", R"('a')", R"(a)"},
      {"it's", R"("it's")", R"(it's)"},
      {"a\"b'c", R"('a"b\'c')", R"(a"b'c)"},
      {"\t\n\r\\", R"('\t\n\r\\')", "\t\n\r\\"},
      {std::string("\x00\x1f\x7f", 3), R"('\x00\x1f\x7f')", std::string("\x00\x1f\x7f", 3)},
      {"\u00e9\u20ac\U0001f600", "'\u00e9\u20ac\U0001f600'", "\u00e9\u20ac\U0001f600"},
      {"\u0080\u00a0\u00ad\u2028\U000e0001\u0378", R"('\x80\xa0\xad\u2028\U000e0001\u0378')",
       "\u0080\u00a0\u00ad\u2028\U000e0001\u0378"},
      {"\xed\xa0\x80", R"('\ud800')", "\xed\xa0\x80"},
      {PyBytes{"it's\x7f\x80"}, R"(b"it's\x7f\x80")", R"(b"it's\x7f\x80")"},
      {PyBytes{std::string("\x00\t\n'\"\\", 6)}, R"(b'\x00\t\n\'"\\')", R"(b'\x00\t\n\'"\\')"},
      {PyBytes{"ab", true}, R"(bytearray(b'ab'))", R"(bytearray(b'ab'))"},
      {PyBytes{"", true}, R"(bytearray(b''))", R"(bytearray(b''))"},
      {PyList{}, R"([])", R"([])"},
      {PyList{{1, "a", PyList{{2}}}}, R"([1, 'a', [2]])", R"([1, 'a', [2]])"},
      {PyTuple{}, R"(())", R"(())"},
      {PyTuple{{1}}, R"((1,))", R"((1,))"},
      {PyTuple{{1, 2}}, R"((1, 2))", R"((1, 2))"},
      {PySet{}, R"(set())", R"(set())"},
      {PySet{{1, 2}}, R"({1, 2})", R"({1, 2})"},
      {PySet{{}, true}, R"(frozenset())", R"(frozenset())"},
      {PySet{{1}, true}, R"(frozenset({1}))", R"(frozenset({1}))"},
      {PyDict{}, R"({})", R"({})"},
      {PyDict{{{"a", 1}, {PyTuple{{1, 2}}, PyNone{}}}}, R"({'a': 1, (1, 2): None})", R"({'a': 1, (1, 2): None})"},
      {PyDict{{}, PyDict::Kind::ordered_dict}, R"(OrderedDict())", R"(OrderedDict())"},
      {PyDict{{{"a", 1}}, PyDict::Kind::ordered_dict}, R"(OrderedDict([('a', 1)]))", R"(OrderedDict([('a', 1)]))"},
      {dot_dict({{"a", 1}, {"b", dot_dict({})}}), R"({'a': 1, 'b': {}})", R"({'a': 1, 'b': {}})"},
      {datetime_of(2024, 1, 2, 3, 4, 5, 6), R"(datetime.datetime(2024, 1, 2, 3, 4, 5, 6))",
       R"(2024-01-02 03:04:05.000006)"},
      {datetime_of(2024, 1, 2, 3, 4, 5), R"(datetime.datetime(2024, 1, 2, 3, 4, 5))", R"(2024-01-02 03:04:05)"},
      {datetime_of(2024, 1, 2), R"(datetime.datetime(2024, 1, 2, 0, 0))", R"(2024-01-02 00:00:00)"},
      {datetime_of(5, 1, 1), R"(datetime.datetime(5, 1, 1, 0, 0))", R"(0005-01-01 00:00:00)"},
      {datetime_of(2024, 1, 2, 0, 0, 0, 0, 0), R"(datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone.utc))",
       R"(2024-01-02 00:00:00+00:00)"},
      {datetime_of(2024, 1, 2, 3, 4, 5, 6, 7200, "EET"),
       R"(datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(seconds=7200), 'EET')))",
       R"(2024-01-02 03:04:05.000006+02:00)"},
      {datetime_of(2024, 1, 2, 3, 4, 0, 0, -19800, "", 1),
       R"(datetime.datetime(2024, 1, 2, 3, 4, fold=1, tzinfo=datetime.timezone(datetime.timedelta(days=-1, seconds=66600))))",
       R"(2024-01-02 03:04:00-05:30)"},
      {datetime_of(2024, 1, 2, 3, 4, 0, 0, 3601),
       R"(datetime.datetime(2024, 1, 2, 3, 4, tzinfo=datetime.timezone(datetime.timedelta(seconds=3601))))",
       R"(2024-01-02 03:04:00+01:00:01)"},
      {datetime_of(2024, 1, 2, 0, 0, 0, 0, 0, "UTC"),
       R"(datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(0), 'UTC')))",
       R"(2024-01-02 00:00:00+00:00)"},
      {PyDate{2024, 1, 2}, R"(datetime.date(2024, 1, 2))", R"(2024-01-02)"},
      {PyDate{5, 1, 1}, R"(datetime.date(5, 1, 1))", R"(0005-01-01)"},
      {time_of(1, 2), R"(datetime.time(1, 2))", R"(01:02:00)"},
      {time_of(1, 2, 3, 4, 0, "", 1), R"(datetime.time(1, 2, 3, 4, tzinfo=datetime.timezone.utc, fold=1))",
       R"(01:02:03.000004+00:00)"},
      {time_of(13, 2, 3, 0, -3600),
       R"(datetime.time(13, 2, 3, tzinfo=datetime.timezone(datetime.timedelta(days=-1, seconds=82800))))",
       R"(13:02:03-01:00)"},
      {PyTimedelta{}, R"(datetime.timedelta(0))", R"(0:00:00)"},
      {PyTimedelta{1, 7384, 0}, R"(datetime.timedelta(days=1, seconds=7384))", R"(1 day, 2:03:04)"},
      {PyTimedelta{-1, 82800, 0}, R"(datetime.timedelta(days=-1, seconds=82800))", R"(-1 day, 23:00:00)"},
      {PyTimedelta{2, 0, 5}, R"(datetime.timedelta(days=2, microseconds=5))", R"(2 days, 0:00:00.000005)"},
      {PyTimedelta{-3, 0, 1}, R"(datetime.timedelta(days=-3, microseconds=1))", R"(-3 days, 0:00:00.000001)"},
      {PyDecimal{"1.10"}, R"(Decimal('1.10'))", R"(1.10)"},
      {PyDecimal{"-Infinity"}, R"(Decimal('-Infinity'))", R"(-Infinity)"},
      {PyDecimal{"1E-7"}, R"(Decimal('1E-7'))", R"(1E-7)"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(py_repr(c.value), c.repr);
    EXPECT_EQ(py_str(c.value), c.str) << "repr: " << c.repr;
  }
  // Deeper than anything a pickle can hold: printed, cut.
  PyValue deep = PyList{};
  for (int i = 0; i < 3000; ++i) {
    PyList outer;
    outer.items.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_NE(py_repr(deep).find("[...]"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// The real CPython: it reads what the encoder writes, and prints what py_repr() and py_str() print.

// python3 on PATH; the project's dependencies install it (Debian's python3).
std::optional<std::filesystem::path> find_python3() {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::string_view rest = path;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::filesystem::path candidate = std::filesystem::path(std::string(rest.substr(0, colon))) / "python3";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  return std::nullopt;
}

// Runs python3 on a script with one argument; returns its stdout, or nullopt when it failed.
std::optional<std::string> run_python(const std::filesystem::path& python, const std::string& script,
                                      const std::string& argument) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pickle_value_test." + std::to_string(::getpid()) + "." + std::to_string(std::rand()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "script.py", std::ios::binary) << script;
  std::ofstream(dir / "argument", std::ios::binary) << argument;
  const std::string command = "'" + python.string() + "' '" + (dir / "script.py").string() + "' '" +
                              (dir / "argument").string() + "' > '" + (dir / "out").string() + "'";
  const int rc = std::system(command.c_str());
  std::optional<std::string> out;
  if (rc == 0) out = read_file(dir / "out");
  std::filesystem::remove_all(dir);
  return out;
}

// The printout python3 makes of a list: its version on a line, then repr(v) and str() of each item,
// separated by NUL bytes.
constexpr std::string_view kPrintScript = R"(
def printout(v):
    import sys
    text = "%d.%d\n" % sys.version_info[:2] + repr(v) + "\0" + "\0".join(str(x) for x in v)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
)";

// The same from py_repr() and py_str(), for that version: from 3.12 on, repr() of an OrderedDict is
// OrderedDict({...}) (`ordered` maps the 3.8 to 3.11 form py_repr() prints to it).
std::string printout(const PyValue& list, std::string_view version,
                     const std::vector<std::pair<std::string, std::string>>& ordered) {
  std::string text = std::string(version) + "\n" + py_repr(list);
  for (const auto& item : list.get<PyList>()->items) text += '\0' + py_str(item);
  if (version.size() > 2 && version.substr(0, 2) == "3." && std::stoi(std::string(version.substr(2))) >= 12)
    for (const auto& [old_form, new_form] : ordered)
      for (auto at = text.find(old_form); at != std::string::npos; at = text.find(old_form, at + new_form.size()))
        text.replace(at, old_form.size(), new_form);
  return text;
}

std::string_view version_of(std::string_view printout) { return printout.substr(0, printout.find('\n')); }

// The rich value (all but DotDict, which needs Robot Framework) and each of its parts.
PyValue rich_list() {
  const PyValue v = rich_value();
  PyList list = *v.get<PyList>();
  for (const auto& [key, value] : v.get<PyList>()->items[0].get<PyDict>()->items) {
    list.items.push_back(key);
    list.items.push_back(value);
    if (const auto* l = value.get<PyList>()) list.items.insert(list.items.end(), l->items.begin(), l->items.end());
  }
  return list;
}

TEST(PickleValueCPython, CPythonReadsWhatTheEncoderWrites) {
  const auto python = find_python3();
  ASSERT_TRUE(python) << "python3 is not on PATH (Debian's python3 package is one of the project's dependencies)";
  const PyValue v = rich_list();
  const std::string script = std::string(kPrintScript) + R"(
import pickle, sys
printout(pickle.loads(bytes.fromhex(open(sys.argv[1]).read())))
)";
  const auto out = run_python(*python, script, encode_pickle_hex(v));
  ASSERT_TRUE(out) << "python3 failed to unpickle the encoder's output";
  EXPECT_EQ(*out, printout(v, version_of(*out),
                           {{"OrderedDict([('b', 1), ('a', [2])])", "OrderedDict({'b': 1, 'a': [2]})"}}));
}

// The other way: CPython pickles values (protocols 4 and 5), the decoder reads them.
TEST(PickleValueCPython, TheDecoderReadsWhatCPythonWrites) {
  const auto python = find_python3();
  ASSERT_TRUE(python) << "python3 is not on PATH (Debian's python3 package is one of the project's dependencies)";
  const std::string script = std::string(kPrintScript) + R"(
import collections, datetime as dt, decimal, pickle, sys
tz = dt.timezone(dt.timedelta(hours=-5, minutes=-30), "X")
shared = [1, "s"]
v = [None, True, 0, -1, 2**31, -2**63, 2**64, -3**100, 1.5, 0.1, 1e16, 1e-5, -0.0, float("inf"), float("nan"),
     "", "it's", "\u00e9\u20ac\U0001f600", "\ud800", "x" * 70000, b"\x00\xff" * 40000, bytearray(b"ab"), bytearray(),
     [], [shared, shared], (), (1,), (1, 2, 3, 4), {1, 2}, frozenset({3}), frozenset(), {}, {"a": {"b": [1]}},
     {(1, "k"): frozenset({2})}, collections.OrderedDict([("a", 1), ("b", [2])]), collections.OrderedDict(),
     dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc),
     dt.datetime(2024, 1, 2, 3, 4, tzinfo=tz, fold=1), dt.date(2020, 2, 29), dt.time(1, 2, 3, 4, tzinfo=tz),
     dt.timedelta(days=-1, seconds=5, microseconds=6), decimal.Decimal("1.10"), decimal.Decimal("-NaN"),
     decimal.Decimal("1E+3"), list(range(2500)), {str(i): i for i in range(1500)}]
for protocol in (4, 5):
    sys.stdout.buffer.write(pickle.dumps(v, protocol).hex().encode() + b"\n")
printout(v)
)";
  const auto out = run_python(*python, script, "");
  ASSERT_TRUE(out) << "python3 failed";
  std::string_view rest = *out;
  std::vector<std::string_view> lines;
  for (int protocol : {4, 5}) {
    const auto nl = rest.find('\n');
    ASSERT_NE(nl, std::string_view::npos) << "protocol " << protocol;
    lines.push_back(rest.substr(0, nl));
    rest.remove_prefix(nl + 1);
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto r = decode_pickle_hex(lines[i]);
    ASSERT_TRUE(std::holds_alternative<PyValue>(r)) << "protocol " << 4 + i << ": " << std::get<std::string>(r);
    EXPECT_EQ(printout(std::get<PyValue>(r), version_of(rest),
                       {{"OrderedDict([('a', 1), ('b', [2])])", "OrderedDict({'a': 1, 'b': [2]})"}}),
              rest)
        << "protocol " << 4 + i;
  }
}

// ---------------------------------------------------------------------------------------------------
// The classes Robot Framework's standard libraries return and take (issue #23 item 6): complex,
// pathlib's POSIX paths, XML elements and Secret.

PyElement element(std::string tag, std::vector<std::pair<std::string, std::string>> attrib = {},
                  std::optional<std::string> text = std::nullopt, std::optional<std::string> tail = std::nullopt,
                  std::vector<PyElement> children = {}) {
  return PyElement{std::move(tag), std::move(attrib), std::move(text), std::move(tail), std::move(children)};
}

// XML's Parse XML of <root xmlns:n="urn:x" a="1"><n:item id="1">one</n:item>between<item id="2">two<sub/>tail</item></root>
PyElement parsed_root() {
  return element("root", {{"a", "1"}}, std::nullopt, std::nullopt,
                 {element("{urn:x}item", {{"id", "1"}}, "one", "between"),
                  element("item", {{"id", "2"}}, "two", std::nullopt, {element("sub", {}, std::nullopt, "tail")})});
}

// What CPython 3.8 to 3.13 write for it with the C accelerator (see pickle_test.cpp), and for Secret('s3cr3t').
const std::string kElementC = from_hex(
    "8004955d010000000000008c15786d6c2e65747265652e456c656d656e7454726565948c07456c656d656e749493942981947d94288c03"
    "746167948c04726f6f74948c095f6368696c6472656e945d942868022981947d94288c03746167948c0b7b75726e3a787d6974656d948c"
    "095f6368696c6472656e945d948c06617474726962947d948c026964948c013194738c0474657874948c036f6e65948c047461696c948c"
    "076265747765656e94756268022981947d94288c03746167948c046974656d948c095f6368696c6472656e945d9468022981947d94288c"
    "03746167948c03737562948c095f6368696c6472656e945d948c06617474726962947d948c0474657874944e8c047461696c948c047461"
    "696c947562618c06617474726962947d9468118c013294738c0474657874948c0374776f948c047461696c944e7562658c066174747269"
    "62947d948c0161946812738c0474657874944e8c047461696c944e75622e");
const std::string kSecret = from_hex(
    "80049539000000000000008c12726f626f742e7574696c732e736563726574948c065365637265749493942981947d948c0576616c7565"
    "948c067333637233749473622e");

TEST(PickleValueStandardLibraries, EncoderWritesWhatCPythonWrote) {
  EXPECT_EQ(decoded(kElementC), PyValue(parsed_root()));
  // The same opcodes after the frame's length, but where CPython shares one interned str (the key 'id',
  // the value '1'), the encoder writes it again.
  std::string same = kElementC;
  for (const auto& [shared, again] : {std::pair{"h\x11", "\x8c\x02id\x94"}, std::pair{"h\x12", "\x8c\x01" "1\x94"}})
    same.replace(same.find(shared), 2, again);
  EXPECT_EQ(decoded(encode_pickle(parsed_root())), PyValue(parsed_root()));
  EXPECT_EQ(to_hex(encode_pickle(parsed_root()).substr(11)), to_hex(same.substr(11)));
  EXPECT_EQ(decoded(kSecret), PyValue(PySecret{"s3cr3t"}));
  EXPECT_EQ(to_hex(encode_pickle(PySecret{"s3cr3t"})), to_hex(kSecret));
  // complex(1, 2), PosixPath('/tmp/a b') and PurePosixPath('a/b'), by CPython 3.11
  EXPECT_EQ(encode_pickle_hex(PyComplex{1, 2}),
            "8004952e000000000000008c086275696c74696e73948c07636f6d706c6578949394473ff0000000000000474000000000000000"
            "869452942e");
  EXPECT_EQ(encode_pickle_hex(PyPath{"/tmp/a b"}),
            "8004952d000000000000008c07706174686c6962948c09506f736978506174689493948c012f948c03746d70948c0361206294"
            "879452942e");
}

TEST(PickleValueStandardLibraries, RoundTrips) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const PyComplex& c : {PyComplex{1, 2}, PyComplex{0, 0}, PyComplex{-0.0, -0.0}, PyComplex{inf, -inf},
                             PyComplex{1e300, 5e-324}})
    expect_round_trip(c);
  EXPECT_EQ(py_repr(decoded(encode_pickle(PyComplex{nan, 1}))), "(nan+1j)");
  for (const char* path : {".", "/", "//", "//x/y", "/tmp/a b", "a/b/c/d/e", "relative", "/\xc3\xa4/\xf0\x9f\x98\x80"}) {
    expect_round_trip(PyPath{path});
    expect_round_trip(PyPath{path, true});
  }
  expect_round_trip(parsed_root());
  expect_round_trip(PySecret{""});
  expect_round_trip(PySecret{"p\xc3\xa4ss \x01"});
  // many children (APPENDS in batches of 1000), elements deep down to the checker's depth (two levels
  // each), inside containers and next to other values
  PyElement wide = element("wide");
  for (int i = 0; i < 2500; ++i) wide.children.push_back(element("c" + std::to_string(i), {{"i", std::to_string(i)}}));
  expect_round_trip(wide);
  PyElement deep = element("leaf");
  for (int i = 0; i < 63; ++i) deep = element("level", {}, "t", std::nullopt, {std::move(deep)});  // 64 elements
  expect_round_trip(deep);
  EXPECT_THROW(encode_pickle(element("top", {}, std::nullopt, std::nullopt, {deep})), std::invalid_argument);
  expect_round_trip(PyList{{parsed_root(), PyComplex{1, 2}, PyPath{"/x"}, PySecret{"s"},
                            PyDict{{{"path", PyPath{"a"}}, {PyPath{"k"}, PyComplex{0, 1}}}}}});
}

TEST(PickleValueStandardLibraries, PathsAsPathlibParsesThem) {
  // PosixPath(*segments), as 3.13 pickles it (the raw segments); str() from CPython 3.11
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{}, "."},
      {{""}, "."},
      {{"."}, "."},
      {{"a", "/b", "c/./d//"}, "/b/c/d"},
      {{"//x", "y"}, "//x/y"},
      {{"///x"}, "/x"},
      {{"a/", "b"}, "a/b"},
      {{"a", ""}, "a"},
      {{"..", "x/../y"}, "../x/../y"},
      {{"/", "//z"}, "//z"},
  };
  for (const auto& [segments, text] : cases) {
    std::string args = kMark;
    for (const auto& s : segments) args += str(s);
    const PyValue v = decoded(P4 + global("pathlib._local", "PosixPath") + args + "t" + kReduce + kStop);
    EXPECT_EQ(v, PyValue(PyPath{text})) << text;
  }
}

TEST(PickleValueStandardLibraries, KeysAsPythonHashesThem) {
  // complex(1, 0) == 1 == 1.0; PosixPath('a') == PurePosixPath('a')
  const std::string complex_one = global("builtins", "complex") + int1(1) + int1(0) + kTuple2 + kReduce;
  EXPECT_EQ(decoded(P4 + kEmptyDict + int1(1) + str("int") + kSetItem + complex_one + str("complex") + kSetItem + kStop),
            PyValue(PyDict{{{1, "complex"}}}));
  const std::string pure = global("pathlib", "PurePosixPath") + str("a") + kTuple1 + kReduce;
  const std::string posix = global("pathlib", "PosixPath") + str("a/") + kTuple1 + kReduce;
  EXPECT_EQ(decoded(P4 + kEmptySet + kMark + pure + posix + kAddItems + kStop), PyValue(PySet{{PyPath{"a", true}}}));
  EXPECT_THROW(encode_pickle(PySet{{PySecret{"s"}}}), std::invalid_argument);
  EXPECT_THROW(encode_pickle(PyDict{{{parsed_root(), 1}}}), std::invalid_argument);
}

TEST(PickleValueStandardLibraries, ReprAndStr) {
  EXPECT_EQ(py_repr(PyComplex{1, 2}), "(1+2j)");
  EXPECT_EQ(py_repr(PyComplex{0, 2}), "2j");
  EXPECT_EQ(py_repr(PyComplex{0, -1.5}), "-1.5j");
  EXPECT_EQ(py_repr(PyComplex{-0.0, 1}), "(-0+1j)");
  EXPECT_EQ(py_repr(PyComplex{1.5, -0.0}), "(1.5-0j)");
  EXPECT_EQ(py_repr(PyComplex{1e16, std::numeric_limits<double>::infinity()}), "(1e+16+infj)");
  EXPECT_EQ(py_str(PyComplex{1, 2}), "(1+2j)");
  EXPECT_EQ(py_repr(PyPath{"/tmp/it's"}), R"(PosixPath("/tmp/it's"))");
  EXPECT_EQ(py_repr(PyPath{"a", true}), "PurePosixPath('a')");
  EXPECT_EQ(py_str(PyPath{"/tmp/a b"}), "/tmp/a b");
  EXPECT_EQ(py_repr(PySecret{"hidden"}), "Secret(value=<secret>)");
  EXPECT_EQ(py_str(PySecret{"hidden"}), "<secret>");
  EXPECT_EQ(py_repr(PyList{{PySecret{"hidden"}}}), "[Secret(value=<secret>)]");
  // Python adds " at 0x...": the address of the object, which no copy has
  EXPECT_EQ(py_repr(parsed_root()), "<Element 'root'>");
}

// The real CPython reads what the encoder writes for these classes, and the decoder reads what it writes.
TEST(PickleValueCPython, StandardLibraryClassesBothWays) {
  const auto python = find_python3();
  ASSERT_TRUE(python) << "python3 is not on PATH (Debian's python3 package is one of the project's dependencies)";
  // Secret needs Robot Framework, which the unit tests do not assume: its bytes are CPython's above.
  PyElement root = parsed_root();
  root.children.push_back(element("empty", {{"k", ""}}, "", ""));
  const PyValue v = PyList{{PyComplex{1, 2}, PyComplex{0, -1}, PyComplex{-0.0, 0.5},
                            PyComplex{1e16, std::numeric_limits<double>::infinity()}, PyPath{"/tmp/a b"},
                            PyPath{"a/b", true}, PyPath{"."}, PyPath{"//x/y"}}};
  const std::string script = std::string(kPrintScript) + R"(
import pickle, sys, xml.etree.ElementTree as ET
values, element = pickle.loads(bytes.fromhex(open(sys.argv[1]).read()))
printout(values)
sys.stdout.buffer.write(b"\0" + ET.tostring(element))
)";
  const auto out = run_python(*python, script, encode_pickle_hex(PyList{{v, root}}));
  ASSERT_TRUE(out) << "python3 failed to unpickle the encoder's output";
  const auto nul = out->rfind('\0');
  EXPECT_EQ(out->substr(0, nul), printout(v, version_of(*out), {}));
  EXPECT_EQ(out->substr(nul + 1),
            R"(<root xmlns:ns0="urn:x" a="1"><ns0:item id="1">one</ns0:item>between<item id="2">two<sub />tail</item>)"
            R"(<empty k="" /></root>)");

  // The other way: CPython 3.8 to 3.13 write these the same (pathlib in 3.13: see PathsAsPathlibParsesThem);
  // the pure-Python ElementTree writes a state dict of its own order, without unset text and tail.
  const std::string writer = R"(
import pathlib, pickle, sys
def dump(v): sys.stdout.buffer.write(pickle.dumps(v, protocol=4).hex().encode() + b"\n")
dump([1+2j, complex(0, -1), pathlib.PosixPath('/tmp', 'a b'), pathlib.PurePosixPath('a') / 'b', pathlib.PosixPath()])
X = '<root xmlns:n="urn:x" a="1"><n:item id="1">one</n:item>between<item id="2">two<sub/>tail</item></root>'
import xml.etree.ElementTree as ET
dump(ET.fromstring(X))
sys.modules['_elementtree'] = None
del sys.modules['xml.etree.ElementTree']
import xml.etree.ElementTree as PET
assert not hasattr(PET.Element, '__setstate__')
dump(PET.fromstring(X))
)";
  const auto written = run_python(*python, writer, "");
  ASSERT_TRUE(written) << "python3 failed";
  std::vector<std::string> lines;
  std::istringstream in(*written);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  auto read = [](const std::string& hex) {
    auto r = decode_pickle_hex(hex);
    if (auto* why = std::get_if<std::string>(&r)) {
      ADD_FAILURE() << *why;
      return PyValue();
    }
    return std::get<PyValue>(std::move(r));
  };
  EXPECT_EQ(read(lines[0]), PyValue(PyList{{PyComplex{1, 2}, PyComplex{0, -1}, PyPath{"/tmp/a b"}, PyPath{"a/b", true},
                                            PyPath{"."}}}));
  EXPECT_EQ(read(lines[1]), PyValue(parsed_root()));
  EXPECT_EQ(read(lines[2]), PyValue(parsed_root()));
}

}  // namespace
