// Binary arithmetic with broadcasting and type promotion (add, sub, mul, div, pow, minimum,
// maximum, where), the tensor-with-number forms, comparisons and the operators. Promotion
// happens here, through the differentiable to(); apply<Op> unbroadcasts the gradients.
#include <cfloat>
#include <cmath>

#include "adjoint/error.h"
#include "core/dispatch.h"
#include "core/op_fields.h"
#include "ops/common.h"
#include "ops/no_derivative.h"

namespace adjoint {
namespace {

struct Add {
  static constexpr const char* name = "add";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(Binary::Add, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::Add); }
  // d(a + b) = da + db
  std::array<Tensor, 2> vjp(const Ctx&, const Tensor& gy) const { return {gy, gy}; }
  Tensor jvp(const Ctx&, const Tensor& ta, const Tensor& tb) const { return ta + tb; }
};

struct Sub {
  static constexpr const char* name = "sub";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(Binary::Sub, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::Sub); }
  // d(a - b) = da - db
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {gy, c.needs_grad(1) ? -gy : Tensor()};
  }
  Tensor jvp(const Ctx&, const Tensor& ta, const Tensor& tb) const { return ta - tb; }
};

struct Mul {
  static constexpr const char* name = "mul";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(Binary::Mul, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::Mul); }
  // d(a b) = b da + a db
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {c.needs_grad(0) ? gy * c.input(1) : Tensor(),
            c.needs_grad(1) ? gy * c.input(0) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    return ta * c.input(1) + tb * c.input(0);
  }
};

struct Div {
  static constexpr const char* name = "div";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(Binary::Div, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::Div); }
  // d(a / b) = da / b - a db / b^2
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& a = c.input(0);
    const Tensor& b = c.input(1);
    return {c.needs_grad(0) ? gy / b : Tensor(), c.needs_grad(1) ? -gy * a / b.square() : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    const Tensor& b = c.input(1);
    return (ta - tb * c.input(0) / b) / b;
  }
};

struct Pow {
  static constexpr const char* name = "pow";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(Binary::Pow, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::Pow); }
  // d(a^b) = b a^(b-1) da + a^b log(a) db; the log term is taken as 0 where a == 0 and b >= 0.
  static Tensor d_base(const Ctx& c) { return c.input(1) * c.input(0).pow(c.input(1) - 1); }
  static Tensor d_exponent(const Ctx& c) {
    Tensor a = c.input(0);
    Tensor safe = where(logical_and(eq(a, 0), ge(c.input(1), 0)), ones_like(a), a);
    return c.output() * log(safe);
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {c.needs_grad(0) ? gy * d_base(c) : Tensor(),
            c.needs_grad(1) ? gy * d_exponent(c) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    return ta * d_base(c) + tb * d_exponent(c);
  }
};

// minimum/maximum: the gradient goes to the selected input, split evenly on ties. Where either
// is NaN (so is the output) neither input loses, and the VJP gives gy to both, as PyTorch's.
// The JVP uses the same weights, so that it stays the VJP's transpose there too (PyTorch's JVP
// takes only b's tangent at a NaN; fuzz_ops found the two modes disagreeing on it).
template <bool kMax>
struct Extremum {
  static constexpr const char* name = kMax ? "maximum" : "minimum";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::binary(kMax ? Binary::Maximum : Binary::Minimum, a, b);
  }
  PointwiseKernel fusion() const {
    return PointwiseKernel::of(kMax ? Binary::Maximum : Binary::Minimum);
  }
  // 1 where x wins, 1/2 on ties, 0 where x loses; 1 where a or b is NaN (neither loses)
  static Tensor keep_weight(const Tensor& x_loses, const Tensor& tie, DType dt) {
    return 1 - x_loses.to(dt) - tie.to(dt) * 0.5;
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& a = c.input(0);
    const Tensor& b = c.input(1);
    const DType dt = a.dtype();
    const Tensor tie = eq(a, b);
    return {c.needs_grad(0) ? gy * keep_weight(kMax ? lt(a, b) : gt(a, b), tie, dt) : Tensor(),
            c.needs_grad(1) ? gy * keep_weight(kMax ? gt(a, b) : lt(a, b), tie, dt) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    const Tensor& a = c.input(0);
    const Tensor& b = c.input(1);
    const DType dt = a.dtype();
    const Tensor tie = eq(a, b);
    const Tensor wa = keep_weight(kMax ? lt(a, b) : gt(a, b), tie, dt);
    const Tensor wb = keep_weight(kMax ? gt(a, b) : lt(a, b), tie, dt);
    return ta * wa + tb * wb;
  }
};

struct Where {
  static constexpr const char* name = "where";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& cond, const Tensor& a, const Tensor& b) const {
    return kernels::where(cond, a, b);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::where(); }
  // d where(c, a, b) = where(c, da, db); cond has no gradient
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& cond = c.input(0);
    Tensor zero = zeros({}, gy.dtype());
    return {Tensor(), c.needs_grad(1) ? where(cond, gy, zero) : Tensor(),
            c.needs_grad(2) ? where(cond, zero, gy) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor&, const Tensor& ta, const Tensor& tb) const {
    return where(c.input(0), ta, tb);
  }
};

// x + s, x * s, s - x, s / x: one-input ops with the number as an attribute.
struct AddScalar {
  static constexpr const char* name = "add";
  static constexpr const char* export_name = "add_scalar";
  auto fields() { return std::tie(s); }
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  double s;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::AddScalar, x, s); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::AddScalar, s); }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy; }  // d(x + s) = dx
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx; }
};

struct MulScalar {
  static constexpr const char* name = "mul";
  static constexpr const char* export_name = "mul_scalar";
  auto fields() { return std::tie(s); }
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  double s;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::MulScalar, x, s); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::MulScalar, s); }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy * s; }  // d(s x) = s dx
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx * s; }
};

struct RSubScalar {
  static constexpr const char* name = "rsub";
  auto fields() { return std::tie(s); }
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  double s;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::RSubScalar, x, s); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::RSubScalar, s); }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return -gy; }  // d(s - x) = -dx
  Tensor jvp(const Ctx&, const Tensor& tx) const { return -tx; }
};

struct RDivScalar {
  static constexpr const char* name = "rdiv";
  auto fields() { return std::tie(s); }
  static constexpr Save save = Save::InputsAndOutput;
  static constexpr Batching batching = Batching::Pointwise;
  double s;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::RDivScalar, x, s); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::RDivScalar, s); }
  // d(s / x) = -s/x^2 dx = -(y / x) dx
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return -gy * c.output() / c.input(0); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return -tx * c.output() / c.input(0); }
};

// Casts both operands to their common dtype; Div promotes integers to float (true division).
std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b, const char* op,
                                  bool to_float = false) {
  ADJOINT_CHECK(a.defined() && b.defined(), Value, op, "got an undefined tensor");
  DType dt = result_type(a, b);
  if (to_float && !is_floating(dt)) dt = kDefaultFloat;
  broadcast_shapes(a.shape(), b.shape(), op);  // reports mismatches naming this op
  return {cast_to(a, dt), cast_to(b, dt)};
}

// Comparisons and logical ops: bool results, so nothing to differentiate (Note [Ops without
// derivatives] in src/ops/no_derivative.h). They go through the stack as every op does: vmap
// batches them pointwise, compile records them and export writes their kind.
constexpr const char* compare_name(Binary k) {
  switch (k) {
    case Binary::Eq:
      return "eq";
    case Binary::Ne:
      return "ne";
    case Binary::Lt:
      return "lt";
    case Binary::Le:
      return "le";
    case Binary::Gt:
      return "gt";
    case Binary::Ge:
      return "ge";
    case Binary::And:
      return "logical_and";
    case Binary::Or:
      return "logical_or";
    default:
      return "compare";
  }
}
constexpr const char* compare_name(Unary k) {
  switch (k) {
    case Unary::EqScalar:
      return "eq";
    case Unary::NeScalar:
      return "ne";
    case Unary::LtScalar:
      return "lt";
    case Unary::LeScalar:
      return "le";
    case Unary::GtScalar:
      return "gt";
    case Unary::GeScalar:
      return "ge";
    default:
      return "compare";
  }
}
// The key a file holds a comparison with a number under ("lt_scalar"), apart from the
// comparison of two tensors.
constexpr const char* compare_scalar_key(Unary k) {
  switch (k) {
    case Unary::EqScalar:
      return "eq_scalar";
    case Unary::NeScalar:
      return "ne_scalar";
    case Unary::LtScalar:
      return "lt_scalar";
    case Unary::LeScalar:
      return "le_scalar";
    case Unary::GtScalar:
      return "gt_scalar";
    case Unary::GeScalar:
      return "ge_scalar";
    default:
      return "compare_scalar";
  }
}

template <Binary K>
struct Compare : detail::NoDerivative<2> {
  static constexpr const char* name = compare_name(K);
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& a, const Tensor& b) const { return kernels::binary(K, a, b); }
};

template <Unary K>
struct CompareScalar : detail::NoDerivative<1> {
  static constexpr const char* name = compare_name(K);
  static constexpr const char* export_name = compare_scalar_key(K);
  static constexpr Batching batching = Batching::Pointwise;
  auto fields() { return std::tie(s); }
  double s;
  Tensor forward(const Tensor& x) const { return kernels::unary(K, x, s); }
};

struct LogicalNot : detail::NoDerivative<1> {
  static constexpr const char* name = "logical_not";
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::LogicalNot, x); }
};

template <Binary K>
Tensor compare(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, Compare<K>::name);
  return apply(Compare<K>{}, x, y);
}

template <Unary K>
Tensor compare(const Tensor& a, Scalar s) {
  return apply(CompareScalar<K>{{}, s.to_double()}, cast_to(a, result_type(a, s)));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  auto [x, y] = promote(a, b, "add");
  check_alpha(x.dtype(), alpha, "add");
  if (alpha.to_double() != 1) y = y * alpha;
  ADJOINT_CHECK(x.dtype() != DType::Bool, DType, "add",
                "addition of bool tensors is not supported");
  return apply(Add{}, x, y);
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  auto [x, y] = promote(a, b, "sub");
  check_alpha(x.dtype(), alpha, "sub");
  if (alpha.to_double() != 1) y = y * alpha;
  ADJOINT_CHECK(x.dtype() != DType::Bool, DType, "sub",
                "subtraction of bool tensors is not supported");
  return apply(Sub{}, x, y);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, "mul");
  if (x.dtype() == DType::Bool) return logical_and(x, y);
  return apply(Mul{}, x, y);
}
Tensor div(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, "div", true);
  return apply(Div{}, x, y);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, "pow");
  return apply(Pow{}, x, y);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, "minimum");
  return apply(Extremum<false>{}, x, y);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  auto [x, y] = promote(a, b, "maximum");
  return apply(Extremum<true>{}, x, y);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ADJOINT_CHECK(cond.defined() && cond.dtype() == DType::Bool, DType, "where",
                "condition must be a bool tensor, got ", describe(cond));
  auto [x, y] = promote(a, b, "where");
  broadcast_shapes(broadcast_shapes(cond.shape(), x.shape(), "where"), y.shape(), "where");
  return apply(Where{}, cond, x, y);
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  const DType dt = result_type(a, b);
  // PyTorch wraps the number in a tensor and casts it, so a float32 (or 16-bit) result of
  // where(c, x, 1e300) holds inf where full() would refuse the value: go through float64
  // then (only then: the common case stays one 0-d tensor).
  const double v = b.to_double();
  if (is_floating(dt) && dt != DType::Float64 && b.is_floating() && std::isfinite(v) &&
      dispatch_floating(dt, "where", [&]<class T>() {
        return std::isinf(static_cast<opmath_t<T>>(static_cast<T>(static_cast<opmath_t<T>>(v))));
      }))
    return where(cond, a, scalar_tensor(b, DType::Float64).to(dt));
  return where(cond, a, scalar_tensor(b, dt));
}

Tensor add(const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  ADJOINT_CHECK(dt != DType::Bool, DType, "add", "addition of bool tensors is not supported");
  return apply(AddScalar{b.to_double()}, cast_to(a, dt));
}
Tensor sub(const Tensor& a, Scalar b) {
  if (b.is_floating()) return add(a, -b.to_double());
  // -b wraps for INT64_MIN (negating it is undefined), as x - b does in two's complement
  return add(a, static_cast<int64_t>(0 - static_cast<uint64_t>(b.to_int())));
}
Tensor mul(const Tensor& a, Scalar b) {
  DType dt = result_type(a, b);
  ADJOINT_CHECK(dt != DType::Bool, DType, "mul",
                "multiplying a bool tensor by a bool is not supported");
  return apply(MulScalar{b.to_double()}, cast_to(a, dt));
}
Tensor div(const Tensor& a, Scalar b) {
  Tensor x = to_floating(a);
  return apply(MulScalar{1.0 / b.to_double()}, x);
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator-(Scalar a, const Tensor& b) {
  return apply(RSubScalar{a.to_double()}, cast_to(b, result_type(b, a)));
}
Tensor operator/(Scalar a, const Tensor& b) {
  return apply(RDivScalar{a.to_double()}, to_floating(b));
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare<Binary::Eq>(a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare<Binary::Ne>(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare<Binary::Lt>(a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare<Binary::Le>(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare<Binary::Gt>(a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare<Binary::Ge>(a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare<Unary::EqScalar>(a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare<Unary::NeScalar>(a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare<Unary::LtScalar>(a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare<Unary::LeScalar>(a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare<Unary::GtScalar>(a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare<Unary::GeScalar>(a, b); }
Tensor logical_not(const Tensor& x) {
  ADJOINT_CHECK(x.defined(), Value, "logical_not", "got an undefined tensor");
  return apply(LogicalNot{}, x);
}
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare<Binary::And>(a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare<Binary::Or>(a, b); }

Tensor Tensor::add(const Tensor& o) const { return adjoint::add(*this, o); }
Tensor Tensor::sub(const Tensor& o) const { return adjoint::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return adjoint::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return adjoint::div(*this, o); }
Tensor Tensor::eq(const Tensor& o) const { return adjoint::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return adjoint::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return adjoint::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return adjoint::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return adjoint::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return adjoint::ge(*this, o); }

}  // namespace adjoint

ADJOINT_OPS_FILE(binary)
