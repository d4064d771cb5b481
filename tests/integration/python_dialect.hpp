// Values as a Python peer reads them (common/pickle/python_json.hpp): a keyword's value must be in
// Python's dialect on the wire (a scalar, a flat list or dict of scalars, or one pickle), never nested
// JSON, which the stock client refuses; the tests then compare its content as plain JSON.
#pragma once

#include "common/pickle/python_json.hpp"
#include "tests/integration/harness.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace rjg::test {

// Whether the value travels as a pickle ({"__pickled__": "<hex>"}).
inline bool is_pickled(const boost::json::value& wire) {
  const auto* o = wire.if_object();
  return o && o->size() == 1 && o->contains("__pickled__");
}

// The wire value as plain JSON (a pickle decoded under the data-only policy); fails the test when the
// wire value is nested JSON.
inline boost::json::value python_value(const boost::json::value& wire) {
  EXPECT_TRUE(pickle::in_python_dialect(wire))
      << "nested JSON, which Python peers refuse (they read a scalar, a flat list or dict, or a pickle): "
      << boost::json::serialize(wire);
  return pickle::plain_json(boost::json::serialize(wire), "result");
}

// A keyword's value (RunKeywordResult.result) as plain JSON, checked as above.
inline boost::json::value python_value(const client::RpcReply& reply) { return python_value(keyword_value(reply)); }

}  // namespace rjg::test
