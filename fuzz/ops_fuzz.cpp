// libFuzzer target for the op API: the input is a small program (format in ops_program.h) over
// a few input tensors of random small shapes (empty and 0-d included) and dtypes. It runs the
// program, then backward, sometimes with create_graph and a second backward through the
// gradients, sometimes inside checkpoint() (and then again without, comparing gradients),
// sometimes with forward-mode tangents (make_dual in a DualLevel, and transforms' jvp).
// adjoint::Error is an accepted outcome for any op; an internal error, another exception type,
// a sanitizer report or a broken invariant (a gradient shaped unlike its input, a checkpointed
// gradient differing from the plain one) is a finding. Seeds: fuzz/corpus/ops.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "fuzz_util.h"
#include "ops_program.h"

namespace {

using namespace adjoint;
using namespace adjoint::fuzz;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kHuge = int64_t{1} << 40;
constexpr std::size_t kMaxValues = 96;  // slots a program may fill

// A tiny deterministic generator for tensor values (the program's bytes only seed it).
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

// Scalars: every kind of number ops take beside tensors, specials included.
constexpr double kDoubles[32] = {0,    1,     -1,   2,     -2,    0.5,    -0.5,  3,
                                 1e-3, 10,    -100, kInf,  -kInf, kNaN,   1e300, -1e300,
                                 1e19, 0.1,   1.5,  -0.0,  4,     1e-310, 7.25,  -3.75,
                                 1e10, -1e19, 0.25, 65536, 1e-30, -2.5,   100,   9.3e18};
constexpr int64_t kInts[8] = {
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

// What the run_op calls of one program did that the forward/reverse identity check must know:
// ops after which J t and J^T c are no longer one linear map and its transpose.
struct RunInfo {
  bool linear_ok = true;  // no hook scaling a gradient, no grad-mode flip, no detach, ...
  bool float32 = false;   // some value was float32: a looser tolerance
};

// What one run of a program sees and makes.
struct Machine {
  std::vector<Tensor> values;  // inputs first, then each op's results
  Generator gen{1234};         // dropout and random factories: the same draws on a rerun
  // Whether the program runs inside checkpoint(), either this run or the run it is compared
  // with: ops that do not belong inside one are left out of both.
  bool checkpoint_mode = false;
  bool create_graph = false;
  int errors = 0;
  RunInfo info;
  std::vector<Tensor> inputs;

  // Operands: mostly recent values.
  const Tensor& pick(uint8_t b) const {
    const std::size_t n = values.size();
    return values[n - 1 - (b % n)];
  }
  void push(Tensor t) {
    if (t.defined() && values.size() < kMaxValues) values.push_back(std::move(t));
  }
};

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

void run_op(Machine& m, const uint8_t* instr) {
  if (trace()) {
    const uint8_t* b = instr;
    std::fprintf(stderr, "  %-14s %3d %3d %3d %3d %3d   x = %s\n", kOpNames[b[0] % kNumOps], b[1],
                 b[2], b[3], b[4], b[5], brief(m.pick(b[1])).c_str());
  }
  ByteReader r(instr, kInstrBytes);
  const uint8_t op = r.u8() % kNumOps;
  const uint8_t a0 = r.u8(), a1 = r.u8(), a2 = r.u8(), a3 = r.u8(), a4 = r.u8();
  // Copies (cheap handles): push() may move the values.
  const Tensor x = m.pick(a0);
  const Tensor y = m.pick(a1);
  if (x.dtype() == DType::Float32) m.info.float32 = true;
  switch (op) {
    case kDetach:
    case kRequiresGrad:
    case kHook:
    case kGradMode:
    case kInplaceScalar:
    case kInplaceTensor:
    case kInplaceClamp:
      // Detached values lose their tangent but not (for reverse mode) their place; a hook
      // scales one side only; in place on an input changes what the tangents belong to.
      if (op < kInplaceScalar || op > kInplaceClamp) {
        m.info.linear_ok = false;
      } else {
        for (const Tensor& in : m.inputs)
          if (in.shares_storage(x)) m.info.linear_ok = false;
      }
      break;
    default:
      break;
  }
  // Bool tensors through the unary kernels (abs, square, relu, sign, clamp_, and the scalar
  // arithmetic that shares them: x + true, add_(true)): a known heap overflow.
  if (avoid("bool-unary") && x.dtype() == DType::Bool &&
      ((op <= kPowScalarBase && op != kLogicalNot) || op == kScalarArith))
    return;
  // int64 arithmetic overflows in the kernels (reported): no op on int64 values past 2^31,
  // whose products and sums stay in range, and no int64 prod.
  if (avoid("int-extremes") &&
      (int_too_big(x) || int_too_big(y) || (op == kProd && x.dtype() == DType::Int64)))
    return;
  // Means over no elements scale by 1 / 0 = inf through a Scalar: the known UB cast.
  if (avoid("scalar-cast") && x.numel() == 0 &&
      (op == kMean || op == kVar || op == kStd || op == kMseLoss || op == kCrossEntropy ||
       op == kNllLoss || op == kBceWithLogits || op == kLayerNorm))
    return;
  switch (op) {
    case kNeg:
      return m.push(neg(x));
    case kExp:
      return m.push(exp(x));
    case kLog:
      return m.push(log(x));
    case kLog1p:
      return m.push(log1p(x));
    case kExpm1:
      return m.push(expm1(x));
    case kSqrt:
      return m.push(sqrt(x));
    case kRsqrt:
      return m.push(rsqrt(x));
    case kAbs:
      if (known_bool_kernel_bug(x)) return;  // bool through abs/square/relu/sign: known
      return m.push(abs(x));
    case kSign:
      if (known_bool_kernel_bug(x)) return;
      return m.push(sign(x));
    case kSin:
      return m.push(sin(x));
    case kCos:
      return m.push(cos(x));
    case kTan:
      return m.push(tan(x));
    case kTanh:
      return m.push(tanh(x));
    case kErf:
      return m.push(erf(x));
    case kSigmoid:
      return m.push(sigmoid(x));
    case kRelu:
      if (known_bool_kernel_bug(x)) return;
      return m.push(relu(x));
    case kSilu:
      return m.push(silu(x));
    case kSquare:
      if (known_bool_kernel_bug(x)) return;
      return m.push(square(x));
    case kLogicalNot:
      return m.push(logical_not(x));
    case kLeakyRelu:
      return m.push(leaky_relu(x, pick_double(a1)));
    case kGelu:
      return m.push(gelu(x, a1 & 1 ? GeluApproximation::Tanh : GeluApproximation::None));
    case kSoftplus:
      return m.push(softplus(x, pick_double(a1), pick_double(a2)));
    case kClamp: {
      std::optional<double> lo, hi;
      // Bounds are cast to the tensor's type: inf, NaN or huge into int64 is the known UB cast.
      if (!(a3 & 0x80)) lo = pick_double(a1);
      if (!(a3 & 0x40)) hi = pick_double(a2);
      if (known_bool_kernel_bug(x)) return;
      return m.push(clamp(x, lo, hi));
    }
    case kPowScalar:
      if (avoid("int-pow") && !x.is_floating_point()) return;  // integer overflow (reported)
      return m.push(pow(x, pick_scalar(a1)));
    case kPowScalarBase:
      // d/dx b^x = log(b) b^x: log(0) = -inf through a Scalar, the known UB cast.
      if (avoid("scalar-cast") && !(pick_scalar(a1).to_double() > 0)) return;
      return m.push(pow(pick_scalar(a1), x));
    case kTo:
      // NaN, inf and out-of-range floats to int64: an undefined cast (reported).
      if (avoid("float-to-int") && x.is_floating_point() && pick_dtype(a1) == DType::Int64) return;
      return m.push(x.to(pick_dtype(a1)));
    case kContiguous:
      return m.push(x.contiguous());
    case kClone:
      return m.push(x.clone());
    case kDetach:
      return m.push(x.detach());

    case kAdd:
    case kSub: {
      const Scalar alpha = a2 & 0x80 ? pick_scalar(a3) : Scalar(1);
      // add(int, int, alpha = a double): a known internal assert.
      if (avoid("int-alpha-assert") && alpha.is_floating() && !x.is_floating_point() &&
          !y.is_floating_point())
        return;
      return m.push(op == kAdd ? add(x, y, alpha) : sub(x, y, alpha));
    }
    case kMul:
      return m.push(x * y);
    case kDiv:
      return m.push(x / y);
    case kMinimum:
      return m.push(minimum(x, y));
    case kMaximum:
      return m.push(maximum(x, y));
    case kPow:
      // Integer pow overflows through a double-to-int64 cast (reported).
      if (avoid("int-pow") && !x.is_floating_point() && !y.is_floating_point()) return;
      return m.push(pow(x, y));
    case kCompare: {
      switch (a2 % 6) {
        case 0:
          return m.push(eq(x, y));
        case 1:
          return m.push(ne(x, y));
        case 2:
          return m.push(lt(x, y));
        case 3:
          return m.push(le(x, y));
        case 4:
          return m.push(gt(x, y));
        default:
          return m.push(ge(x, y));
      }
    }
    case kLogical:
      return m.push(a2 & 1 ? logical_or(x, y) : logical_and(x, y));
    case kWhere: {
      const Tensor c = m.pick(a2);
      const Tensor cond = c.dtype() == DType::Bool ? c : fresh_bool(x.shape(), a3, a4);
      if (a3 & 0x80) return m.push(where(cond, x, pick_scalar(a4)));
      return m.push(where(cond, x, y));
    }
    case kBinaryFresh: {
      const Tensor f = fresh_like(x.shape(), a3 & 0x80 ? x.dtype() : pick_dtype(a3), a2, a4);
      switch (a1 % 6) {
        case 0:
          return m.push(a3 & 1 ? f + x : x + f);
        case 1:
          return m.push(a3 & 1 ? f - x : x - f);
        case 2:
          return m.push(a3 & 1 ? f * x : x * f);
        case 3:
          return m.push(a3 & 1 ? f / x : x / f);
        case 4:
          return m.push(minimum(x, f));
        default:
          return m.push(maximum(f, x));
      }
    }
    case kScalarArith: {
      const Scalar s = pick_scalar(a2);
      // x / 0 and x / 1e-30 become x * inf, x * 1e30: a Scalar past int64, the known UB cast.
      if (avoid("scalar-cast") && a1 % 8 == 3 && !(std::fabs(s.to_double()) > 1e-18)) return;
      switch (a1 % 8) {
        case 0:
          return m.push(x + s);
        case 1:
          return m.push(x - s);
        case 2:
          return m.push(x * s);
        case 3:
          return m.push(x / s);
        case 4:
          return m.push(s + x);
        case 5:
          return m.push(s - x);
        case 6:
          return m.push(s * x);
        default:
          return m.push(s / x);
      }
    }
    case kCompareScalar: {
      const Scalar s = pick_scalar(a2);
      switch (a1 % 6) {
        case 0:
          return m.push(eq(x, s));
        case 1:
          return m.push(ne(x, s));
        case 2:
          return m.push(lt(x, s));
        case 3:
          return m.push(le(x, s));
        case 4:
          return m.push(gt(x, s));
        default:
          return m.push(ge(x, s));
      }
    }

    case kSum:
      return m.push(sum(x, pick_dims(a1), a2 & 1));
    case kMean:
      return m.push(mean(x, pick_dims(a1), a2 & 1));
    case kVar:
    case kStd: {
      // A correction >= the count divides by 0: Scalar(inf), the known UB cast.
      const int64_t correction = avoid("scalar-cast") ? 0 : (a2 >> 1) % 3;
      return m.push(op == kVar ? var(x, pick_dims(a1), correction, a2 & 1)
                               : adjoint::std(x, pick_dims(a1), correction, a2 & 1));
    }
    case kProd:
      return m.push(prod(x, pick_dims(a1), a2 & 1));
    case kMaxAll:
      return m.push(adjoint::max(x));
    case kMinAll:
      return m.push(adjoint::min(x));
    case kMaxDim:
    case kMinDim: {
      auto [v, i] = op == kMaxDim ? adjoint::max(x, pick_dim(a1), a2 & 1)
                                  : adjoint::min(x, pick_dim(a1), a2 & 1);
      m.push(i);
      return m.push(v);
    }
    case kAmax:
      return m.push(amax(x, pick_dims(a1), a2 & 1));
    case kAmin:
      return m.push(amin(x, pick_dims(a1), a2 & 1));
    case kLogsumexp:
      if (avoid("scalar-cast")) return;  // Scalar(-inf) inside logsumexp: a known UB cast
      return m.push(logsumexp(x, pick_dims(a1), a2 & 1));
    case kNorm: {
      // p = 1e-30 makes 1 / p = 1e30 a Scalar: the known UB cast.
      constexpr double kSafeP[4] = {1, 3, 0.5, 2};
      double p = a3 & 1 ? kDoubles[a3 >> 3] : 2.0;
      if (avoid("scalar-cast")) p = kSafeP[(a3 >> 3) & 3];
      return m.push(norm(x, p, pick_dims(a1), a2 & 1));
    }
    case kArgmax:
    case kArgmin: {
      std::optional<int64_t> dim;
      if (a2 & 2) dim = pick_dim(a1);
      return m.push(op == kArgmax ? argmax(x, dim, a2 & 1) : argmin(x, dim, a2 & 1));
    }

    case kMatmul:
      return m.push(matmul(x, y));
    case kMatmulFresh: {
      const int64_t k = x.dim() == 0 ? 1 : x.size(-1);
      Shape ws = a1 & 0x80 ? Shape{k} : Shape{k, static_cast<int64_t>(a1 % 4)};
      if ((a1 & 0x40) && x.dim() > 2) ws.insert(0, x.size(0));  // batched
      const Tensor w = make_values(ws, a3 & 0x80 ? x.dtype() : pick_dtype(a3), 1, a2);
      return m.push(a3 & 1 ? matmul(w.dim() > 1 ? w.transpose(-1, -2) : w, x) : matmul(x, w));
    }
    case kLinear: {
      const int64_t in = x.dim() == 0 ? 1 : x.size(-1);
      const int64_t out = a1 % 4;
      const Tensor w = make_values(Shape{out, in}, x.dtype(), 1, a3);
      const Tensor b = a2 & 1 ? make_values(Shape{out}, x.dtype(), 1, a4) : Tensor();
      return m.push(linear(x, w, b));
    }
    case kDot:
      return m.push(dot(x, y));
    case kOuter:
      return m.push(outer(x, y));

    case kReshape:
      return m.push(reshape(x, pick_shape(x, a1, a2)));
    case kView:
      return m.push(view(x, pick_shape(x, a1, a2)));
    case kPermute: {
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < x.dim(); ++i) dims.push_back(i);
      if (a1 & 1) std::reverse(dims.begin(), dims.end());
      if ((a1 & 2) && dims.size() > 1) std::rotate(dims.begin(), dims.begin() + 1, dims.end());
      if (a1 & 4) dims.push_back(pick_dim(a2));               // too many dims
      if ((a1 & 8) && !dims.empty()) dims[0] = pick_dim(a2);  // repeated or negative
      return m.push(permute(x, dims));
    }
    case kTranspose:
      return m.push(transpose(x, pick_dim(a1), pick_dim(a2)));
    case kT:
      return m.push(x.t());
    case kSlice: {
      std::optional<int64_t> start, end;
      if (a2 & 0x80) start = static_cast<int64_t>(a2 % 9) - 4;
      if (a3 & 0x80) end = static_cast<int64_t>(a3 % 9) - 4;
      return m.push(slice(x, pick_dim(a1), start, end, static_cast<int64_t>(a4 % 4)));
    }
    case kSelect:
      return m.push(select(x, pick_dim(a1), static_cast<int64_t>(a2 % 9) - 4));
    case kNarrow:
      return m.push(narrow(x, pick_dim(a1), static_cast<int64_t>(a2 % 7) - 2,
                           static_cast<int64_t>(a3 % 5) - 1));
    case kExpand:
      return m.push(a3 & 1 ? x.expand_as(y) : expand(x, pick_shape(x, a1, a2)));
    case kSqueeze:
      return m.push(a1 & 1 ? squeeze(x) : squeeze(x, pick_dim(a2)));
    case kUnsqueeze:
      return m.push(unsqueeze(x, pick_dim(a1)));
    case kFlatten:
      return m.push(flatten(x, pick_dim(a1), pick_dim(a2)));
    case kCat:
    case kStack: {
      std::vector<Tensor> ts = {x, a3 & 1 ? y : x.clone()};
      if (a3 & 2) ts.push_back(m.pick(a4));
      return m.push(op == kCat ? cat(ts, pick_dim(a2)) : stack(ts, pick_dim(a2)));
    }
    case kSplit:
    case kChunk: {
      std::vector<Tensor> parts;
      if (op == kChunk) {
        parts = chunk(x, static_cast<int64_t>(a1 % 5) - 1, pick_dim(a2));
      } else if (a3 & 1) {
        parts = split(x, std::vector<int64_t>{a1 % 3, a4 % 3}, pick_dim(a2));
      } else {
        parts = split(x, static_cast<int64_t>(a1 % 4) - 1, pick_dim(a2));
      }
      for (std::size_t i = 0; i < parts.size() && i < 2; ++i)
        m.push(parts[(a4 + i) % parts.size()]);
      return;
    }
    case kSumTo: {
      Shape s = x.shape();
      if ((a1 & 1) && !s.empty()) s.erase(0);
      for (std::size_t i = 0; i < s.size(); ++i)
        if ((a2 >> i) & 1) s[i] = 1;
      if (a1 & 2) s = pick_shape(x, a3, a4);
      return m.push(sum_to(x, s));
    }

    case kIndexSelect: {
      const int64_t dim = pick_dim(a1);
      const Tensor idx = y.dtype() == DType::Int64 && (a4 & 1)
                             ? y
                             : fresh_index(Shape{a2 % 4}, size_at(x, dim), a3);
      return m.push(index_select(x, dim, idx));
    }
    case kGather: {
      const int64_t dim = pick_dim(a1);
      Shape s = x.shape();
      if (!s.empty() && (a2 & 1)) s[(a2 >> 1) % s.size()] = std::min<int64_t>(1, s[0]);
      return m.push(gather(x, dim, fresh_index(s, size_at(x, dim), a3)));
    }
    case kScatterAdd: {
      const int64_t dim = pick_dim(a1);
      const Tensor idx = fresh_index(x.shape(), size_at(x, dim), a3);
      const Tensor src = a2 & 1 ? y : make_values(x.shape(), x.dtype(), 1, a4);
      return m.push(scatter_add(x, dim, idx, src));
    }
    case kIndexAdd: {
      const int64_t dim = pick_dim(a1);
      const int64_t k = a2 % 4;
      const Tensor idx = fresh_index(Shape{k}, size_at(x, dim), a3);
      Shape s = x.shape();
      if (!s.empty()) s[((dim % x.dim()) + x.dim()) % x.dim()] = k;
      const Tensor src = make_values(s, x.dtype(), 1, a4);
      // A 0-d input with several indices reads past a 0-d source (reported).
      if (avoid("index-add-0d") && x.dim() == 0) return;
      return m.push(index_add(x, dim, idx, src));
    }
    case kMaskedFill: {
      const Tensor mask = y.dtype() == DType::Bool && (a4 & 1) ? y : fresh_bool(x.shape(), a2, a3);
      const Scalar v = pick_scalar(a1);
      // masked_fill with a non-finite value (-inf) and NaN into integer tensors: known bugs.
      if (avoid("scalar-cast") && (!scalar_cast_ok(v.to_double()))) return;
      return m.push(masked_fill(x, mask, v));
    }
    case kEmbedding: {
      const int64_t rows = x.dim() == 0 ? 1 : x.size(0);
      const Tensor idx =
          y.dtype() == DType::Int64 && (a4 & 1) ? y : fresh_index(Shape{a2 % 3, a1 % 3}, rows, a3);
      return m.push(embedding(x, idx));
    }
    case kOneHot:
      return m.push(one_hot(x.dtype() == DType::Int64 ? x : fresh_index(Shape{a2 % 4}, 4, a3),
                            static_cast<int64_t>(a1 % 6) - 1));
    case kTril:
      return m.push(tril(x, static_cast<int64_t>(a1 % 7) - 3));
    case kTriu:
      return m.push(triu(x, static_cast<int64_t>(a1 % 7) - 3));

    case kSoftmax:
      return m.push(softmax(x, pick_dim(a1)));
    case kLogSoftmax:
      return m.push(log_softmax(x, pick_dim(a1)));
    case kMaskedSoftmax:
      // Not along the last dim it fills -inf through a Scalar: a known UB cast.
      if (avoid("scalar-cast") &&
          (x.dim() == 0 || (pick_dim(a1) != -1 && pick_dim(a1) != x.dim() - 1)))
        return;
      return m.push(masked_softmax(x, fresh_bool(x.shape(), a2, a3), pick_dim(a1)));
    case kCrossEntropy:
    case kNllLoss: {
      const int64_t n = x.dim() == 0 ? 0 : x.size(0);
      const int64_t c = x.dim() >= 2 ? x.size(1) : (x.dim() == 1 ? x.size(0) : 1);
      Tensor target = fresh_index(x.dim() >= 2 ? Shape{n} : Shape{}, c, a3);
      if (a2 & 0x10) target = target.masked_fill(fresh_bool(target.shape(), 0, a4), -100);
      if (a2 & 0x20) target = y;
      const auto red = static_cast<Reduction>(a2 % 3);
      int64_t ignore = a2 & 0x40 ? 0 : -100;
      // A mean over targets that are all ignored is 0 * NaN with NaN as a Scalar: the known
      // UB cast.
      if (avoid("scalar-cast") && red == Reduction::Mean) {
        if (a2 & 0x30) return;
        ignore = -100;
      }
      return m.push(op == kCrossEntropy ? cross_entropy(x, target, red, ignore)
                                        : nll_loss(x, target, red, ignore));
    }
    case kMseLoss:
    case kBceWithLogits: {
      const Tensor t = a3 & 1 ? y : make_values(x.shape(), x.dtype(), op == kMseLoss ? 1 : 3, a4);
      const auto red = static_cast<Reduction>(a2 % 3);
      return m.push(op == kMseLoss ? mse_loss(x, t, red)
                                   : binary_cross_entropy_with_logits(x, t.clamp(0, 1), red));
    }
    case kLayerNorm: {
      Shape ns;
      const int64_t k = a1 % 3;
      for (int64_t i = std::max<int64_t>(0, x.dim() - k); i < x.dim(); ++i) ns.push_back(x.size(i));
      if (a1 & 0x80) ns = pick_shape(x, a3, a4);
      // layer_norm over an empty normalized shape: a known bug in its backward.
      if (avoid("layer-norm-empty") && (ns.empty() || ns.numel() == 0)) return;
      const Tensor w = a2 & 1 ? make_values(ns, x.dtype(), 1, a3) : Tensor();
      const Tensor b = a2 & 2 ? make_values(ns, x.dtype(), 1, a4) : Tensor();
      const double eps = a2 & 4 ? pick_double(a2 >> 3) : 1e-5;
      return m.push(layer_norm(x, ns, w, b, eps));
    }
    case kDropout:
      return m.push(dropout(x, a1 & 0x80 ? pick_double(a1) : (a1 % 5) * 0.25, a2 & 1, &m.gen));

    case kInplaceScalar:
    case kInplaceTensor:
    case kInplaceClamp: {
      // On the value itself (a leaf that requires grad must refuse), a clone, or a view of
      // either; then both the base and the view go on being used.
      Tensor base = a1 & 0x80 ? x.clone() : x;
      Tensor v = view_of(base, a1);
      // In place on a recorded tensor that some node saved (itself as the operand, or an
      // earlier op's input): a reference cycle, leaked (reported). A fresh clone is saved
      // by nothing yet.
      if (avoid("inplace-saved-cycle") && op == kInplaceTensor && m.pick(a3).shares_storage(v))
        return;
      if (avoid("inplace-saved-cycle") && !(a1 & 0x80) &&
          ((v.requires_grad() && !v.is_leaf()) ||
           (op == kInplaceTensor && m.pick(a3).requires_grad())))
        return;
      // add_/sub_/mul_/div_(Scalar) on bool run the unary kernels: the known bool overflow.
      if (avoid("bool-unary") && op == kInplaceScalar && v.dtype() == DType::Bool && a2 % 6 < 4)
        return;
      if (op == kInplaceScalar) {
        const Scalar s = pick_scalar(a3);
        const bool int_target = !v.is_floating_point();
        switch (a2 % 6) {
          case 0:
            v.add_(s);
            break;
          case 1:
            v.sub_(s);
            break;
          case 2:
            v.mul_(s);
            break;
          case 3:
            // div_ by zero, and NaN or inf into integer tensors: known bugs.
            if (avoid("scalar-cast") && (!(std::fabs(s.to_double()) > 1e-18) || int_target)) return;
            v.div_(s);
            break;
          case 4:
            if (avoid("nan-fill-int") && int_target && !scalar_cast_ok(s.to_double())) return;
            v.fill_(s);
            break;
          default:
            v.zero_();
            break;
        }
      } else if (op == kInplaceTensor) {
        const Tensor o = m.pick(a3);
        switch (a2 % 5) {
          case 0:
          case 1: {
            const Scalar alpha = a4 & 0x80 ? pick_scalar(a4) : Scalar(1);
            if (avoid("int-alpha-assert") && alpha.is_floating() && !v.is_floating_point() &&
                !o.is_floating_point())
              return;
            a2 % 5 == 0 ? v.add_(o, alpha) : v.sub_(o, alpha);
            break;
          }
          case 2:
            v.mul_(o);
            break;
          case 3:
            if (avoid("nan-fill-int") && !v.is_floating_point()) return;  // div_ into ints: known
            v.div_(o);
            break;
          default:
            // Floats into int64 (NaN, inf, huge): an undefined cast (reported).
            if (avoid("float-to-int") && o.is_floating_point() && v.dtype() == DType::Int64) return;
            v.copy_(o);
            break;
        }
      } else {
        if (known_bool_kernel_bug(v)) return;  // clamp_ on bool: known
        std::optional<double> lo, hi;
        if (a4 & 1) lo = pick_double(a2);
        if (a4 & 2) hi = pick_double(a3);
        v.clamp_(lo, hi);
      }
      m.push(base);
      return m.push(v);
    }

    case kFactory: {
      const DType dt = pick_dtype(a3);
      const int64_t n = a2 % 5;
      switch (a1 % 10) {
        case 0:
          return m.push(zeros(Shape{n, a4 % 3}, dt));
        case 1:
          return m.push(ones(Shape{n}, dt));
        case 2: {
          const Scalar v = pick_scalar(a4);
          if (avoid("nan-fill-int") && !is_floating(dt) && !scalar_cast_ok(v.to_double())) return;
          return m.push(full(Shape{n}, v, dt));  // NaN into int64: known
        }
        case 3:
          return m.push(arange(static_cast<int64_t>(a2 % 7) - 1, dt));
        case 4:
          // A tiny step or an infinite range: an undefined cast of its length (reported).
          if (avoid("arange-length")) return;
          return m.push(arange(pick_double(a4) / 4, pick_double(a2), pick_double(a3 >> 2)));
        case 5:
          return m.push(linspace(-1, 1, static_cast<int64_t>(a2 % 6) - 1, dt));
        case 6:
          return m.push(eye(n, a4 & 1 ? std::optional<int64_t>(a4 % 4) : std::nullopt, dt));
        case 7:
          return m.push(rand(Shape{n, 2}, dt, &m.gen));
        case 8:
          return m.push(randn(Shape{n}, dt, &m.gen));
        default:
          return m.push(randint(static_cast<int64_t>(a4 % 5) - 2, a2 % 4, Shape{n}, &m.gen));
      }
    }
    case kRequiresGrad: {
      // A new leaf inside checkpoint is not the same leaf on the rerun; with create_graph, its
      // .grad would hold a graph holding it (the cycle PyTorch documents), which the end of
      // reverse() only breaks for the inputs.
      if (m.checkpoint_mode || m.create_graph) return;
      Tensor t = x;
      t.requires_grad_(a1 & 1);
      return;
    }
    case kRetainGrad:
      // With create_graph, a retained .grad of a non-leaf can hold the graph that holds the
      // tensor: a reference cycle (as in PyTorch) that LeakSanitizer would report.
      if (m.create_graph) return;
      x.retain_grad();
      return;
    case kHook: {
      // A hook registered inside checkpoint() is registered again by the recomputation.
      if (m.checkpoint_mode || !x.requires_grad()) return;
      const bool twice = a1 & 1;
      x.register_hook([twice](const Tensor& g) { return twice ? g * 2 : Tensor(); });
      return;
    }
    case kMidBackward: {
      if (m.checkpoint_mode) return;  // backward inside checkpoint's forward: not a use
      if (!x.requires_grad()) return;
      // Freeing the graph here makes the final backward throw: with create_graph, the leak
      // of a throwing backward (reported).
      sum(x).backward({}, (a1 & 1) || (m.create_graph && avoid("backward-throw-leak")));
      return;
    }
    case kItem:
      if (x.numel() == 1) {
        (void)x.item<double>();
        // double -> int64 of NaN / inf: an undefined cast (reported).
        if (!avoid("float-to-int") || !x.is_floating_point()) (void)x.item<int64_t>();
      }
      (void)x.to_vector<float>();
      return;
    case kPrint: {
      std::ostringstream os;
      os << x << describe(x);
      if (auto fn = x.grad_fn()) os << fn->name();
      return;
    }
    case kGradMode:
      set_grad_enabled(!is_grad_enabled());
      return;
    default:
      return;
  }
}

// The parsed header: what the inputs are and how the program is run.
struct Program {
  uint8_t mode = 0;
  int outputs = 1;
  bool use_grad_fn = false;  // autograd::grad instead of backward
  int run = 0;               // 0 normal, 1 no-grad, 2 inference
  struct Input {
    DType dtype;
    bool requires_grad;
    int style;
    Shape shape;
    uint8_t seed;
  };
  std::vector<Input> inputs;
  const uint8_t* ops = nullptr;
  std::size_t num_ops = 0;
};

Program parse(const uint8_t* data, std::size_t size) {
  ByteReader r(data, size);
  Program p;
  p.mode = r.u8();
  // A backward with create_graph that throws midway leaks (reported); under a DualLevel some
  // programs make it throw.
  if (avoid("backward-throw-leak") && (p.mode & kModeDual)) p.mode &= ~kModeDoubleBackward;
  const uint8_t out = r.u8();
  p.outputs = 1 + (out & 3) % 3;
  p.use_grad_fn = out & kOutputsAutogradGrad;
  p.run = (out >> 4) == kRunNoGrad ? 1 : (out >> 4) == kRunInference ? 2 : 0;
  const int n = 1 + r.u8() % 4;
  for (int i = 0; i < n; ++i) {
    Program::Input in;
    const uint8_t b0 = r.u8();
    in.dtype = pick_dtype(b0);
    in.requires_grad = b0 & 4;
    in.style = (b0 >> 3) & 3;
    const int ndim = (b0 >> 5) % 5;
    const uint16_t sizes = r.u16();
    for (int d = 0; d < ndim; ++d) in.shape.push_back(pick_size((sizes >> (4 * d)) & 15));
    in.seed = r.u8();
    p.inputs.push_back(std::move(in));
  }
  const std::size_t used = std::min(size, r.consumed());
  p.ops = data + used;
  p.num_ops = std::min(kMaxOps, (size - used) / kInstrBytes);
  return p;
}

// Fresh inputs (every run gets its own: programs modify them in place).
std::vector<Tensor> make_inputs(const Program& p) {
  std::vector<Tensor> xs;
  if (trace())
    std::fprintf(stderr, "program: mode 0x%02x, %d outputs%s, run %d\n", p.mode, p.outputs,
                 p.use_grad_fn ? " (autograd::grad)" : "", p.run);
  for (const auto& in : p.inputs) {
    Tensor t;
    run_expecting_errors([&] {
      t = make_values(in.shape, in.dtype, in.style, in.seed);
      if (in.requires_grad) t.requires_grad_();  // an integer tensor must refuse
    });
    if (!t.defined()) t = scalar_tensor(1.0);
    if (trace()) std::fprintf(stderr, "  input %zu: %s\n", xs.size(), brief(t).c_str());
    xs.push_back(t);
  }
  return xs;
}

// Runs the ops over `inputs`; returns the last `outputs` values.
std::vector<Tensor> interpret(const Program& p, const std::vector<Tensor>& inputs,
                              RunInfo* info = nullptr) {
  Machine m;
  m.values = inputs;
  m.inputs = inputs;
  m.checkpoint_mode = p.mode & kModeCheckpoint;
  m.create_graph = p.mode & kModeDoubleBackward;
  const bool grad_mode = is_grad_enabled();
  for (std::size_t i = 0; i < p.num_ops; ++i) {
    const std::size_t before = m.values.size();
    if (!run_expecting_errors([&] { run_op(m, p.ops + i * kInstrBytes); })) {
      ++m.errors;
    } else if (trace() && m.values.size() > before) {
      std::fprintf(stderr, "    -> %s\n", brief(m.values.back()).c_str());
    }
  }
  set_grad_enabled(grad_mode);
  if (info) *info = m.info;
  std::vector<Tensor> outs;
  for (int i = 0; i < p.outputs; ++i)
    outs.push_back(m.values[m.values.size() - 1 - (i % m.values.size())]);
  return outs;
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> va = a.detach().to(DType::Float64).to_vector<double>();
  const std::vector<double> vb = b.detach().to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(std::bit_cast<uint64_t>(va[i]) == std::bit_cast<uint64_t>(vb[i]) ||
          (std::isnan(va[i]) && std::isnan(vb[i]))))
      return false;
  return true;
}

void check_grad(const Tensor& leaf, const Tensor& g) {
  if (!g.defined()) return;
  ADJOINT_FUZZ_CHECK(g.shape() == leaf.shape());
  ADJOINT_FUZZ_CHECK(g.dtype() == leaf.dtype());
}

// Reverse mode over the outputs: backward (or autograd::grad) with a cotangent per output,
// then, with create_graph, a second backward through the gradients. Returns the gradients of
// the inputs that require grad (undefined when none reached them), or nullopt on an Error.
std::optional<std::vector<Tensor>> reverse(const Program& p, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& outs) {
  std::vector<Tensor> diff_outs, cotangents, leaves;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].requires_grad()) continue;
    diff_outs.push_back(outs[i]);
    cotangents.push_back(make_values(outs[i].shape(), outs[i].dtype(), 1, 77 + i));
  }
  for (const Tensor& x : inputs)
    if (x.requires_grad() && x.is_leaf()) leaves.push_back(x);
  if (diff_outs.empty()) return std::nullopt;
  const bool create = p.mode & kModeDoubleBackward;
  const bool retain = p.mode & kModeRetain;
  std::vector<Tensor> grads;
  if (trace())
    std::fprintf(stderr, "  backward: %zu outputs, %zu leaves%s%s\n", diff_outs.size(),
                 leaves.size(), create ? ", create_graph" : "", retain ? ", retain_graph" : "");
  const bool ok = run_expecting_errors([&] {
    for (const Tensor& x : leaves) x.zero_grad();
    if (p.use_grad_fn && !leaves.empty()) {
      grads = autograd::grad(diff_outs, leaves, cotangents, retain || create, create, true);
      ADJOINT_FUZZ_CHECK(grads.size() == leaves.size());
    } else {
      autograd::backward(diff_outs, cotangents, retain || create, create);
      for (const Tensor& x : leaves) grads.push_back(x.grad());
      if (retain) autograd::backward(diff_outs, cotangents, false, false);  // accumulates
    }
    for (std::size_t i = 0; i < leaves.size(); ++i) check_grad(leaves[i], grads[i]);
    if (!create) return;
    // Double backward: d/dx of sum(g * g) over the first-order gradients.
    Tensor s;
    for (const Tensor& g : grads) {
      if (!g.defined() || !g.requires_grad()) continue;
      Tensor term = (g * g).sum();
      s = s.defined() ? s + term : term;
    }
    if (!s.defined()) return;
    if (trace()) std::fprintf(stderr, "  double backward\n");
    std::vector<Tensor> second = autograd::grad({s}, leaves, {}, false, false, true);
    for (std::size_t i = 0; i < leaves.size(); ++i) check_grad(leaves[i], second[i]);
  });
  // .grad recorded with create_graph holds a graph that may hold the leaf: drop it (the
  // reference cycle PyTorch documents for backward(create_graph=True)).
  for (const Tensor& x : leaves) x.zero_grad();
  if (!ok) return std::nullopt;
  std::vector<Tensor> detached;
  for (const Tensor& g : grads) detached.push_back(g.defined() ? g.detach().clone() : Tensor());
  return detached;
}

// sum(a * b) in float64, with the sum of |a * b| (the scale of its rounding error); false when
// some product is not finite.
bool dot(const Tensor& a, const Tensor& b, double& sum, double& scale) {
  if (!a.defined() || !b.defined()) return true;  // an undefined tangent or gradient is zero
  if (a.shape() != b.shape()) return false;
  const std::vector<double> va = a.detach().to(DType::Float64).to_vector<double>();
  const std::vector<double> vb = b.detach().to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double p = va[i] * vb[i];
    if (!std::isfinite(p) || std::fabs(va[i]) > 1e6 || std::fabs(vb[i]) > 1e6) return false;
    sum += p;
    scale += std::fabs(p);
  }
  return true;
}

// Forward and reverse mode are one linear map and its transpose: with input tangents t and
// output cotangents c (those reverse() used), <c, J t> = <J^T c, t>. Checked when every input
// with a tangent is a leaf that requires grad and vice versa, and all numbers are finite.
void check_transpose(const Program& p, const std::vector<Tensor>& primals,
                     const std::vector<Tensor>& tangents, const std::vector<Tensor>& outs,
                     const std::vector<Tensor>& grads, const RunInfo& info) {
  std::vector<std::size_t> leaf_index;
  for (std::size_t i = 0; i < primals.size(); ++i) {
    const bool leaf = primals[i].requires_grad() && primals[i].is_leaf();
    if (leaf != tangents[i].defined()) return;
    if (leaf) leaf_index.push_back(i);
  }
  if (leaf_index.size() != grads.size()) return;
  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    Tensor tangent;
    if (!run_expecting_errors([&] { tangent = unpack_dual(outs[i]).second; })) return;
    if (!outs[i].requires_grad()) {
      if (tangent.defined()) return;  // a tangent where no gradient flows back
      continue;
    }
    const Tensor c = make_values(outs[i].shape(), outs[i].dtype(), 1, 77 + i);  // as reverse()
    if (!dot(c, tangent, lhs, scale)) return;
  }
  for (std::size_t j = 0; j < grads.size(); ++j)
    if (!dot(grads[j], tangents[leaf_index[j]], rhs, scale)) return;
  bool float32 = info.float32;
  for (const auto* list : {&primals, &outs, &grads})
    for (const Tensor& t : *list)
      if (t.defined() && t.dtype() == DType::Float32) float32 = true;
  const double tol = (float32 ? 1e-4 : 1e-9) * (1 + scale);
  if (trace()) std::fprintf(stderr, "  <c, J t> = %.17g, <J^T c, t> = %.17g\n", lhs, rhs);
  if (!(std::fabs(lhs - rhs) <= tol)) {
    char detail[160];
    std::snprintf(detail, sizeof detail, "<c, J t> = %.17g but <J^T c, t> = %.17g (mode 0x%02x)",
                  lhs, rhs, p.mode);
    finding("forward and reverse mode disagree:", detail);
  }
}

// Everything one run does; `checkpointed` puts the ops inside checkpoint().
std::optional<std::vector<Tensor>> run_program(const Program& p, bool checkpointed, bool dual) {
  std::vector<Tensor> inputs = make_inputs(p);
  std::optional<DualLevel> level;
  std::vector<Tensor> primals = inputs;
  std::vector<Tensor> tangents(inputs.size());
  if (dual) {
    level.emplace();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].is_floating_point() || (p.inputs[i].seed & 0x80)) continue;
      const Tensor t = make_values(inputs[i].shape(), inputs[i].dtype(), 1, p.inputs[i].seed + 1);
      if (run_expecting_errors([&] { inputs[i] = make_dual(inputs[i], t); })) tangents[i] = t;
    }
  }
  if (p.mode & kModeHooks) {
    for (const Tensor& x : primals)
      if (x.requires_grad())
        x.register_hook([shape = x.shape()](const Tensor& g) {
          ADJOINT_FUZZ_CHECK(g.shape() == shape);
          return Tensor();
        });
  }
  std::vector<Tensor> outs;
  RunInfo info;
  info.linear_ok = !checkpointed;
  {
    std::optional<NoGradGuard> no_grad;
    std::optional<InferenceMode> inference;
    if (p.run == 1) no_grad.emplace();
    if (p.run == 2) inference.emplace();
    if (checkpointed) {
      if (!run_expecting_errors([&] {
            outs = checkpoint([&p](const std::vector<Tensor>& xs) { return interpret(p, xs); },
                              inputs);
          }))
        return std::nullopt;
    } else {
      outs = interpret(p, inputs, &info);
    }
  }
  if (dual) {
    for (const Tensor& o : outs) {
      std::pair<Tensor, Tensor> pt;
      if (!run_expecting_errors([&] { pt = unpack_dual(o); })) continue;
      if (!pt.second.defined()) continue;
      ADJOINT_FUZZ_CHECK(pt.second.shape() == o.shape());
      ADJOINT_FUZZ_CHECK(pt.first.shape() == o.shape());
    }
  }
  if (!(p.mode & kModeBackward)) return std::nullopt;
  // Gradients go to the leaves (inputs made dual are views of them).
  std::optional<std::vector<Tensor>> grads = reverse(p, primals, outs);
  if (dual && grads && info.linear_ok && p.run == 0 && !(p.mode & kModeRetain))
    check_transpose(p, primals, tangents, outs, *grads, info);
  return grads;
}

// transforms' jvp over the float inputs, beside the make_dual run: the same tangents must
// come out of both (or an Error from both).
void check_jvp_transform(const Program& p) {
  const std::vector<Tensor> inputs = make_inputs(p);
  std::vector<Tensor> primals, tangents;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].is_floating_point()) continue;
    primals.push_back(inputs[i].detach());
    tangents.push_back(make_values(inputs[i].shape(), inputs[i].dtype(), 1, p.inputs[i].seed + 1));
    where.push_back(i);
  }
  if (primals.empty()) return;
  auto f = [&](const std::vector<Tensor>& ps) {
    std::vector<Tensor> xs = make_inputs(p);
    for (std::size_t k = 0; k < where.size(); ++k) xs[where[k]] = ps[k];
    std::vector<Tensor> outs = interpret(p, xs);
    for (Tensor& o : outs)
      if (!o.is_floating_point()) o = o.to(DType::Float32);  // integer outputs: no tangent
    return outs;
  };
  run_expecting_errors([&] {
    auto res = jvp(f, primals, tangents);
    ADJOINT_FUZZ_CHECK(res.outputs.size() == res.tangents.size());
    for (std::size_t i = 0; i < res.outputs.size(); ++i)
      if (res.tangents[i].defined())
        ADJOINT_FUZZ_CHECK(res.tangents[i].shape() == res.outputs[i].shape());
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  adjoint::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < kHeaderBytes) return 0;
  const Program p = parse(data, size);
  const bool checkpointed = p.mode & kModeCheckpoint;
  const bool dual = p.mode & kModeDual;
  std::optional<std::vector<Tensor>> grads = run_program(p, checkpointed, dual);
  // Checkpointing must not change gradients: compare with a plain run of the same program.
  if (checkpointed && (p.mode & kModeCompare) && p.run == 0 && !dual) {
    std::optional<std::vector<Tensor>> plain = run_program(p, false, false);
    if (grads && plain) {
      ADJOINT_FUZZ_CHECK(grads->size() == plain->size());
      for (std::size_t i = 0; i < grads->size(); ++i)
        if (!same_values((*grads)[i], (*plain)[i]))
          finding("checkpoint changes a gradient", describe((*plain)[i]).c_str());
    }
  }
  if (dual && (p.mode & kModeJvpTransform) && p.run == 0) check_jvp_transform(p);
  return 0;
}
