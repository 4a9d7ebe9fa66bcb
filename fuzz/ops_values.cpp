// The values behind an instruction's argument bytes; see ops_values.h.
#include "ops_values.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "fuzz_util.h"

namespace adjoint::fuzz {

// Scalars: every kind of number ops take beside tensors, specials included.
const double kDoubles[32] = {0,    1,     -1,   2,     -2,    0.5,    -0.5,  3,
                             1e-3, 10,    -100, kInf,  -kInf, kNaN,   1e300, -1e300,
                             1e19, 0.1,   1.5,  -0.0,  4,     1e-310, 7.25,  -3.75,
                             1e10, -1e19, 0.25, 65536, 1e-30, -2.5,   100,   9.3e18};
const int64_t kInts[8] = {
    0, 1, -1, 2, 3, -5, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};

// A double as a Scalar holds: Scalar(double) casts it to int64 too, which is undefined for
// NaN, infinities and magnitudes past int64 (a known bug, being fixed).
bool scalar_cast_ok(double v) { return std::isfinite(v) && std::fabs(v) < 9.2e18; }

double pick_double(uint8_t b) {
  double v = kDoubles[b & 31];
  // Also no subnormals: 1 / 1e-310 is inf.
  if (avoid("scalar-cast") && (!scalar_cast_ok(v) || (v != 0 && std::fabs(v) < 1e-300))) v = 2.5;
  return v;
}

Scalar pick_scalar(uint8_t b) {
  switch (b >> 6) {
    case 2:
      return Scalar(kInts[avoid("int-extremes") ? (b & 7) % 6 : b & 7]);
    case 3:
      return Scalar(static_cast<bool>(b & 1));
    default:
      return Scalar(pick_double(b));
  }
}

DType pick_dtype(uint8_t b) {
  constexpr DType kDTypes[4] = {DType::Bool, DType::Int64, DType::Float32, DType::Float64};
  return kDTypes[b & 3];
}

int64_t pick_size(uint8_t nibble) {
  if (nibble == 15 && !avoid("huge-shape")) return kHuge;  // numel overflow: a known bug
  return nibble % 5;
}

// Values of a given style: 0 small integers, 1 uniform in [-2, 2], 2 with specials (inf,
// nan, huge, tiny), 3 positive (for log, sqrt).
Tensor make_values(const Shape& shape, DType dtype, int style, uint64_t seed) {
  Rng rng(seed);
  const int64_t n = shape.numel();
  if (n < 0 || n > 4096) return zeros(shape, dtype);  // huge shapes: the factory decides
  if (dtype == DType::Int64) {
    std::vector<int64_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) {
      x = rng.below(7) - 3;
      // INT64_MIN/MAX: integer overflow in the kernels (reported).
      if (style == 2 && rng.below(4) == 0) x = kInts[rng.below(avoid("int-extremes") ? 6 : 8)];
      if (style == 3) x = rng.below(4);
    }
    return tensor(v, shape);
  }
  if (dtype == DType::Bool) {
    std::vector<bool> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = rng.below(2);
    return tensor(v, shape);
  }
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    switch (style) {
      case 0:
        x = static_cast<double>(rng.below(7) - 3);
        break;
      case 1:
        x = rng.uniform() * 4 - 2;
        break;
      case 2:
        x = rng.below(3) == 0 ? kDoubles[rng.below(32)] : rng.uniform() * 6 - 3;
        break;
      default:
        x = 0.1 + rng.uniform() * 3;
        break;
    }
  }
  return tensor(v, shape, dtype);
}

int64_t pick_dim(uint8_t b) { return static_cast<int64_t>(b % 9) - 4; }  // [-4, 4]

// Reduction dims: none (all), one or two, possibly out of range or repeated.
std::vector<int64_t> pick_dims(uint8_t b) {
  switch (b & 3) {
    case 0:
      return {};
    case 1:
    case 2:
      return {pick_dim(b >> 2)};
    default:
      return {pick_dim(b >> 2), pick_dim(b >> 5)};
  }
}

// A target shape for reshape/view/expand: often one that fits `x`, sometimes anything.
Shape pick_shape(const Tensor& x, uint8_t a, uint8_t b) {
  const int64_t n = x.numel();
  switch (a & 7) {
    case 0:
      return Shape{n};
    case 1:
      return Shape{-1};
    case 2:
      return n % 2 == 0 ? Shape{2, -1} : Shape{1, n};
    case 3: {
      Shape s = x.shape();  // x's shape with a dim of 1 somewhere
      s.insert(static_cast<std::size_t>(b) % (s.size() + 1), 1);
      return s;
    }
    case 4: {
      Shape s = x.shape();  // expand: prepend a dim, turn 1s into b's size
      s.insert(0, b % 4);
      for (auto& d : s)
        if (d == 1) d = (b >> 2) % 4;
      return s;
    }
    default: {
      Shape s;
      const int nd = (a >> 3) % 5;
      for (int i = 0; i < nd; ++i) {
        const int nib = (b >> (2 * i)) & 3;
        s.push_back(i == 0 && (a & 0x80) ? -1 : nib + (a >> 6));
      }
      if ((a & 0xc0) == 0xc0 && !avoid("huge-shape")) s.push_back(kHuge);  // numel overflow (known)
      return s;
    }
  }
}

// A tensor shaped like `shape`, or broadcastable to it (dims dropped or set to 1).
Tensor fresh_like(const Shape& shape, DType dtype, uint8_t how, uint8_t seed) {
  Shape s = shape;
  if (how & 1) {
    for (std::size_t i = 0; i < s.size(); ++i)
      if ((how >> (1 + i)) & 1) s[i] = 1;
  }
  if ((how & 0x40) && !s.empty()) s.erase(0);
  return make_values(s, dtype, (how >> 4) & 3, seed);
}

// int64 indices for a dim of size n: mostly valid, sometimes negative or past the end.
Tensor fresh_index(const Shape& shape, int64_t n, uint8_t seed) {
  Rng rng(seed);
  const int64_t numel = shape.numel();
  std::vector<int64_t> v(static_cast<std::size_t>(std::clamp<int64_t>(numel, 0, 4096)));
  for (auto& x : v) {
    x = rng.below(std::max<int64_t>(n, 1));
    if ((seed & 0xe0) == 0xe0) x = rng.below(n + 4) - 2;
  }
  if (numel < 0 || numel > 4096) return zeros(shape, DType::Int64);
  return tensor(v, shape);
}

Tensor fresh_bool(const Shape& shape, uint8_t how, uint8_t seed) {
  return fresh_like(shape, DType::Bool, how & 0x4f, seed);
}

int64_t size_at(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return 1;
  const int64_t d = ((dim % x.dim()) + x.dim()) % x.dim();
  return x.size(d);
}

// Whether an int64 tensor holds a value past 2^31 (see the int-extremes tag).
bool int_too_big(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::Int64 || t.numel() > 4096) return false;
  for (int64_t v : t.to_vector<int64_t>())
    if (v > (int64_t{1} << 31) || v < -(int64_t{1} << 31)) return true;
  return false;
}

// Under ADJOINT_FUZZ_AVOID_KNOWN: the ops and arguments that reach a known bug.
bool known_bool_kernel_bug(const Tensor& x) {
  return avoid("bool-unary") && x.defined() && x.dtype() == DType::Bool;
}

// A view of `base` picked by `how`: itself, a slice, a select, a transpose or an expand.
Tensor view_of(const Tensor& base, uint8_t how) {
  switch (how % 5) {
    case 1:
      return base.dim() > 0 ? base.slice(0, 0, std::nullopt, 1 + (how >> 3) % 2) : base;
    case 2:
      return base.dim() > 0 && base.size(0) > 0 ? base.select(0, (how >> 3) % base.size(0)) : base;
    case 3:
      return base.dim() > 1 ? base.transpose(0, 1) : base;
    case 4:
      return base.dim() > 0 ? base.narrow(-1, 0, base.size(-1) / 2) : base;
    default:
      return base;
  }
}

std::string brief(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << describe(t);
  if (t.requires_grad()) os << " rg";
  if (t.numel() > 0 && t.numel() <= 8) {
    os << " {";
    for (double v : t.detach().to(DType::Float64).to_vector<double>()) os << " " << v;
    os << " }";
  }
  return os.str();
}

}  // namespace adjoint::fuzz
