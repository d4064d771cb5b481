#include "common/protocol/framing.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

namespace rjg::protocol {
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

// ASCII lower case only: a locale must not change what a header name is.
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

// Whether "content-length" occurs in text (any case), counting the looks.
bool contains_content_length(std::string_view text, std::uint64_t& examined) {
  for (std::size_t i = 0; i + kContentLength.size() <= text.size(); ++i) {
    ++examined;
    if (lower(text[i]) != 'c') continue;
    std::size_t k = 1;
    while (k < kContentLength.size() && lower(text[i + k]) == kContentLength[k]) ++k;
    examined += k - 1;
    if (k == kContentLength.size()) return true;
  }
  return false;
}

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// The parts of a candidate's first line after "Content-Length", in order.
enum FirstLineStep { kColon, kSpaceBefore, kDigits, kSpaceAfter, kLineFeed };

}  // namespace

void FrameReader::feed(std::string_view bytes) {
  if (start_ > 0 && (start_ >= buffer_.size() / 2 || buffer_.size() > (1u << 20))) {
    buffer_.erase(0, start_);
    // Every position is an index into buffer_: move them with it (stale ones of other phases go to 0).
    for (std::size_t* at : {&cursor_, &line_, &body_}) *at = *at >= start_ ? *at - start_ : 0;
    start_ = 0;
  }
  buffer_.append(bytes);
}

FrameReader::Result FrameReader::fail(std::string message, std::string skipped) {
  if (!failed_) error_ = message;
  failed_ = true;
  Result r;
  r.kind = Result::Kind::error;
  r.error = std::move(message);
  r.skipped = std::move(skipped);
  return r;
}

bool FrameReader::drop(std::size_t to, std::string& skipped) {
  std::size_t n = to - start_;
  if (n == 0) return true;
  // Never more than one byte past the limit, however the input was split: the count in the error is
  // the same for every split, and what is logged as skipped is bounded too.
  bool over = stray_ + n > limits_.max_stray_bytes;
  if (over) n = limits_.max_stray_bytes + 1 - stray_;
  std::string_view dropped(buffer_.data() + start_, n);
  skipped.append(dropped);
  if (stray_sample_.size() < 80) stray_sample_.append(dropped.substr(0, 80 - stray_sample_.size()));
  stray_ += n;
  start_ += n;
  at_boundary_ = false;
  return !over;
}

bool FrameReader::header_fault(std::string message, std::string& skipped, Result& out) {
  if (mode_ == Mode::strict) {
    out = fail(std::move(message));
    return true;
  }
  // The lines before the bad one are given up; the bad line itself may hold the real header (a second
  // "Content-Length" line, or one glued to the end of a stray line).
  phase_ = Phase::scan;
  cursor_ = line_;
  at_boundary_ = false;
  if (!drop(line_, skipped)) {
    out = stray_error(std::move(skipped));
    return true;
  }
  return false;
}

FrameReader::Result FrameReader::stray_error(std::string skipped) {
  return fail(fmt::format("more than {} bytes of stray output since the last frame (not protocol frames); they "
                          "began with '{}'",
                          limits_.max_stray_bytes, printable(stray_sample_)),
              std::move(skipped));
}

void FrameReader::restart_after_frame() {
  stray_ = 0;
  stray_sample_.clear();
  at_boundary_ = true;
  have_length_ = false;
  if (start_ == buffer_.size()) {
    // Nothing left: a buffer that grew for a large frame is given back rather than kept per connection.
    if (buffer_.capacity() > kKeptCapacity) std::string().swap(buffer_);
    else buffer_.clear();
    start_ = 0;
  }
  cursor_ = line_ = body_ = start_;
  phase_ = mode_ == Mode::lenient ? Phase::scan : Phase::headers;
}

FrameReader::Result FrameReader::next() {
  if (failed_) return fail(error_.empty() ? "stream already failed" : error_);
  std::string skipped;
  auto need_more = [&] {
    Result r;
    r.skipped = std::move(skipped);
    return r;
  };
  auto too_much_stray = [&] { return stray_error(std::move(skipped)); };
  const char* const data = buffer_.data();

  for (;;) {
    const std::size_t end = buffer_.size();
    switch (phase_) {
      case Phase::scan: {
        if (cursor_ < start_) cursor_ = start_;
        if (at_boundary_) {
          // Right after a frame a header may begin with Content-Type, as the protocol allows.
          std::size_t n = std::min(end - start_, kContentType.size()), i = 0;
          while (i < n && lower(data[start_ + i]) == kContentType[i]) ++i;
          examined_ += std::min(i + 1, n);
          if (i == kContentType.size()) {
            at_boundary_ = false;
            have_length_ = false;
            line_ = cursor_ = start_;
            phase_ = Phase::headers;
            continue;
          }
          if (i == n) return need_more();  // could still become "Content-Type"
          at_boundary_ = false;
        }
        // The next "content-length". Its one 'c' is its first letter, so matched runs never overlap:
        // at most two looks per byte.
        std::size_t i = cursor_;
        bool found = false;
        for (; i < end; ++i) {
          ++examined_;
          if (lower(data[i]) != 'c') continue;
          std::size_t k = 1;
          while (k < kContentLength.size() && i + k < end && lower(data[i + k]) == kContentLength[k]) ++k;
          examined_ += k - 1;
          if (k == kContentLength.size()) {
            found = true;
            break;
          }
          if (i + k == end) break;  // a prefix at the end of what is there: it may still become one
        }
        if (!drop(i, skipped)) return too_much_stray();
        cursor_ = i;
        if (!found) return need_more();
        phase_ = Phase::first_line;
        cursor_ = i + kContentLength.size();
        step_ = kColon;
        digits_ = 0;
        length_ = 0;
        continue;
      }

      case Phase::first_line: {
        // ":" [ \t]* 1-10 digits (at most max_message_bytes) [ \t]* "\r\n", checked as bytes arrive.
        bool dead = false, done = false;
        for (; cursor_ < end && !dead && !done; ++cursor_) {
          ++examined_;
          const char c = data[cursor_];
          if (cursor_ + 1 - start_ > limits_.max_header_bytes) {
            dead = true;
            break;
          }
          switch (step_) {
            case kColon:
              if (c == ':') step_ = kSpaceBefore;
              else dead = true;
              break;
            case kSpaceBefore:
            case kDigits:
              if (c >= '0' && c <= '9') {
                step_ = kDigits;
                length_ = length_ * 10 + static_cast<std::size_t>(c - '0');
                if (++digits_ > 10 || length_ > limits_.max_message_bytes) dead = true;
              } else if (c == ' ' || c == '\t') {
                if (step_ == kDigits) step_ = kSpaceAfter;
              } else if (c == '\r' && step_ == kDigits) {
                step_ = kLineFeed;
              } else {
                dead = true;
              }
              break;
            case kSpaceAfter:
              if (c == '\r') step_ = kLineFeed;
              else if (c != ' ' && c != '\t') dead = true;
              break;
            case kLineFeed:
              if (c == '\n') done = true;
              else dead = true;
              break;
          }
          if (dead) break;  // the search goes on at this byte: it may start the next header
        }
        if (dead) {
          phase_ = Phase::scan;
          continue;
        }
        if (!done) return need_more();
        have_length_ = true;
        line_ = cursor_;
        phase_ = Phase::headers;
        continue;
      }

      case Phase::headers: {
        if (cursor_ < line_) cursor_ = line_;
        const void* found = cursor_ < end ? std::memchr(data + cursor_, '\n', end - cursor_) : nullptr;
        if (!found) {
          examined_ += end - cursor_;
          cursor_ = end;
          if (end - start_ > limits_.max_header_bytes) {
            Result out;
            if (header_fault(fmt::format("header block longer than {} bytes without an empty line",
                                         limits_.max_header_bytes),
                             skipped, out))
              return out;
            continue;
          }
          return need_more();
        }
        const std::size_t lf = static_cast<std::size_t>(static_cast<const char*>(found) - data);
        examined_ += lf + 1 - cursor_;
        cursor_ = lf + 1;
        std::string_view line(data + line_, lf - line_);
        examined_ += 2 * line.size();  // the CR search and the colon search below
        // What is wrong, if anything. Lenient mode drops the message, so it is only worded when strict:
        // stray output can hold a bad header line every 20 bytes.
        const bool strict = mode_ == Mode::strict;
        std::string problem;
        auto bad = [&](auto&& describe) { problem = strict ? describe() : std::string("-"); };
        if (lf + 1 - start_ > limits_.max_header_bytes) {
          bad([&] { return fmt::format("header block longer than {} bytes", limits_.max_header_bytes); });
        } else if (line.empty() || line.back() != '\r') {
          bad([&] {
            return fmt::format("header line ends with a bare LF: '{}'",
                               printable(std::string_view(data + start_, lf + 1 - start_)));
          });
        } else if (line.remove_suffix(1); line.find('\r') != std::string_view::npos) {
          bad([&] { return fmt::format("header line ends with a bare LF or CR: '{}'", printable(line)); });
        } else if (line.empty()) {
          if (!have_length_) {
            bad([] { return std::string("the header block has no Content-Length"); });
          } else {
            body_ = cursor_;
            phase_ = strict ? Phase::body : Phase::body_check;
            continue;
          }
        } else if (auto colon = line.find(':'); colon == std::string_view::npos || colon == 0) {
          bad([&] { return fmt::format("malformed header line '{}'", printable(line)); });
        } else {
          auto name = line.substr(0, colon);
          auto value = trim(line.substr(colon + 1));
          if (iequals(name, kContentLength)) {
            if (have_length_) {
              bad([] { return std::string("Content-Length appears more than once"); });
            } else if (value.empty() || value.size() > 10 ||
                       !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
              bad([&] { return fmt::format("Content-Length '{}' is not 1 to 10 decimal digits", printable(value)); });
            } else {
              std::size_t n = 0;
              for (char c : value) n = n * 10 + static_cast<std::size_t>(c - '0');
              if (n > limits_.max_message_bytes) {
                bad([&] {
                  return fmt::format("Content-Length {} exceeds the limit of {} bytes", n, limits_.max_message_bytes);
                });
              } else {
                length_ = n;
                have_length_ = true;
              }
            }
          } else if (!strict && contains_content_length(line, examined_)) {
            // Lenient: a line that merely looks like a header ("x: ...") with "Content-Length" inside is a
            // stray line with the real header glued to its end; searching on at this line finds it.
            problem = "-";
          } else if (iequals(name, kContentType)) {
            if (auto err = check_content_type(value)) problem = *err;
          }
          // Other headers are ignored, as the protocol says.
        }
        if (!problem.empty()) {
          Result out;
          if (header_fault(std::move(problem), skipped, out)) return out;
          continue;
        }
        line_ = cursor_;
        continue;
      }

      case Phase::body_check: {
        const std::size_t body_end = body_ + length_;
        if (cursor_ < body_) cursor_ = body_;
        bool json_like = false, decided = false;
        for (; cursor_ < std::min(end, body_end); ++cursor_) {
          ++examined_;
          if (is_json_space(data[cursor_])) continue;
          json_like = data[cursor_] == '{' || data[cursor_] == '[';
          decided = true;
          break;
        }
        if (!decided && cursor_ == body_end) decided = true;  // empty, or only whitespace
        if (!decided) return need_more();
        if (json_like) {
          phase_ = Phase::body;
          continue;
        }
        // Not a message: the header was stray output. Its body may hold the real header.
        if (!drop(body_, skipped)) return too_much_stray();
        phase_ = Phase::scan;
        cursor_ = body_;
        continue;
      }

      case Phase::body: {
        const std::size_t total = body_ + length_;
        if (end < total) {
          // Reserve once for a large body instead of growing step by step.
          if (buffer_.capacity() < total) buffer_.reserve(total);
          return need_more();
        }
        Result r;
        r.kind = Result::Kind::frame;
        r.body.assign(data + body_, length_);
        r.skipped = std::move(skipped);
        start_ = total;
        restart_after_frame();
        return r;
      }
    }
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

}  // namespace rjg::protocol
