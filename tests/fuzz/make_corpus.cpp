// fuzz_make_corpus: writes the seed corpora of the fuzz targets, one file per seed.
//
//   fuzz_make_corpus OUT_DIR DATA_DIR CONFIG_DIR
//
// OUT_DIR/fuzz_frame_reader  every recorded body framed as the peers framed it, each connection's
//                            stream in both directions (strict, lenient, split into chunks), and
//                            hand-made framing faults
// OUT_DIR/fuzz_message       every recorded body, and a few hand-made messages
// OUT_DIR/fuzz_config        CONFIG_DIR/*.toml and a few hand-made configurations
// OUT_DIR/fuzz_pickle        DATA_DIR/pickles/benign/*.pkl and every {"__pickled__": hex} value in
//                            the traces, decoded
//
// DATA_DIR is the repository's test fixtures (tests/data: traces/*.jsonl, pickles/benign/*.pkl). If it
// is absent, the hand-made seeds are still written.
// A C++ tool rather than a script because trace bodies are JSON-escaped strings.
#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

class Corpus {
 public:
  Corpus(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

  // Named after a hash of the content, so that running the tool again adds nothing twice.
  void add(std::string_view bytes) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
    char name[32];
    std::snprintf(name, sizeof name, "seed-%016llx", static_cast<unsigned long long>(h));
    if (!seen_.insert(name).second) return;
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::size_t size() const { return seen_.size(); }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::set<std::string> seen_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> files_with_extension(const fs::path& dir, std::string_view ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ext) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// As the real peers frame a body: the length counts the body exactly as it is.
std::string wire(std::string_view body) { return "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body); }

// fuzz_frame_reader's input: an options byte, chunk sizes, then the stream (see fuzz_frame_reader.cpp).
std::string frame_seed(bool lenient, unsigned preset, std::vector<unsigned char> chunks, std::string_view stream) {
  std::string out;
  out += static_cast<char>((lenient ? 1 : 0) | (preset << 1) | (chunks.size() << 3));
  out.append(chunks.begin(), chunks.end());
  out += stream;
  return out;
}

bool decode_hex(std::string_view hex, std::string& out) {
  if (hex.size() % 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out.clear();
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

void collect_pickles(const json::value& v, Corpus& pickles) {
  if (v.is_object()) {
    const auto& o = v.get_object();
    if (auto it = o.find("__pickled__"); it != o.end() && it->value().is_string()) {
      std::string bytes;
      if (decode_hex(it->value().get_string(), bytes)) pickles.add(bytes);
    }
    for (const auto& kv : o) collect_pickles(kv.value(), pickles);
  } else if (v.is_array()) {
    for (const auto& e : v.get_array()) collect_pickles(e, pickles);
  }
}

void add_handmade_frames(Corpus& frames) {
  const std::string body = "{\"jsonrpc\": \"2.0\", \"method\": \"robot/initialize\", \"id\": \"1\", \"params\": {}}\r\n";
  const std::vector<std::string> streams = {
      wire(body) + wire(body),
      "content-length: " + std::to_string(body.size()) + "\r\ncontent-type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body,
      "Content-Type: application/vscode-jsonrpc; charset=\"UTF8\"\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      "Content-Length: 2\r\nContent-Type: text/plain; charset=latin-1\r\n\r\n{}",
      "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
      "Content-Type: application/json\r\n\r\n{}",
      "Content-Length: 2\n\n{}",
      "Content-Length: 2\r\n\n\r\n{}",
      "Content-Length: 12345678901\r\n\r\n",
      "Content-Length: 4294967296\r\n\r\n",
      "Content-Length: -1\r\n\r\n{}",
      "Content-Length:    2   \r\nX-Other: y\r\n\r\n{}",
      "Content-Length: 0\r\n\r\n",
      ": 2\r\nContent-Length: 2\r\n\r\n{}",
      "hello from a print()\nContent-Length: 2\r\n\r\n{}",
      "Content-Lengthy stuff\r\n\r\nContent-Length: 2\r\n\r\n{}",
      "noise Content-Length: 2\r\n\r\n{}trailing Conte",
      std::string(100, 'x') + "\r\n\r\n" + wire(body),
  };
  for (const auto& s : streams) {
    for (bool lenient : {false, true}) {
      for (unsigned preset = 0; preset < 4; ++preset) frames.add(frame_seed(lenient, preset, {}, s));
      frames.add(frame_seed(lenient, 0, {1}, s));
      frames.add(frame_seed(lenient, 0, {3, 17, 5}, s));
    }
  }
  // Ten empty feeds after every byte: each next() looks again at a tail that may become a header name,
  // so the work bound has a term per feed (found by the fuzzer in CI, 2026-12-01).
  frames.add(frame_seed(true, 2, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, std::string(18, '\0') + "Content-Length: 1\n\n{}"));
}

void add_handmade_messages(Corpus& messages) {
  for (const char* m : {
           R"({"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{"library_token":"t","name":"k","args":[1,2.5,"x",null,true]}})",
           R"({"jsonrpc":"2.0","method":"robot/log","params":{"message":"m","level":"INFO","html":false}})",
           R"({"jsonrpc":"2.0","id":"7","result":{"return":{"__pickled__":"80049503000000000000004b012e"}}})",
           R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})",
           R"({"jsonrpc":"2.0","id":1.5e300,"result":null})",
           R"({"jsonrpc":"2.0","id":18446744073709551615,"method":"m"})",
           R"({"jsonrpc":"2.0","id":-9223372036854775808,"method":"m","params":[]})",
           R"({"jsonrpc":"2.0","id":{},"method":"m"})",
           R"({"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1}})",
           R"({"jsonrpc":"1.0","id":1,"method":"m"})",
           R"([{"jsonrpc":"2.0","method":"m"}])",
           R"({"jsonrpc":"2.0","id":1,"method":"m","params":5})",
           R"({"jsonrpc":"2.0","id":"\u0000\ud83d\ude00","method":"\u00e9"})",
           R"({"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}")",
           R"({"jsonrpc":"2.0","id":1,"id":2,"method":"m"})",
           // Texts the message model keeps byte for byte: number spellings, escapes, white space, unknown
           // fields, error data; and a lone surrogate escape, which classification refuses.
           R"({ "jsonrpc" : "2.0" , "id" : 1E+2 , "method" : "robot\/run_keyword" , "params" : {"args":[-0.0,18446744073709551617,1234567890123456789012345678901234567890]} } )",
           R"({"jsonrpc":"2.0","id":"\u00e9\/","result":"\ud800","x-extra":{"n":1e-400}})",
           R"({"jsonrpc":"2.0","id":7,"error":{"code":-32001.5,"message":"\"quoted\"","data":{"traceback":"\u0000"}}})",
       })
    messages.add(m);
}

void add_handmade_configs(Corpus& configs) {
  configs.add("[[library]]\nname = \"A\"\ncommand = [\"a\"]\n");
  configs.add(R"([gateway]
listen = ["tcp://0.0.0.0:8271", "tcp://[::1]:0", "tcp://localhost:65535"]
log_level = "debug"
drain_timeout = "1.5s"
max_message_bytes = 1024

[defaults]
startup_timeout = 30
shutdown_grace = "500ms"

[[library]]
name = "Calculator"
command = ["robot-example-calculator", "--flag"]
env = { A = "1", _B2 = "x" }
cwd = "."
startup_timeout = "2m"

[[library]]
name = "Other"
command = ["./venv/bin/python", "-m", "robot_jsonrpcremote_server", "--stdio", "Other"]
shutdown_grace = "1h"
)");
  configs.add("[library]\nname = \"A\"\ncommand = []\ncomand = [\"x\"]\n");
  configs.add("[gateway]\nlog_level = \"loud\"\nlisten = []\ndrain_timeout = \"-1s\"\n[[library]]\nname = \"\"\n");
  configs.add("[[library]]\nname = \"A B\"\ncommand = [\"\\u0000\"]\nenv = { \"1BAD\" = 2 }\n[[library]]\nname = \"A B\"\n");
}

// Protocol-4 pickles of 1, [] and {'a': 1}, for when DATA_DIR is absent.
void add_handmade_pickles(Corpus& pickles) {
  using namespace std::string_literals;
  pickles.add("\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x01."s);
  pickles.add("\x80\x04]\x94."s);
  pickles.add("\x80\x04}\x94\x8c\x01" "a\x94K\x01s."s);
}

// fuzz_xmlrpc's input: a byte choosing call (1) or response (0), then the document; shapes as Python's
// xmlrpc.client writes them, and a few hostile ones.
void add_handmade_xmlrpc(Corpus& xmlrpc) {
  const std::string prolog = "<?xml version='1.0'?>\n";
  const std::string values =
      "<value><string>a &amp; b</string></value><value><int>-7</int></value><value><i8>1099511627776</i8></value>"
      "<value><double>2.5</double></value><value><boolean>1</boolean></value><value><base64>AP9oaQ==</base64></value>"
      "<value><nil/></value><value><dateTime.iso8601>20240102T03:04:05</dateTime.iso8601></value><value>plain</value>"
      "<value><struct><member><name>k</name><value><array><data><value><int>1</int></value></data></array></value>"
      "</member></struct></value>";
  xmlrpc.add("\x01" + prolog + "<methodCall><methodName>run_keyword</methodName><params><param><value><string>Kw"
             "</string></value></param><param><value><array><data>" + values + "</data></array></value></param>"
             "</params></methodCall>");
  xmlrpc.add("\x01" + prolog + "<methodCall><methodName>get_library_information</methodName><params/></methodCall>");
  xmlrpc.add("\x00" + prolog + "<methodResponse><params><param><value><struct><member><name>status</name><value>"
             "<string>PASS</string></value></member><member><name>return</name><value><array><data>" + values +
             "</data></array></value></member><member><name>output</name><value><string>*INFO* hi\n*HTML* <b>x</b>"
             "</string></value></member></struct></value></param></params></methodResponse>");
  xmlrpc.add("\x00" + prolog + "<methodResponse><fault><value><struct><member><name>faultCode</name><value><int>1"
             "</int></value></member><member><name>faultString</name><value><string>No such method</string></value>"
             "</member></struct></value></fault></methodResponse>");
  xmlrpc.add("\x01<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aa\"><!ENTITY b \"&a;&a;\">]>"
             "<methodCall><methodName>&b;</methodName></methodCall>");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OUT_DIR DATA_DIR CONFIG_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out(argv[1]), data(argv[2]), config_dir(argv[3]);
  Corpus frames(out / "fuzz_frame_reader"), messages(out / "fuzz_message"), configs(out / "fuzz_config"),
      pickles(out / "fuzz_pickle"), xmlrpc(out / "fuzz_xmlrpc");
  add_handmade_xmlrpc(xmlrpc);

  add_handmade_frames(frames);
  add_handmade_messages(messages);
  add_handmade_configs(configs);
  add_handmade_pickles(pickles);
  for (const auto& file : files_with_extension(config_dir, ".toml")) configs.add(read_file(file));

  std::error_code ec;
  if (!fs::is_directory(data, ec)) {
    std::fprintf(stderr, "fuzz_make_corpus: %s is absent; hand-made seeds only\n", data.c_str());
  } else {
    for (const auto& file : files_with_extension(data / "traces", ".jsonl")) {
      // Each connection's stream per direction, in recorded order.
      std::map<std::string, std::string> streams;
      std::ifstream in(file);
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        json::error_code jec;
        auto record = json::parse(line, jec);
        if (jec || !record.is_object()) continue;
        const auto& o = record.get_object();
        auto* body = o.if_contains("body");
        if (!body || !body->is_string()) continue;
        std::string_view text = body->get_string();
        messages.add(text);
        frames.add(frame_seed(false, 0, {}, wire(text)));
        std::string key = json::serialize(o.contains("conn") ? o.at("conn") : json::value()) + "/" +
                          (o.contains("dir") ? json::serialize(o.at("dir")) : std::string());
        streams[key] += wire(text);
        auto parsed = json::parse(text, jec);
        if (!jec) collect_pickles(parsed, pickles);
      }
      for (const auto& [key, stream] : streams) {
        frames.add(frame_seed(false, 0, {}, stream));
        frames.add(frame_seed(true, 0, {7, 1, 200, 31}, "print() noise\n" + stream));
        frames.add(frame_seed(false, 1, {64, 13}, stream));
      }
    }
    for (const auto& file : files_with_extension(data / "pickles" / "benign", ".pkl")) pickles.add(read_file(file));
  }

  for (const Corpus* c : {&frames, &messages, &configs, &pickles, &xmlrpc})
    std::fprintf(stderr, "fuzz_make_corpus: %zu seeds in %s\n", c->size(), c->dir().c_str());
  return 0;
}
