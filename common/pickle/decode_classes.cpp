// What the allowlisted classes build: REDUCE's calls, and NEWOBJ and BUILD's objects.
#include "common/pickle/decode.hpp"

#include "common/log.hpp"
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

namespace rjg::pickle {

// An int argument (timedelta's) within +-2^100.
bool Values::int_arg(const Value& v, __int128& out) {
  if (v.tag == Tag::integer) {
    out = v.i;
    return true;
  }
  bool negative;
  Words w = words_from_twos_complement(v.text, negative);
  if (v.tag != Tag::bigint || bit_length(w) > 100)
    return fail("timedelta argument out of range (Python raises OverflowError)");
  unsigned __int128 m = 0;
  for (std::size_t i = w.size(); i-- > 0;) m = (m << 32) | w[i];
  out = negative ? -static_cast<__int128>(m) : static_cast<__int128>(m);
  return true;
}

bool Values::zone_arg(const std::vector<Value>& args, std::size_t i, std::optional<int>& offset, std::string& name) {
  if (args.size() <= i) return true;
  if (args[i].tag != Tag::timezone) return fail("internal error: tzinfo is not a timezone after the data-only check");
  const Zone& z = zones_[static_cast<std::size_t>(args[i].i)];
  offset = z.offset_seconds;
  name = std::string(z.name);
  return true;
}

bool Values::reduce(const Value& callable, const Value& args, Value& out) {
  if (callable.tag != Tag::cls || args.tag != Tag::tuple) return fail("internal error: REDUCE shape after the data-only check");
  return reduce_class(static_cast<Class>(callable.i), seqs_[static_cast<std::size_t>(args.i)].items, out);
}

// What cls(*a) is, for each class REDUCE may call.
bool Values::reduce_class(Class cls, const std::vector<Value>& a, Value& out) {
  const auto state = [&](std::size_t size) -> std::string_view {
    return !a.empty() && a[0].tag == Tag::bytes && a[0].text.size() == size ? a[0].text : std::string_view();
  };
  const auto byte = [](std::string_view s, std::size_t i) {
    return static_cast<int>(static_cast<unsigned char>(s[i]));
  };
  switch (cls) {
    case Class::dot_dict:
    case Class::ordered_dict:
      out = make_seq(Tag::dict, {}, cls == Class::dot_dict ? PyDict::Kind::dot_dict : PyDict::Kind::ordered_dict);
      return true;
    case Class::bytearray: {
      out = make(Tag::bytearray);
      if (!a.empty()) out.text = a[0].text;
      return true;
    }
    case Class::decimal: {
      auto d = a.size() == 1 && a[0].tag == Tag::str ? parse_decimal(a[0].text) : std::nullopt;
      if (!d)
        return fail(fmt::format("Decimal('{}') is not a number (Python raises InvalidOperation)",
                                log::printable(a.empty() ? std::string_view() : a[0].text, 80)));
      out = make_scalar(PyDecimal{decimal_text(*d)});
      return true;
    }
    case Class::datetime: {
      std::string_view s = state(10);
      if (s.empty()) return fail("internal error: datetime state after the data-only check");
      PyDateTime dt;
      dt.year = byte(s, 0) << 8 | byte(s, 1);
      dt.month = byte(s, 2) & 0x7f;
      dt.fold = byte(s, 2) >> 7;
      dt.day = byte(s, 3);
      dt.hour = byte(s, 4);
      dt.minute = byte(s, 5);
      dt.second = byte(s, 6);
      dt.microsecond = byte(s, 7) << 16 | byte(s, 8) << 8 | byte(s, 9);
      if (!valid_date(dt.year, dt.month, dt.day) || !valid_time(dt.hour, dt.minute, dt.second, dt.microsecond, 0))
        return fail(fmt::format("datetime state {} is not a valid datetime", log::printable(s)));
      if (!zone_arg(a, 1, dt.utc_offset_seconds, dt.tz_name)) return false;
      out = make_scalar(std::move(dt));
      return true;
    }
    case Class::date: {
      std::string_view s = state(4);
      if (s.empty()) return fail("internal error: date state after the data-only check");
      PyDate d{byte(s, 0) << 8 | byte(s, 1), byte(s, 2), byte(s, 3)};
      if (!valid_date(d.year, d.month, d.day))
        return fail(fmt::format("date state {} is not a valid date", log::printable(s)));
      out = make_scalar(d);
      return true;
    }
    case Class::time: {
      std::string_view s = state(6);
      if (s.empty()) return fail("internal error: time state after the data-only check");
      PyTime t;
      t.hour = byte(s, 0) & 0x7f;
      t.fold = byte(s, 0) >> 7;
      t.minute = byte(s, 1);
      t.second = byte(s, 2);
      t.microsecond = byte(s, 3) << 16 | byte(s, 4) << 8 | byte(s, 5);
      if (!valid_time(t.hour, t.minute, t.second, t.microsecond, 0))
        return fail(fmt::format("time state {} is not a valid time", log::printable(s)));
      if (!zone_arg(a, 1, t.utc_offset_seconds, t.tz_name)) return false;
      out = make_scalar(std::move(t));
      return true;
    }
    case Class::timedelta: {
      __int128 days, seconds, micros;
      if (a.size() != 3 || !int_arg(a[0], days) || !int_arg(a[1], seconds) || !int_arg(a[2], micros)) return false;
      PyTimedelta td;
      if (!normalize_timedelta(days, seconds, micros, td))
        return fail("timedelta beyond 999999999 days (Python raises OverflowError)");
      out = make_scalar(td);
      return true;
    }
    case Class::complex: {
      double parts[2] = {0, 0};
      for (std::size_t j = 0; j < 2; ++j) {
        if (j >= a.size()) return fail("internal error: complex arguments after the data-only check");
        if (a[j].tag == Tag::floating) parts[j] = a[j].f;
        else if (a[j].tag == Tag::integer) parts[j] = static_cast<double>(a[j].i);  // rounds as float(int)
        else return fail("complex() of an integer beyond 64 bits is not supported");
      }
      out = make_scalar(PyComplex{parts[0], parts[1]});
      return true;
    }
    case Class::posix_path:
    case Class::pure_posix_path: {
      std::vector<std::string_view> segments;
      for (const Value& part : a) {
        if (part.tag != Tag::str) return fail("internal error: path part after the data-only check");
        segments.push_back(part.text);
      }
      out = make_scalar(PyPath{posix_path_text(segments), cls == Class::pure_posix_path});
      return true;
    }
    case Class::element:
    case Class::secret: return fail("internal error: REDUCE on an object class after the data-only check");
    case Class::timezone: {
      const PyTimedelta* td = !a.empty() && a[0].tag == Tag::scalar
                                  ? scalars_[static_cast<std::size_t>(a[0].i)].get<PyTimedelta>()
                                  : nullptr;
      if (!td) return fail("internal error: timezone offset after the data-only check");
      const __int128 micros = (__int128{td->days} * 86400 + td->seconds) * 1000000 + td->microseconds;
      if (micros <= -kMicrosPerDay || micros >= kMicrosPerDay)
        return fail("timezone offset not strictly within a day (Python raises ValueError)");
      if (micros % 1000000 != 0) return fail("timezone offsets with microseconds are not supported");
      Zone z{static_cast<int>(micros / 1000000), {}};
      if (a.size() == 2) z.name = a[1].text;
      out = make(Tag::timezone);
      out.i = static_cast<std::int64_t>(zones_.size());
      zones_.push_back(z);
      return true;
    }
  }
  return fail("internal error: unknown class");
}

// NEWOBJ: a new Element or Secret; BUILD gives it its state dict.
bool Values::newobj(const Value& callable, const Value&, Value& out) {
  const auto cls = static_cast<Class>(callable.i);
  if (callable.tag != Tag::cls || (cls != Class::element && cls != Class::secret))
    return fail("internal error: NEWOBJ shape after the data-only check");
  out = make(cls == Class::element ? Tag::element : Tag::secret);
  out.i = static_cast<std::int64_t>(objects_.size());
  objects_.emplace_back();
  return true;
}

bool Values::build(const Value& object, const Value& state) {
  if (state.tag != Tag::dict || (object.tag != Tag::element && object.tag != Tag::secret))
    return fail("internal error: BUILD shape after the data-only check");
  objects_[static_cast<std::size_t>(object.i)] = state;
  return true;
}

}  // namespace rjg::pickle
