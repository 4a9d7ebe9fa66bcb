// Values for the op programs of fuzz_ops: the scalars, shapes, dims and tensors an
// instruction's argument bytes stand for, all deterministic in those bytes (a program run twice,
// or recomputed inside checkpoint(), sees the same ones). Definitions in ops_values.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::fuzz {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr int64_t kHuge = int64_t{1} << 40;

/// A tiny deterministic generator for tensor values (the program's bytes only seed it).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next() % uint64_t(n)); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

/// Scalars: every kind of number ops take beside tensors, specials included.
extern const double kDoubles[32];
extern const int64_t kInts[8];

/// Whether Scalar(v) is defined: Scalar(double) casts to int64 too (the known scalar-cast bug).
bool scalar_cast_ok(double v);
double pick_double(uint8_t b);
Scalar pick_scalar(uint8_t b);
DType pick_dtype(uint8_t b);
int64_t pick_size(uint8_t nibble);
/// Values of a style: 0 small integers, 1 uniform in [-2, 2], 2 with specials (inf, nan, huge,
/// tiny), 3 positive (for log, sqrt).
Tensor make_values(const Shape& shape, DType dtype, int style, uint64_t seed);

int64_t pick_dim(uint8_t b);
/// Reduction dims: none (all), one or two, possibly out of range or repeated.
std::vector<int64_t> pick_dims(uint8_t b);
/// A target shape for reshape/view/expand: often one that fits `x`, sometimes anything.
Shape pick_shape(const Tensor& x, uint8_t a, uint8_t b);
/// A tensor shaped like `shape`, or broadcastable to it (dims dropped or set to 1).
Tensor fresh_like(const Shape& shape, DType dtype, uint8_t how, uint8_t seed);
/// int64 indices for a dim of size n: mostly valid, sometimes negative or past the end.
Tensor fresh_index(const Shape& shape, int64_t n, uint8_t seed);
Tensor fresh_bool(const Shape& shape, uint8_t how, uint8_t seed);
/// The size of `x` along a possibly negative dim (1 for a 0-d tensor).
int64_t size_at(const Tensor& x, int64_t dim);
/// Whether an int64 tensor holds a value past 2^31 (see the int-extremes tag).
bool int_too_big(const Tensor& t);
/// Under the bool-unary tag: whether `x` is a bool tensor.
bool known_bool_kernel_bug(const Tensor& x);
/// A view of `base` picked by `how`: itself, a slice, a select, a transpose or a narrow.
Tensor view_of(const Tensor& base, uint8_t how);
/// "[2, 3] (float64) rg { ... }": a value in a trace.
std::string brief(const Tensor& t);

}  // namespace adjoint::fuzz
