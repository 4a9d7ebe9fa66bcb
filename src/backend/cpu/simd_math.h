// Vectorised transcendental kernels (exp, log, tanh, sigmoid, gelu, silu, erf, ..., the gelu
// gradients, softmax's row max and shifted exp) for contiguous float32 and float64 arrays,
// compiled once per instruction set with Google Highway and chosen at run time for the CPU at
// hand. Internal to the CPU backend: elementwise.cpp and softmax.cpp call them on their
// contiguous fast paths, and their scalar loops remain the reference.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/kernels.h"

namespace adjoint::kernels {

/// True for the kinds simd_unary computes: Neg, Relu and the scalar arithmetic (AddScalar,
/// MulScalar, RSubScalar, RDivScalar: one rounding each, so bitwise equal to the scalar loop),
/// Exp, Log, Log1p, Expm1, Sqrt, Rsqrt, Tanh, Erf, Sigmoid, Softplus, GeluErf, GeluTanh, Silu.
bool simd_unary_handles(Unary kind);
/// The same for a kind with its parameter: also PowScalar with a = 2 or 3 (x * x, x * x * x).
bool simd_unary_handles(Unary kind, double a);

/// out[i] = kind(in[i]) for i in [0, n), with the kind's parameters a and b as in unary().
/// `out` may equal `in`; neither needs any alignment. Returns false without writing anything
/// for a kind it does not handle.
bool simd_unary(Unary kind, const float* in, float* out, int64_t n, double a = 0, double b = 0);
bool simd_unary(Unary kind, const double* in, double* out, int64_t n, double a = 0, double b = 0);

/// A vectorised kernel of one kind: out[i] = kind(in[i]) with the kind's parameters already
/// rounded to T (as simd_unary rounds them), or out[i] = kind(pa(a[i]), pb(b[i])) with the
/// prologues pa and pb by the constants `pa` and `pb`; then its epilogue by `e`. Constants of
/// absent steps are ignored; any n, out may equal an input.
template <class T>
using SimdUnaryFn = void (*)(const T* in, T* out, size_t n, T a, T b, T e);
template <class T>
using SimdBinaryFn = void (*)(const T* a, const T* b, T* out, size_t n, T pa, T pb, T e);

/// Whether simd_binary_fn has kernels of `kind` with a prologue (on one operand): Add and Mul.
bool simd_binary_takes_prologue(Binary kind);

/// The kernel simd_unary (simd_binary) runs for `kind` on the instruction set chosen now, with
/// `epilogue` (and a prologue on operand a or b) added, or nullptr for a kind it does not handle
/// (or prologues simd_binary_takes_prologue refuses, or two). For a caller that runs the same
/// kinds over many short blocks (compile's fused loop): calling it directly skips the checks
/// and the dispatch of every call (about 7 ns of a 30 ns call on 512 floats). A kept pointer is
/// stale once simd_target_generation() has changed.
template <class T>
SimdUnaryFn<T> simd_unary_fn(Unary kind, double a = 0, ScalarStep epilogue = ScalarStep::None);
template <>
SimdUnaryFn<float> simd_unary_fn<float>(Unary kind, double a, ScalarStep epilogue);
template <>
SimdUnaryFn<double> simd_unary_fn<double>(Unary kind, double a, ScalarStep epilogue);
template <class T>
SimdBinaryFn<T> simd_binary_fn(Binary kind, ScalarStep epilogue = ScalarStep::None,
                               ScalarStep prologue_a = ScalarStep::None,
                               ScalarStep prologue_b = ScalarStep::None);
template <>
SimdBinaryFn<float> simd_binary_fn<float>(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                          ScalarStep prologue_b);
template <>
SimdBinaryFn<double> simd_binary_fn<double>(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                            ScalarStep prologue_b);

/// The kinds whose vectorised form is bitwise the scalar loop's (one rounding per
/// operation): a caller may take either, as is faster for its length.
bool simd_is_exact(Unary kind);
bool simd_is_exact(Binary kind);

/// True for the binary kinds simd_binary computes: Add, Sub, Mul, Div, Minimum, Maximum,
/// TanhBackward, SigmoidBackward, ReluBackward (bitwise equal to the scalar loop),
/// GeluTanhBackward, GeluErfBackward.
bool simd_binary_handles(Binary kind);

/// out[i] = kind(a[i], b[i]) for i in [0, n); `out` may equal a or b. Returns false without
/// writing anything for a kind it does not handle.
bool simd_binary(Binary kind, const float* a, const float* b, float* out, int64_t n);
bool simd_binary(Binary kind, const double* a, const double* b, double* out, int64_t n);

/// The largest of x[0, n): NaN if any element is NaN, -inf for n == 0.
float simd_max(const float* x, int64_t n);
double simd_max(const double* x, int64_t n);

/// x[0] + ... + x[n - 1] in double, as 16 interleaved running sums (element i into sum
/// i mod 16) added pairwise at the end (8 pairs, then 4, 2, 1): the same bits on every
/// instruction set (0 for n == 0).
double simd_sum_widened(const float* x, int64_t n);
double simd_sum_widened(const double* x, int64_t n);

/// simd_sum_widened's order without SIMD, the same bits: cheaper than a dispatched call for a
/// few elements. The running sums past the n-th stay +0, and adding +0 changes nothing here
/// (a sum that starts at +0 is never -0), so those adds are skipped: a row of 3 costs 2 adds.
template <class T>
double sum_widened_scalar(const T* x, int64_t n) {
  double sums[16];
  const int used = static_cast<int>(std::min<int64_t>(n, 16));
  for (int i = 0; i < used; ++i) sums[i] = 0.0 + x[i];
  for (int64_t i = 16; i < n; ++i) sums[i % 16] += x[i];
  for (int width = 8; width >= 1; width /= 2)
    for (int k = 0; k < width && k + width < used; ++k) sums[k] += sums[k + width];
  return used > 0 ? sums[0] : 0.0;
}

/// Elements per chunk of a floating-point sum (Note [Floating sums in chunks] in reduce.cpp).
constexpr int64_t kSumChunk = 512;
/// Rows per chunk of a floating-point sum over leading dims (the same note): each column is
/// summed in one double per chunk of rows, the chunks' sums then added in order.
constexpr int64_t kSumChunkRows = 256;

/// The step of a max (min) reduction in double, element by element as eager code folds: the
/// first NaN met stays, and of equal values (-0 and +0) the first met stays. So folding chunks
/// and then their results in order gives the same bits as folding every element in order.
inline double max_step(double a, double v) {
  return (v > a || v != v || a != a) ? (a != a ? a : v) : a;
}
inline double min_step(double a, double v) {
  return (v < a || v != v || a != a) ? (a != a ? a : v) : a;
}

/// The sum of x[0, n) (float or double) by one chunk: simd_sum_widened's value.
template <class T>
double chunk_sum(const T* x, int64_t n) {
  return n < 64 ? sum_widened_scalar(x, n) : simd_sum_widened(x, n);
}

/// acc plus the sums of x[0, n)'s chunks of kSumChunk elements (the last may be shorter),
/// added in order.
template <class T>
double add_chunk_sums(double acc, const T* x, int64_t n) {
  for (int64_t c = 0; c < n; c += kSumChunk) acc += chunk_sum(x + c, std::min(kSumChunk, n - c));
  return acc;
}
/// y[i] = exp(x[i] - shift) for i in [0, n); y may equal x.
void simd_exp_shifted(const float* x, float shift, float* y, int64_t n);
void simd_exp_shifted(const double* x, double shift, double* y, int64_t n);

// For tests, so each compiled instruction set can be checked on a CPU that has several.
/// Names of the instruction sets compiled in and supported by this CPU, best first.
std::vector<std::string> simd_targets();
/// Makes simd_unary use simd_targets()[index] until called again; -1 restores the best one.
void simd_pin_target_for_test(int index);
/// Name of the instruction set simd_unary uses now.
std::string simd_active_target();
/// Counts the calls of simd_pin_target_for_test: kernels fetched by simd_unary_fn or
/// simd_binary_fn at another count may belong to another instruction set.
int simd_target_generation();

}  // namespace adjoint::kernels
