// Per-row helpers shared by the softmax, masked softmax, cross-entropy and layer-norm kernels:
// sums in double with a fixed order (four partial sums, so the loops pipeline and vectorise,
// and results do not depend on the thread count) and a numerically stable softmax of one row.
#pragma once

#include <cstdint>

#include "backend/cpu/simd_math.h"

namespace adjoint::kernels {

/// sum(a[0, n)) in double.
template <class T>
double sum_double(const T* a, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(a[j + k]);
  for (; j < n; ++j) s[0] += static_cast<double>(a[j]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// sum(a[0, n) * b[0, n)) in double.
template <class T>
double dot_double(const T* a, const T* b, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k)
      s[k] += static_cast<double>(a[j + k]) * static_cast<double>(b[j + k]);
  for (; j < n; ++j) s[0] += static_cast<double>(a[j]) * static_cast<double>(b[j]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// y[0, n) = softmax(x[0, n)) for n > 0: the row's maximum subtracted before the SIMD exp, the
/// sum taken and inverted in double. A NaN anywhere makes the whole row NaN.
template <class T>
void softmax_row(const T* x, T* y, int64_t n) {
  const T m = simd_max(x, n);
  simd_exp_shifted(x, m, y, n);
  const double inv = 1.0 / sum_double(y, n);
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<T>(y[j] * inv);
}

}  // namespace adjoint::kernels
