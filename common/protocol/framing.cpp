#include "common/protocol/framing.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace rjg {
namespace {

constexpr std::string_view kContentLength = "content-length";
constexpr std::string_view kContentType = "content-type";

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string printable(std::string_view s) { return log::printable(s, 80); }

// Content-Type: application/vscode-jsonrpc; charset=utf-8 -> accepted if no charset or UTF-8.
std::optional<std::string> check_content_type(std::string_view value) {
  std::size_t pos = 0;
  while ((pos = value.find(';', pos)) != std::string_view::npos) {
    ++pos;
    auto param = value.substr(pos);
    param = param.substr(0, param.find(';'));
    param = trim(param);
    auto eq = param.find('=');
    if (eq == std::string_view::npos) continue;
    if (!iequals(trim(param.substr(0, eq)), "charset")) continue;
    auto charset = trim(param.substr(eq + 1));
    if (charset.size() >= 2 && charset.front() == '"' && charset.back() == '"')
      charset = charset.substr(1, charset.size() - 2);
    if (iequals(charset, "utf-8") || iequals(charset, "utf8")) return std::nullopt;
    return fmt::format("unsupported charset '{}' in Content-Type (only utf-8 is supported)", printable(charset));
  }
  return std::nullopt;
}

}  // namespace

void FrameReader::feed(std::string_view bytes) {
  if (start_ > 0 && (start_ >= buffer_.size() / 2 || buffer_.size() > (1u << 20))) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(bytes);
}

FrameReader::Result FrameReader::fail(std::string message) {
  failed_ = true;
  Result r;
  r.kind = Result::Kind::error;
  r.error = std::move(message);
  return r;
}

std::string FrameReader::skip_to_header() {
  std::string_view view(buffer_);
  view.remove_prefix(start_);
  // A header starts with a header name; look for the next "Content-Length" and drop what precedes it.
  std::size_t found = std::string_view::npos;
  for (std::size_t i = 0; i + kContentLength.size() <= view.size(); ++i) {
    if ((view[i] == 'C' || view[i] == 'c') && iequals(view.substr(i, kContentLength.size()), kContentLength)) {
      found = i;
      break;
    }
  }
  std::size_t drop;
  if (found != std::string_view::npos) {
    drop = found;
  } else {
    // Keep only the longest tail that could be the start of "Content-Length" split across reads;
    // drop everything before it (all of it when no tail qualifies).
    drop = view.size();
    for (std::size_t k = view.size() > kContentLength.size() ? view.size() - kContentLength.size() : 0;
         k < view.size(); ++k) {
      if (iequals(view.substr(k), kContentLength.substr(0, view.size() - k))) {
        drop = k;
        break;
      }
    }
  }
  std::string skipped(view.substr(0, drop));
  start_ += drop;
  return skipped;
}

FrameReader::Result FrameReader::next() {
  if (failed_) return fail("stream already failed");
  std::string skipped;

  for (;;) {
    std::string_view view(buffer_);
    view.remove_prefix(start_);
    if (view.empty()) {
      Result r;
      r.skipped = std::move(skipped);
      return r;
    }

    if (mode_ == Mode::lenient) {
      // Anything that does not begin like a header is noise (a stray print on the worker's stdout).
      bool header_like = false;
      auto probe = view.substr(0, std::min(view.size(), kContentLength.size()));
      header_like = iequals(probe, kContentLength.substr(0, probe.size())) ||
                    iequals(probe.substr(0, std::min(probe.size(), kContentType.size())),
                            kContentType.substr(0, std::min(probe.size(), kContentType.size())));
      if (!header_like) {
        auto dropped = skip_to_header();
        // Nothing droppable: the rest may still become a header once more bytes arrive.
        if (dropped.empty()) {
          Result r;
          r.skipped = std::move(skipped);
          return r;
        }
        skipped += dropped;
        continue;
      }
    }

    auto end = view.find("\r\n\r\n");
    if (end == std::string_view::npos) {
      if (view.size() > limits_.max_header_bytes) {
        if (mode_ == Mode::lenient) {
          skipped += std::string(view.substr(0, 1));
          ++start_;
          skipped += skip_to_header();
          continue;
        }
        return fail(fmt::format("header block longer than {} bytes without an empty line", limits_.max_header_bytes));
      }
      // A bare LF inside what should be a header is a framing fault we can report early.
      // Every LF so far must close a CRLF, on any header line: else the frame would never complete.
      if (mode_ == Mode::strict) {
        for (auto lf = view.find('\n'); lf != std::string_view::npos; lf = view.find('\n', lf + 1)) {
          if (lf == 0 || view[lf - 1] != '\r')
            return fail(fmt::format("header line ends with a bare LF: '{}'", printable(view.substr(0, lf + 1))));
        }
      }
      Result r;
      r.skipped = std::move(skipped);
      return r;
    }
    if (end + 4 > limits_.max_header_bytes) {
      if (mode_ == Mode::lenient) {
        skipped += view[0];
        ++start_;
        skipped += skip_to_header();
        continue;
      }
      return fail(fmt::format("header block longer than {} bytes", limits_.max_header_bytes));
    }

    // Parse the header lines.
    std::string_view headers = view.substr(0, end);
    std::optional<std::size_t> length;
    std::string problem;
    std::size_t pos = 0;
    while (problem.empty() && pos <= headers.size()) {
      auto eol = headers.find("\r\n", pos);
      auto line = headers.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
      pos = eol == std::string_view::npos ? headers.size() + 1 : eol + 2;
      if (line.find('\n') != std::string_view::npos || line.find('\r') != std::string_view::npos) {
        problem = fmt::format("header line ends with a bare LF or CR: '{}'", printable(line));
        break;
      }
      auto colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0) {
        problem = fmt::format("malformed header line '{}'", printable(line));
        break;
      }
      auto name = line.substr(0, colon);
      auto value = trim(line.substr(colon + 1));
      if (iequals(name, kContentLength)) {
        if (length) {
          problem = "Content-Length appears more than once";
          break;
        }
        if (value.empty() || value.size() > 10 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          problem = fmt::format("Content-Length '{}' is not 1 to 10 decimal digits", printable(value));
          break;
        }
        std::size_t n = 0;
        for (char c : value) n = n * 10 + static_cast<std::size_t>(c - '0');
        if (n > limits_.max_message_bytes) {
          problem = fmt::format("Content-Length {} exceeds the limit of {} bytes", n, limits_.max_message_bytes);
          break;
        }
        length = n;
      } else if (iequals(name, kContentType)) {
        if (auto err = check_content_type(value)) {
          problem = *err;
          break;
        }
      }
      // Other headers are ignored, as the protocol says.
    }
    if (problem.empty() && !length) problem = "the header block has no Content-Length";
    if (!problem.empty()) {
      if (mode_ == Mode::lenient) {
        // Resynchronize at the next "Content-Length" after this one: the bad block may be a printed
        // line that merely contains the header name, glued to a real header.
        skipped += view[0];
        ++start_;
        skipped += skip_to_header();
        continue;
      }
      return fail(std::move(problem));
    }

    std::size_t total = end + 4 + *length;
    if (view.size() < total) {
      Result r;
      r.skipped = std::move(skipped);
      // Reserve once for a large body instead of growing step by step.
      if (buffer_.capacity() < start_ + total) buffer_.reserve(start_ + total);
      return r;
    }
    Result r;
    r.kind = Result::Kind::frame;
    r.body.assign(view.substr(end + 4, *length));
    r.skipped = std::move(skipped);
    start_ += total;
    if (start_ == buffer_.size()) {
      buffer_.clear();
      start_ = 0;
    }
    return r;
  }
}

std::string encode_frame(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size() + 32);
  out += "Content-Length: ";
  out += std::to_string(json_text.size() + 2);
  out += "\r\n\r\n";
  out += json_text;
  out += "\r\n";
  return out;
}

}  // namespace rjg
