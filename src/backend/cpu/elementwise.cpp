// Elementwise kernels: unary (with scalar parameters), binary with broadcasting, where, casts,
// copies and fills. Every kernel is one call to strided_loop with a per-element lambda.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "adjoint/error.h"
#include "backend/cpu/elementwise_reduced.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/wrapping.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/half_convert.h"
#include "core/op_scope.h"
#include "core/scalar_convert.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// out[i] = f(in[i]) for contiguous out over in's shape.
template <class Out, class In, class F>
void map1(const Tensor& out, const Tensor& in, F f) {
  char* const out_data = operand_data<Out>(out);  // See Note [Kernel element types]
  char* const in_data = operand_data<In>(in);
  if (in.is_contiguous() && out.is_contiguous() && in.shape() == out.shape()) {
    // The common case: one flat loop, no stride bookkeeping.
    Out* o = reinterpret_cast<Out*>(out_data);
    const In* x = reinterpret_cast<const In*>(in_data);
    parallel_for(out.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) o[j] = f(x[j]);
    });
    return;
  }
  Operands<2> ops{
      {out_data, in_data},
      {broadcast_byte_strides(out, out.shape()), broadcast_byte_strides(in, out.shape())}};
  strided_loop(out.shape(), ops,
               [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                 if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
                   Out* o = reinterpret_cast<Out*>(p[0]);
                   const In* x = reinterpret_cast<const In*>(p[1]);
                   for (int64_t j = 0; j < n; ++j) o[j] = f(x[j]);
                 } else {
                   for (int64_t j = 0; j < n; ++j)
                     *reinterpret_cast<Out*>(p[0] + j * s[0]) =
                         f(*reinterpret_cast<const In*>(p[1] + j * s[1]));
                 }
               });
}

template <class Out, class In, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Shape& shape = out.shape();
  char* const out_data = operand_data<Out>(out);  // See Note [Kernel element types]
  char* const a_data = operand_data<In>(a);
  char* const b_data = operand_data<In>(b);
  if (out.is_contiguous() && a.is_contiguous() && a.shape() == shape) {
    Out* o = reinterpret_cast<Out*>(out_data);
    const In* x = reinterpret_cast<const In*>(a_data);
    const In* y = reinterpret_cast<const In*>(b_data);
    if (b.is_contiguous() && b.shape() == shape) {
      parallel_for(out.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) o[j] = f(x[j], y[j]);
      });
      return;
    }
    if (b.numel() == 1) {
      const In yv = *y;
      parallel_for(out.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) o[j] = f(x[j], yv);
      });
      return;
    }
  }
  Operands<3> ops{{out_data, a_data, b_data},
                  {broadcast_byte_strides(out, shape), broadcast_byte_strides(a, shape),
                   broadcast_byte_strides(b, shape)}};
  strided_loop(shape, ops,
               [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                 if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {
                   Out* o = reinterpret_cast<Out*>(p[0]);
                   const In* x = reinterpret_cast<const In*>(p[1]);
                   const In* y = reinterpret_cast<const In*>(p[2]);
                   for (int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
                 } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {
                   Out* o = reinterpret_cast<Out*>(p[0]);
                   const In* x = reinterpret_cast<const In*>(p[1]);
                   const In y = *reinterpret_cast<const In*>(p[2]);
                   for (int64_t j = 0; j < n; ++j) o[j] = f(x[j], y);
                 } else {
                   for (int64_t j = 0; j < n; ++j)
                     *reinterpret_cast<Out*>(p[0] + j * s[0]) =
                         f(*reinterpret_cast<const In*>(p[1] + j * s[1]),
                           *reinterpret_cast<const In*>(p[2] + j * s[2]));
                 }
               });
}

template <class T>
T sigmoid_of(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

bool returns_bool(Unary k) {
  switch (k) {
    case Unary::EqScalar:
    case Unary::NeScalar:
    case Unary::LtScalar:
    case Unary::LeScalar:
    case Unary::GtScalar:
    case Unary::GeScalar:
    case Unary::LogicalNot:
      return true;
    default:
      return false;
  }
}

// The op name in a kind's errors: the kind's own name, but the scalar forms of an op and
// its variants carry the op's.
const char* unary_name(Unary k) {
  switch (k) {
    case Unary::ClampMin:
    case Unary::ClampMax:
      return "clamp";
    case Unary::AddScalar:
      return "add";
    case Unary::MulScalar:
      return "mul";
    case Unary::RSubScalar:
      return "sub";
    case Unary::RDivScalar:
      return "div";
    case Unary::PowScalar:
    case Unary::RPowScalar:
      return "pow";
    case Unary::GeluErf:
    case Unary::GeluTanh:
      return "gelu";
    default:
      return returns_bool(k) ? "compare" : kind_name(k);
  }
}

// Kinds that make sense on int64 (the rest need floating point).
bool integral_ok(Unary k) {
  switch (k) {
    case Unary::Neg:
    case Unary::Abs:
    case Unary::Sign:
    case Unary::Square:
    case Unary::Relu:
    case Unary::ClampMin:
    case Unary::ClampMax:
    case Unary::AddScalar:
    case Unary::MulScalar:
    case Unary::RSubScalar:
    case Unary::PowScalar:
      return true;
    default:
      return returns_bool(k);
  }
}

// Kinds whose parameter a is converted to the element type (the comparisons compare in double).
bool uses_param(Unary k) {
  switch (k) {
    case Unary::ClampMin:
    case Unary::ClampMax:
    case Unary::AddScalar:
    case Unary::MulScalar:
    case Unary::RSubScalar:
    case Unary::PowScalar:
      return true;
    default:
      return false;
  }
}

// A kind's parameter in the element type. Into int64 the conversion is checked (see
// core/scalar_convert.h): clamp_(-inf) or a bound beyond 2^63 would otherwise be undefined.
template <class T>
T param(Unary k, double v, const char* op) {
  if constexpr (std::is_integral_v<T>) {
    return uses_param(k) ? detail::scalar_to<T>(Scalar(v), op) : T(0);
  } else {
    return static_cast<T>(v);
  }
}

// a^b for int64 with b >= 0 by repeated squaring, wrapping on overflow as PyTorch does (in
// unsigned arithmetic, where wrapping is defined); a negative b gives 1 for a = 1, +-1 for
// a = -1 and 0 otherwise, as PyTorch's integer pow.
int64_t int_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, base = static_cast<uint64_t>(a);
  for (auto e = static_cast<uint64_t>(b); e; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return static_cast<int64_t>(r);
}

// Where a kernel's per-element functions run: over tensors (strided, broadcast, threaded),
// or over one contiguous block of arrays (compile's fused loops, which must compute each
// element exactly as the op's own kernel does: the functions are the same).
struct TensorMap1 {
  const Tensor& out;
  const Tensor& x;
  template <class Out, class In, class F>
  void map(F f) const {
    map1<Out, In>(out, x, f);
  }
  template <class T>
  bool simd(Unary k, double a, double b) const {
    if (!simd_unary_handles(k, a) || !x.is_contiguous() || !out.is_contiguous() ||
        x.shape() != out.shape())
      return false;
    const T* in = reinterpret_cast<const T*>(operand_data<T>(x));
    T* o = reinterpret_cast<T*>(operand_data<T>(out));
    parallel_for(out.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
      simd_unary(k, in + begin, o + begin, end - begin, a, b);
    });
    return true;
  }
};

// Below this many elements a dispatched vector call costs more than the plain loop.
constexpr int64_t kShortBlock = 64;

template <class T>
struct ArrayMap1 {
  const T* in;
  T* out;
  int64_t n;
  template <class Out, class In, class F>
  void map(F f) const {
    if constexpr (std::is_same_v<Out, T> && std::is_same_v<In, T>) {
      for (int64_t j = 0; j < n; ++j) out[j] = f(in[j]);
    } else {
      ADJOINT_ASSERT(false, "unary_block: a kind that changes the dtype");
    }
  }
  template <class U>
  bool simd(Unary k, double a, double b) const {
    // A short block of an exact kind is quicker in the plain loop (the same bits).
    if (!simd_unary_handles(k, a) || (n < kShortBlock && simd_is_exact(k))) return false;
    simd_unary(k, in, out, n, a, b);
    return true;
  }
};

template <class T, class M>
void unary_numeric(Unary k, const M& m, double a_, double b_, const char* op) {
  const T a = param<T>(k, a_, op), b = std::is_integral_v<T> ? T(0) : static_cast<T>(b_);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    // Contiguous kinds the vectorised kernels have (simd_math.cpp) run there, in the same
    // fixed chunks; the lambdas below stay the reference and serve strided inputs.
    if (m.template simd<T>(k, a_, b_)) return;
  }
  switch (k) {
    case Unary::Neg:
      return m.template map<T, T>([](T v) { return sub_wrap(T(0), v); });
    case Unary::Abs:
      return m.template map<T, T>([](T v) { return v < 0 ? sub_wrap(T(0), v) : v; });
    case Unary::Sign:
      return m.template map<T, T>([](T v) { return T((v > 0) - (v < 0)); });
    case Unary::Square:
      return m.template map<T, T>([](T v) { return mul_wrap(v, v); });
    case Unary::Relu:  // max(v, 0) that keeps NaN (and -0), as PyTorch's clamp_min(x, 0)
      return m.template map<T, T>([](T v) { return v < T(0) ? T(0) : v; });
    case Unary::ClampMin:
      return m.template map<T, T>([a](T v) { return v < a ? a : v; });
    case Unary::ClampMax:
      return m.template map<T, T>([a](T v) { return v > a ? a : v; });
    case Unary::AddScalar:
      return m.template map<T, T>([a](T v) { return add_wrap(v, a); });
    case Unary::MulScalar:
      return m.template map<T, T>([a](T v) { return mul_wrap(v, a); });
    case Unary::RSubScalar:
      return m.template map<T, T>([a](T v) { return sub_wrap(a, v); });
    case Unary::EqScalar:
      return m.template map<bool, T>([a_](T v) { return v == a_; });
    case Unary::NeScalar:
      return m.template map<bool, T>([a_](T v) { return v != a_; });
    case Unary::LtScalar:
      return m.template map<bool, T>([a_](T v) { return v < a_; });
    case Unary::LeScalar:
      return m.template map<bool, T>([a_](T v) { return v <= a_; });
    case Unary::GtScalar:
      return m.template map<bool, T>([a_](T v) { return v > a_; });
    case Unary::GeScalar:
      return m.template map<bool, T>([a_](T v) { return v >= a_; });
    case Unary::LogicalNot:
      return m.template map<bool, T>([](T v) { return v == T(0); });
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    if (k == Unary::PowScalar) return m.template map<T, T>([a](T v) { return int_pow(v, a); });
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (k) {
      case Unary::Exp:
        return m.template map<T, T>([](T v) { return std::exp(v); });
      case Unary::Log:
        return m.template map<T, T>([](T v) { return std::log(v); });
      case Unary::Log1p:
        return m.template map<T, T>([](T v) { return std::log1p(v); });
      case Unary::Expm1:
        return m.template map<T, T>([](T v) { return std::expm1(v); });
      case Unary::Sqrt:
        return m.template map<T, T>([](T v) { return std::sqrt(v); });
      case Unary::Rsqrt:
        return m.template map<T, T>([](T v) { return T(1) / std::sqrt(v); });
      case Unary::Sin:
        return m.template map<T, T>([](T v) { return std::sin(v); });
      case Unary::Cos:
        return m.template map<T, T>([](T v) { return std::cos(v); });
      case Unary::Tan:
        return m.template map<T, T>([](T v) { return std::tan(v); });
      case Unary::Tanh:
        return m.template map<T, T>([](T v) { return std::tanh(v); });
      case Unary::Erf:
        return m.template map<T, T>([](T v) { return std::erf(v); });
      case Unary::Sigmoid:
        return m.template map<T, T>([](T v) { return sigmoid_of(v); });
      case Unary::Reciprocal:
        return m.template map<T, T>([](T v) { return T(1) / v; });
      case Unary::LeakyRelu:
        return m.template map<T, T>([a](T v) { return v > 0 ? v : v * a; });
      case Unary::Softplus:
        return m.template map<T, T>(
            [a, b](T v) { return v * a > b ? v : std::log1p(std::exp(v * a)) / a; });
      case Unary::RDivScalar:
        return m.template map<T, T>([a](T v) { return a / v; });
      case Unary::PowScalar:
        if (a_ == 2) return m.template map<T, T>([](T v) { return v * v; });
        if (a_ == 0.5) return m.template map<T, T>([](T v) { return std::sqrt(v); });
        // As PyTorch's pow_tensor_scalar_optimized_kernel: x^3 as two multiplications.
        if (a_ == 3) return m.template map<T, T>([](T v) { return v * v * v; });
        return m.template map<T, T>([a](T v) { return std::pow(v, a); });
      case Unary::RPowScalar:
        return m.template map<T, T>([a](T v) { return std::pow(a, v); });
      case Unary::GeluErf:
        return m.template map<T, T>(
            [](T v) { return T(0.5) * v * (T(1) + std::erf(v * T(M_SQRT1_2))); });
      case Unary::GeluTanh:
        return m.template map<T, T>([](T v) {
          const T k = T(0.7978845608028654);  // sqrt(2 / pi)
          return T(0.5) * v * (T(1) + std::tanh(k * (v + T(0.044715) * v * v * v)));
        });
      case Unary::Silu:
        return m.template map<T, T>([](T v) { return v * sigmoid_of(v); });
      default:
        break;
    }
  }
  ADJOINT_ASSERT(false, "unhandled unary kind ", static_cast<int>(k));
}

struct TensorMap2 {
  const Tensor& out;
  const Tensor& a;
  const Tensor& b;
  template <class Out, class In, class F>
  void map(F f) const {
    map2<Out, In>(out, a, b, f);
  }
  template <class T>
  bool simd(Binary k) const {
    if (!simd_binary_handles(k) || !out.is_contiguous() || !a.is_contiguous() ||
        !b.is_contiguous() || a.shape() != out.shape() || b.shape() != out.shape())
      return false;
    const T* x = reinterpret_cast<const T*>(operand_data<T>(a));
    const T* y = reinterpret_cast<const T*>(operand_data<T>(b));
    T* o = reinterpret_cast<T*>(operand_data<T>(out));
    parallel_for(out.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
      simd_binary(k, x + begin, y + begin, o + begin, end - begin);
    });
    return true;
  }
};

template <class T>
struct ArrayMap2 {
  const T* a;
  const T* b;
  T* out;
  int64_t n;
  template <class Out, class In, class F>
  void map(F f) const {
    if constexpr (std::is_same_v<Out, T> && std::is_same_v<In, T>) {
      for (int64_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]);
    } else {
      ADJOINT_ASSERT(false, "binary_block: a kind that changes the dtype");
    }
  }
  template <class U>
  bool simd(Binary k) const {
    if (!simd_binary_handles(k) || (n < kShortBlock && simd_is_exact(k))) return false;
    simd_binary(k, a, b, out, n);
    return true;
  }
};

// The arithmetic binary kinds (not the comparisons) over a mapper (TensorMap2, ArrayMap2).
template <class T, class M>
void binary_numeric(Binary k, const M& m) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    // Contiguous gelu gradients run vectorised (simd_math.cpp); the lambdas below stay the
    // reference and serve strided and broadcast operands.
    if (m.template simd<T>(k)) return;
  }
  if constexpr (std::is_same_v<T, bool>) {
    ADJOINT_CHECK(false, DType, "binary", "arithmetic on bool tensors is not supported");
  } else {
    switch (k) {
      case Binary::Add:
        return m.template map<T, T>([](T x, T y) { return add_wrap(x, y); });
      case Binary::Sub:
        return m.template map<T, T>([](T x, T y) { return sub_wrap(x, y); });
      case Binary::Mul:
        return m.template map<T, T>([](T x, T y) { return mul_wrap(x, y); });
      case Binary::Div:
        if constexpr (std::is_integral_v<T>) {
          ADJOINT_CHECK(false, DType, "div", "integer division goes through floats in ops");
        } else {
          return m.template map<T, T>([](T x, T y) { return x / y; });
        }
      case Binary::Pow:
        if constexpr (std::is_integral_v<T>) {  // std::pow's double overflows an int64 cast
          return m.template map<T, T>([](T x, T y) { return int_pow(x, y); });
        } else {
          return m.template map<T, T>([](T x, T y) { return std::pow(x, y); });
        }
      case Binary::Minimum:
        return m.template map<T, T>([](T x, T y) { return (x < y || x != x) ? x : y; });
      case Binary::Maximum:
        return m.template map<T, T>([](T x, T y) { return (x > y || x != x) ? x : y; });
      case Binary::TanhBackward:
        return m.template map<T, T>([](T g, T y) { return g * (T(1) - y * y); });
      case Binary::ReluBackward:  // PyTorch's threshold_backward: a NaN y passes g through
        return m.template map<T, T>([](T g, T y) { return y <= T(0) ? T(0) : g; });
      case Binary::SigmoidBackward:
        return m.template map<T, T>([](T g, T y) { return g * y * (T(1) - y); });
      default:
        break;
    }
    if constexpr (std::is_floating_point_v<T>) {
      switch (k) {
        case Binary::GeluTanhBackward:
          // d/dx 0.5 x (1 + t), t = tanh(k (x + c x^3)):
          // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
          return m.template map<T, T>([](T g, T x) {
            const T k = T(0.7978845608028654), c = T(0.044715);
            const T x2 = x * x;
            const T t = std::tanh(k * (x + c * x * x2));
            return g *
                   (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x2));
          });
        case Binary::GeluErfBackward:
          // d/dx x Phi(x) = Phi(x) + x phi(x)
          return m.template map<T, T>([](T g, T x) {
            const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
            const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
            return g * (cdf + x * pdf);
          });
        default:
          break;
      }
    }
  }
  ADJOINT_ASSERT(false, "unhandled binary kind");
}

}  // namespace

void cpu::unary_into(Unary k, const Tensor& out, const Tensor& x, double a, double b) {
  const char* op = unary_name(k);
  ADJOINT_CHECK(is_floating(x.dtype()) || integral_ok(k), DType, op,
                "expected a floating tensor, got ", describe(x));
  // Bool tensors have no arithmetic (PyTorch raises for abs, relu, neg and clamp of bool): only
  // the comparisons and logical_not reach here, computed on 0/1 as int64.
  ADJOINT_CHECK(x.dtype() != DType::Bool || returns_bool(k), DType, op,
                "not implemented for bool tensors (input ", describe(x), ")");
  if (is_reduced(x) || is_reduced(out)) {  // See Note [Reduced-precision kernels]
    if (!returns_bool(k) && unary_reduced_blocked(k, out, x, a, b)) return;
    copy_into(out, cpu::unary(k, widen(x), a, b));
    return;
  }
  dispatch_opmath_all(x.dtype(), op, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      Tensor as_int = cast(x, DType::Int64);
      unary_numeric<int64_t>(k, TensorMap1{out, as_int}, a, b, op);
    } else {
      unary_numeric<T>(k, TensorMap1{out, x}, a, b, op);
    }
  });
}

template <class T>
void unary_block(Unary k, const T* in, T* out, int64_t n, double a, double b) {
  unary_numeric<T>(k, ArrayMap1<T>{in, out, n}, a, b, unary_name(k));
}
template void unary_block<float>(Unary, const float*, float*, int64_t, double, double);
template void unary_block<double>(Unary, const double*, double*, int64_t, double, double);

template <class T>
void binary_block(Binary k, const T* x, const T* y, T* out, int64_t n) {
  binary_numeric<T>(k, ArrayMap2<T>{x, y, out, n});
}
template void binary_block<float>(Binary, const float*, const float*, float*, int64_t);
template void binary_block<double>(Binary, const double*, const double*, double*, int64_t);

Tensor cpu::unary(Unary k, const Tensor& x, double a, double b) {
  Tensor out = make_empty(x.shape(), returns_bool(k) ? DType::Bool : x.dtype());
  cpu::unary_into(k, out, x, a, b);
  return out;
}

Tensor cpu::binary(Binary k, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "binary");
  Tensor out = make_empty(shape, k >= Binary::Eq ? DType::Bool : a.dtype());
  cpu::binary_into(k, out, a, b);
  return out;
}

void cpu::binary_into(Binary k, const Tensor& out, const Tensor& a, const Tensor& b) {
  ADJOINT_ASSERT(a.dtype() == b.dtype(), "binary kernel needs equal dtypes");
  if (is_reduced(a) || is_reduced(out)) {  // See Note [Reduced-precision kernels]
    if (binary_reduced_blocked(k, out, a, b)) return;
    copy_into(out, cpu::binary(k, widen(a), widen(b)));
    return;
  }
  dispatch_opmath_all(a.dtype(), "binary", [&]<class T>() {
    switch (k) {
      case Binary::Eq:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x == y; });
      case Binary::Ne:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x != y; });
      case Binary::Lt:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x < y; });
      case Binary::Le:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x <= y; });
      case Binary::Gt:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x > y; });
      case Binary::Ge:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x >= y; });
      case Binary::And:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x && y; });
      case Binary::Or:
        return map2<bool, T>(out, a, b, [](T x, T y) { return x || y; });
      default:
        break;
    }
    binary_numeric<T>(k, TensorMap2{out, a, b});
  });
}

void cpu::add_scaled_into(const Tensor& out, const Tensor& x, double alpha) {
  ADJOINT_ASSERT(out.dtype() == x.dtype(), "add_scaled_into needs equal dtypes");
  if (is_reduced(out)) {  // See Note [Reduced-precision kernels]
    Tensor wide = widen(out);
    add_scaled_into(wide, widen(x), alpha);
    copy_into(out, wide);
    return;
  }
  dispatch_opmath_numeric(out.dtype(), "add_", [&]<class T>() {
    const char* op = detail::current_op("add_");
    if constexpr (std::is_integral_v<T>)
      ADJOINT_CHECK(alpha == std::trunc(alpha), DType, op,
                    "for integral input tensors, argument alpha must not be a floating point "
                    "number, got ",
                    alpha);
    const T a = detail::scalar_to<T>(Scalar(alpha), op);
    map2<T, T>(out, out, x, [a](T o, T v) { return add_wrap(o, mul_wrap(a, v)); });
  });
}

Tensor cpu::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ADJOINT_ASSERT(a.dtype() == b.dtype() && cond.dtype() == DType::Bool);
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = make_empty(shape, a.dtype());
  dispatch_all(a.dtype(), "where", [&]<class T>() {
    Operands<4> ops{
        {operand_data<T>(out), operand_data<bool>(cond), operand_data<T>(a), operand_data<T>(b)},
        {broadcast_byte_strides(out, shape), broadcast_byte_strides(cond, shape),
         broadcast_byte_strides(a, shape), broadcast_byte_strides(b, shape)}};
    strided_loop(
        shape, ops, [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
          constexpr int64_t t = sizeof(T);
          const bool* c = reinterpret_cast<const bool*>(p[1]);
          T* o = reinterpret_cast<T*>(p[0]);
          if (s[0] == t && s[1] == 1 && (s[2] == t || s[2] == 0) && (s[3] == t || s[3] == 0)) {
            // Unit strides, each value operand contiguous or one scalar (masked_fill
            // and its gradient): a loop the compiler vectorises.
            const T* a = reinterpret_cast<const T*>(p[2]);
            const T* b = reinterpret_cast<const T*>(p[3]);
            if (s[2] && s[3]) {
              for (int64_t j = 0; j < n; ++j) o[j] = c[j] ? a[j] : b[j];
            } else if (s[3]) {
              const T av = *a;
              for (int64_t j = 0; j < n; ++j) o[j] = c[j] ? av : b[j];
            } else if (s[2]) {
              const T bv = *b;
              for (int64_t j = 0; j < n; ++j) o[j] = c[j] ? a[j] : bv;
            } else {
              const T av = *a, bv = *b;
              for (int64_t j = 0; j < n; ++j) o[j] = c[j] ? av : bv;
            }
            return;
          }
          for (int64_t j = 0; j < n; ++j) {
            bool cj = *reinterpret_cast<const bool*>(p[1] + j * s[1]);
            *reinterpret_cast<T*>(p[0] + j * s[0]) =
                cj ? *reinterpret_cast<const T*>(p[2] + j * s[2])
                   : *reinterpret_cast<const T*>(p[3] + j * s[3]);
          }
        });
  });
  return out;
}

namespace {

// One element converted from S to D. Into the 16-bit floats the value goes through float32 (as
// PyTorch converts a double to at::Half); out of them it is read exactly as float32.
template <class D, class S>
D convert_element(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_reduced_float_v<S>) {
    return convert_element<D>(static_cast<float>(v));
  } else if constexpr (is_reduced_float_v<D>) {
    return D(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, int64_t> && std::is_floating_point_v<S>) {
    // NaN, inf and values beyond 2^63 become INT64_MIN, as x86's conversion gives them in
    // PyTorch, but by a defined rule instead of an undefined cast.
    return detail::fits_int64(static_cast<double>(v)) ? static_cast<D>(v) : INT64_MIN;
  } else if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> &&
                       std::is_floating_point_v<S>) {
    // Into a narrow integer through int64, which wraps (-1.0 into uint8 is 255, as x86 gives
    // it in PyTorch) where a direct cast out of range would be undefined.
    return static_cast<D>(convert_element<int64_t>(v));
  } else {
    return static_cast<D>(v);
  }
}

// Contiguous float32 <-> float16/bfloat16 of equal shapes: the vectorised conversions of
// core/half_convert.h, in the elementwise kernels' fixed chunks. False when it does not apply.
template <class D, class S>
bool convert_contiguous(const Tensor& dst, const Tensor& src) {
  constexpr bool widening = std::is_same_v<D, float> && is_reduced_float_v<S>;
  constexpr bool narrowing = std::is_same_v<S, float> && is_reduced_float_v<D>;
  if constexpr (widening || narrowing) {
    if (!dst.is_contiguous() || !src.is_contiguous() || dst.shape() != src.shape()) return false;
    D* o = reinterpret_cast<D*>(operand_data<D>(dst));
    const S* x = reinterpret_cast<const S*>(operand_data<S>(src));
    parallel_for(dst.numel(), kConvertGrain, [&](int64_t begin, int64_t end) {
      detail::convert(x + begin, o + begin, end - begin);
    });
    return true;
  } else {
    return false;
  }
}

// The same for strided or broadcast views (a batched matmul's operand viewed per head): each
// innermost run that is contiguous on both sides converts as a block, where map1's element loop
// would run the portable scalar conversion element by element. That pays for float16 both ways
// (a [16, 4, 128, 32] per-head view: 336 to 94 us widening, 345 to 90 narrowing; the fp16 demo
// spent 5% of its time in that loop) and for narrowing to bfloat16 (125 to 98 us). Widening
// bfloat16 is a shift, which the compiler already vectorises in map1's loop; through the
// blocks it took 87 us against 42, so it stays there. Runs with other strides convert element
// by element. Same bits either way (Note [Half conversions]).
template <class D, class S>
bool convert_strided(const Tensor& dst, const Tensor& src) {
  constexpr bool widening = std::is_same_v<D, float> && std::is_same_v<S, Half>;
  constexpr bool narrowing = std::is_same_v<S, float> && is_reduced_float_v<D>;
  if constexpr (widening || narrowing) {
    Operands<2> ops{
        {operand_data<D>(dst), operand_data<S>(src)},
        {broadcast_byte_strides(dst, dst.shape()), broadcast_byte_strides(src, dst.shape())}};
    strided_loop(dst.shape(), ops,
                 [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& st, int64_t n) {
                   if (st[0] == sizeof(D) && st[1] == sizeof(S)) {
                     detail::convert(reinterpret_cast<const S*>(p[1]), reinterpret_cast<D*>(p[0]),
                                     n);
                     return;
                   }
                   for (int64_t j = 0; j < n; ++j)
                     *reinterpret_cast<D*>(p[0] + j * st[0]) =
                         convert_element<D>(*reinterpret_cast<const S*>(p[1] + j * st[1]));
                 });
    return true;
  } else {
    return false;
  }
}

// Contiguous copies within one dtype (clone, a gradient into a DDP bucket) as memmove: glibc's
// runs at the CPU's widest stores, where the element loop of map1 compiles to the baseline's
// 16-byte ones (a 4 MiB float32 clone took 144 us on one Zen 4 thread, against 88 for x * 1.0).
// memmove, not memcpy, in case dst and src are one buffer.
template <class D, class S>
bool copy_contiguous(const Tensor& dst, const Tensor& src) {
  if constexpr (std::is_same_v<D, S>) {
    if (!dst.is_contiguous() || !src.is_contiguous() || dst.shape() != src.shape()) return false;
    char* o = operand_data<D>(dst);
    const char* x = operand_data<S>(src);
    parallel_for(dst.numel(), kFlatGrain, [&](int64_t begin, int64_t end) {
      std::memmove(o + begin * sizeof(D), x + begin * sizeof(D), (end - begin) * sizeof(D));
    });
    return true;
  } else {
    return false;
  }
}

}  // namespace

void cpu::copy_into(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      if (copy_contiguous<D, S>(dst, src) || convert_contiguous<D, S>(dst, src) ||
          convert_strided<D, S>(dst, src))
        return;
      map1<D, S>(dst, src, [](S v) { return convert_element<D>(v); });
    });
  });
}

Tensor cpu::to_device(const Tensor& x, Device device) {
  // Meta takes no bytes; a device this build has not is refused where its storage is made.
  if (device.is_cpu()) return cpu::cast(x, x.dtype());
  return make_empty(x.shape(), x.dtype(), device);
}

Tensor cpu::cast(const Tensor& x, DType dtype) {
  Tensor out = make_empty(x.shape(), dtype);
  copy_into(out, x);
  return out;
}

void cpu::fill(const Tensor& dst, Scalar value) {
  dispatch_all(dst.dtype(), "fill", [&]<class T>() {
    // NaN, inf or a value out of range into int64 is an error, not INT64_MIN (scalar_convert.h);
    // the fallback name is for Tensor::fill_, the one caller outside an op's scope.
    const T v = detail::scalar_to<T>(value, detail::current_op("fill_"));
    Operands<1> ops{{operand_data<T>(dst)}, {broadcast_byte_strides(dst, dst.shape())}};
    strided_loop(dst.shape(), ops,
                 [&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
                   if (s[0] == sizeof(T)) {  // contiguous: std::fill vectorises (or memsets)
                     std::fill(reinterpret_cast<T*>(p[0]), reinterpret_cast<T*>(p[0]) + n, v);
                     return;
                   }
                   for (int64_t j = 0; j < n; ++j) *reinterpret_cast<T*>(p[0] + j * s[0]) = v;
                 });
  });
}

}  // namespace adjoint::kernels
