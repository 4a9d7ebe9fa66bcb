// Pointwise unary ops. Each rule's derivative is a pointwise factor f'(x), so the VJP is
// gy * f'(x) and the JVP is tx * f'(x); `factor` computes it from what was saved.
#include <cmath>

#include "adjoint/error.h"
#include "core/op_fields.h"
#include "ops/backward_ops.h"
#include "ops/common.h"

namespace adjoint {

namespace {

struct Neg {
  static constexpr const char* name = "neg";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Neg, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Neg); }
  // d/dx (-x) = -1
  Tensor vjp(const Ctx&, const Tensor& gy) const { return -gy; }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return -tx; }
};

struct Exp : Pointwise<Exp> {
  static constexpr const char* name = "exp";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Exp, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Exp); }
  // d/dx exp(x) = exp(x)
  static Tensor factor(const Ctx& c) { return c.output(); }
};

struct Log {
  static constexpr const char* name = "log";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Log, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Log); }
  // d/dx log(x) = 1/x
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy / c.input(0); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx / c.input(0); }
};

struct Log1p {
  static constexpr const char* name = "log1p";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Log1p, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Log1p); }
  // d/dx log(1 + x) = 1/(1 + x)
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy / (c.input(0) + 1); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx / (c.input(0) + 1); }
};

struct Expm1 : Pointwise<Expm1> {
  static constexpr const char* name = "expm1";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Expm1, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Expm1); }
  // d/dx (exp(x) - 1) = exp(x) = y + 1
  static Tensor factor(const Ctx& c) { return c.output() + 1; }
};

struct Sqrt {
  static constexpr const char* name = "sqrt";
  static constexpr Save save = Save::Output;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Sqrt, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Sqrt); }
  // d/dx sqrt(x) = 1 / (2 sqrt(x))
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy / (c.output() * 2); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx / (c.output() * 2); }
};

struct Rsqrt : Pointwise<Rsqrt> {
  static constexpr const char* name = "rsqrt";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Rsqrt, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Rsqrt); }
  // d/dx x^(-1/2) = -1/2 x^(-3/2) = -y^3 / 2
  static Tensor factor(const Ctx& c) { return c.output().pow(3) * -0.5; }
};

struct Abs : Pointwise<Abs> {
  static constexpr const char* name = "abs";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Abs, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Abs); }
  // d/dx |x| = sign(x) (0 at 0, as PyTorch)
  static Tensor factor(const Ctx& c) { return sign(c.input(0)); }
};

struct Sign {
  static constexpr const char* name = "sign";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Sign, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Sign); }
  // d/dx sign(x) = 0 almost everywhere
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy * 0; }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx * 0; }
};

struct Sin : Pointwise<Sin> {
  static constexpr const char* name = "sin";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Sin, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Sin); }
  // d/dx sin(x) = cos(x)
  static Tensor factor(const Ctx& c) { return cos(c.input(0)); }
};

struct Cos : Pointwise<Cos> {
  static constexpr const char* name = "cos";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Cos, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Cos); }
  // d/dx cos(x) = -sin(x)
  static Tensor factor(const Ctx& c) { return -sin(c.input(0)); }
};

struct Tan : Pointwise<Tan> {
  static constexpr const char* name = "tan";
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Tan, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Tan); }
  // d/dx tan(x) = 1 + tan(x)^2
  static Tensor factor(const Ctx& c) { return c.output().square() + 1; }
};

// tanh_backward(gy, y) = gy (1 - y^2): tanh's VJP as one kernel. It is itself an op, so
// double backward works: d/dgy = 1 - y^2, d/dy = -2 gy y.
struct TanhBackward {
  static constexpr const char* name = "tanh_backward";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& gy, const Tensor& y) const {
    return kernels::binary(Binary::TanhBackward, gy, y);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::TanhBackward); }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& gy = c.input(0);
    const Tensor& y = c.input(1);
    return {c.needs_grad(0) ? tanh_backward(g, y) : Tensor(),
            c.needs_grad(1) ? g * gy * y * -2 : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_y) const {
    return tanh_backward(t_gy, c.input(1)) - c.input(0) * c.input(1) * t_y * 2;
  }
};

struct Tanh {
  static constexpr const char* name = "tanh";
  static constexpr Save save = Save::Output;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Tanh, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Tanh); }
  // d/dx tanh(x) = 1 - tanh(x)^2
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return tanh_backward(gy, c.output()); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tanh_backward(tx, c.output()); }
};

struct Erf : Pointwise<Erf> {
  static constexpr const char* name = "erf";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Erf, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Erf); }
  // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
  static Tensor factor(const Ctx& c) { return exp(-c.input(0).square()) * M_2_SQRTPI; }
};

struct Square : Pointwise<Square> {
  static constexpr const char* name = "square";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Square, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Square); }
  // d/dx x^2 = 2x
  static Tensor factor(const Ctx& c) { return c.input(0) * 2; }
};

struct PowScalar {
  static constexpr const char* name = "pow";
  static constexpr const char* export_name = "pow_scalar";
  auto fields() { return std::tie(p); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  double p;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::PowScalar, x, p); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::PowScalar, p); }
  // d/dx x^p = p x^(p-1)
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy * factor(c); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx * factor(c); }
  Tensor factor(const Ctx& c) const {
    if (p == 0) return zeros_like(c.input(0));
    if (p == 1) return ones_like(c.input(0));
    if (p == 2) return c.input(0) * 2;
    return c.input(0).pow(p - 1) * p;
  }
};

struct RPowScalar {
  static constexpr const char* name = "pow";
  static constexpr const char* export_name = "rpow_scalar";
  auto fields() { return std::tie(base); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  static constexpr Batching batching = Batching::Pointwise;
  double base;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::RPowScalar, x, base); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::RPowScalar, base); }
  // d/dx b^x = b^x log(b)
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy * c.output() * std::log(base); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx * c.output() * std::log(base); }
};

}  // namespace

Tensor neg(const Tensor& x) {
  ADJOINT_CHECK(x.dtype() != DType::Bool, DType, "neg",
                "negation of a bool tensor is not supported; use logical_not");
  return apply(Neg{}, x);
}
Tensor exp(const Tensor& x) { return apply(Exp{}, to_floating(x)); }
Tensor log(const Tensor& x) { return apply(Log{}, to_floating(x)); }
Tensor log1p(const Tensor& x) { return apply(Log1p{}, to_floating(x)); }
Tensor expm1(const Tensor& x) { return apply(Expm1{}, to_floating(x)); }
Tensor sqrt(const Tensor& x) { return apply(Sqrt{}, to_floating(x)); }
Tensor rsqrt(const Tensor& x) { return apply(Rsqrt{}, to_floating(x)); }
Tensor abs(const Tensor& x) { return apply(Abs{}, x); }  // bool: the kernel raises, as PyTorch
Tensor sign(const Tensor& x) {
  if (x.dtype() == DType::Bool) return x.clone();  // sign of false/true is false/true (PyTorch)
  return apply(Sign{}, x);
}
Tensor sin(const Tensor& x) { return apply(Sin{}, to_floating(x)); }
Tensor cos(const Tensor& x) { return apply(Cos{}, to_floating(x)); }
Tensor tan(const Tensor& x) { return apply(Tan{}, to_floating(x)); }
Tensor tanh(const Tensor& x) { return apply(Tanh{}, to_floating(x)); }
Tensor tanh_backward(const Tensor& gy, const Tensor& y) {
  if (gy.dtype() != y.dtype()) return tanh_backward(gy.to(y.dtype()), y);
  return apply(TanhBackward{}, gy, y);
}
Tensor erf(const Tensor& x) { return apply(Erf{}, to_floating(x)); }
Tensor square(const Tensor& x) {
  // PyTorch's square is pow(x, 2): a bool tensor promotes to int64.
  if (x.dtype() == DType::Bool) return apply(Square{}, x.to(DType::Int64));
  return apply(Square{}, x);
}

Tensor pow(const Tensor& x, Scalar exponent) {
  if (!is_floating(x.dtype()) && exponent.is_floating()) return pow(x.to(kDefaultFloat), exponent);
  if (x.dtype() == DType::Bool) return pow(x.to(DType::Int64), exponent);  // as PyTorch
  if (!is_floating(x.dtype()))
    ADJOINT_CHECK(exponent.to_int() >= 0, Value, "pow",
                  "integers to negative integer powers are not allowed");
  return apply(PowScalar{exponent.to_double()}, x);
}

Tensor pow(Scalar base, const Tensor& exponent) {
  Tensor e = is_floating(exponent.dtype()) ? exponent : exponent.to(kDefaultFloat);
  return apply(RPowScalar{base.to_double()}, e);
}

Tensor Tensor::neg() const { return adjoint::neg(*this); }
Tensor Tensor::exp() const { return adjoint::exp(*this); }
Tensor Tensor::log() const { return adjoint::log(*this); }
Tensor Tensor::log1p() const { return adjoint::log1p(*this); }
Tensor Tensor::expm1() const { return adjoint::expm1(*this); }
Tensor Tensor::sqrt() const { return adjoint::sqrt(*this); }
Tensor Tensor::rsqrt() const { return adjoint::rsqrt(*this); }
Tensor Tensor::abs() const { return adjoint::abs(*this); }
Tensor Tensor::sign() const { return adjoint::sign(*this); }
Tensor Tensor::sin() const { return adjoint::sin(*this); }
Tensor Tensor::cos() const { return adjoint::cos(*this); }
Tensor Tensor::tan() const { return adjoint::tan(*this); }
Tensor Tensor::tanh() const { return adjoint::tanh(*this); }
Tensor Tensor::square() const { return adjoint::square(*this); }
Tensor Tensor::pow(Scalar exponent) const { return adjoint::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return adjoint::pow(*this, exponent); }

}  // namespace adjoint

ADJOINT_OPS_FILE(unary)
