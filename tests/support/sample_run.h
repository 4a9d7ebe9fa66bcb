// Helpers for tests that run registry samples two ways and compare (compiled or exported
// against eager): fresh leaves with a sample's values, the leaves that need a gradient, a fixed
// cotangent, and element-by-element equality within a relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/registry.h"

namespace adjoint::testing {

/// Fresh leaves with the sample's values (floating ones scaled by `scale`) and flags.
inline std::vector<Tensor> sample_leaves(const OpSample& s, double scale) {
  std::vector<Tensor> xs;
  for (const Tensor& x : s.inputs) {
    if (!x.defined()) {
      xs.push_back(x);
      continue;
    }
    Tensor d = is_floating(x.dtype()) ? (x.detach() * scale).detach() : x.detach().clone();
    if (x.requires_grad()) d.requires_grad_(true);
    xs.push_back(d);
  }
  return xs;
}

/// The defined tensors of xs that require grad.
inline std::vector<Tensor> needing_grad(const std::vector<Tensor>& xs) {
  std::vector<Tensor> r;
  for (const Tensor& x : xs)
    if (x.defined() && x.requires_grad()) r.push_back(x);
  return r;
}

/// A fixed cotangent shaped like y, with no two neighbours equal.
inline Tensor fixed_cotangent(const Tensor& y) {
  return sin(arange(y.numel(), TensorOptions(y.dtype())) * 0.37 + 0.2).reshape(y.shape());
}

/// Equal shapes, dtypes and values (NaN equal to NaN; undefined equal to undefined), within
/// `tolerance` relative to max(1, |want|); 0 is bit for bit.
inline void expect_same_values(const Tensor& got, const Tensor& want, double tolerance,
                               const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (tolerance == 0) {
      ASSERT_EQ(a[i], b[i]) << what << " at element " << i;
    } else {
      ASSERT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(b[i])))
          << what << " at element " << i;
    }
  }
}

}  // namespace adjoint::testing
