// Small assertions shared by the autograd tests: float64 leaves, expected errors with their
// kind and message, and element-by-element comparison against hand-computed values.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::testing {

/// got and want have one shape and dtype and the same values, bit for bit (compared as
/// doubles, which every dtype converts to exactly).
inline void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined());
  ASSERT_TRUE(want.defined());
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

/// Options for a float64 leaf that requires grad.
inline TensorOptions f64_grad() { return TensorOptions(DType::Float64).requires_grad(true); }

/// Runs f, expects an adjoint::Error of `kind`, and returns its message.
template <class F>
std::string error_message(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an adjoint::Error";
  return "";
}

/// Runs f, expects an adjoint::Error of `kind` whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << "kind " << to_string(e.kind()) << ": " << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected adjoint::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected an adjoint::Error, nothing was thrown";
}

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

/// t's elements, in row-major order, equal `want` within `tol`.
inline void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

}  // namespace adjoint::testing
