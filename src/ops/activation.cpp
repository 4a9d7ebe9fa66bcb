// Activations: relu, leaky_relu, sigmoid, gelu (erf and tanh forms), silu, softplus, clamp.
// Each has its own forward kernel (one pass over memory) and a pointwise derivative factor, so
// VJP = gy * f'(x) and JVP = tx * f'(x): a fused gradient primitive for relu, sigmoid and gelu
// (relu_backward, sigmoid_backward, gelu_backward), a factor written with ops for the others.
#include <cmath>

#include "adjoint/error.h"
#include "core/op_fields.h"
#include "core/scalar_convert.h"
#include "ops/backward_ops.h"
#include "ops/common.h"

namespace adjoint {

namespace {

// relu_backward(gy, y) = gy [y > 0] in one kernel; linear in gy (d/dgy = [y > 0]) and
// piecewise constant in y (d/dy = 0), so it is its own VJP and JVP. See Note [NaN in relu].
struct ReluBackward {
  static constexpr const char* name = "relu_backward";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& gy, const Tensor& y) const {
    return kernels::binary(Binary::ReluBackward, gy, y);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::ReluBackward); }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    return {c.needs_grad(0) ? relu_backward(g, c.input(1)) : Tensor(),
            c.needs_grad(1) ? zeros_like(c.input(1)) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor&) const {
    return relu_backward(t_gy, c.input(1));
  }
};

// Note [NaN in relu]
// As PyTorch: relu(NaN) = NaN (relu is clamp_min(x, 0), and a NaN fails every comparison), and
// the gradient keeps gy where y is NaN, since PyTorch's threshold_backward zeroes where
// y <= 0 and passes gy elsewhere. So the mask is [not y <= 0], which equals [y > 0] except
// at NaN; a NaN input then shows up in both the output and (through gy) the gradient.
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr Save save = Save::Output;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Relu, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Relu); }
  // d/dx max(x, 0) = [x > 0] = [y > 0]
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return relu_backward(gy, c.output()); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return relu_backward(tx, c.output()); }
};

struct LeakyRelu : Pointwise<LeakyRelu> {
  static constexpr const char* name = "leaky_relu";
  auto fields() { return std::tie(slope); }
  static constexpr Save save = Save::Inputs;
  double slope;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::LeakyRelu, x, slope); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::LeakyRelu, slope); }
  // d/dx = 1 for x > 0, slope otherwise
  Tensor factor(const Ctx& c) const {
    Tensor pos = gt(c.input(0), 0).to(c.input(0).dtype());
    return pos * (1 - slope) + slope;
  }
};

// sigmoid_backward(gy, y) = gy y (1 - y) as one kernel, differentiable itself:
// d/dgy = y (1 - y), d/dy = gy (1 - 2y).
struct SigmoidBackward {
  static constexpr const char* name = "sigmoid_backward";
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& gy, const Tensor& y) const {
    return kernels::binary(Binary::SigmoidBackward, gy, y);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Binary::SigmoidBackward); }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& gy = c.input(0);
    const Tensor& y = c.input(1);
    return {c.needs_grad(0) ? sigmoid_backward(g, y) : Tensor(),
            c.needs_grad(1) ? g * gy * (1 - y * 2) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_y) const {
    return sigmoid_backward(t_gy, c.input(1)) + c.input(0) * (1 - c.input(1) * 2) * t_y;
  }
};

struct Sigmoid {
  static constexpr const char* name = "sigmoid";
  static constexpr Save save = Save::Output;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Sigmoid, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Sigmoid); }
  // d/dx sigmoid(x) = y (1 - y)
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return sigmoid_backward(gy, c.output()); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return sigmoid_backward(tx, c.output()); }
};

// gelu''(x) written with ops, for the derivatives of gelu_backward.
Tensor gelu_second_derivative(const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::None) {
    // d/dx (Φ(x) + x φ(x)) = 2 φ(x) + x φ'(x) = φ(x) (2 - x^2)
    Tensor pdf = exp(x.square() * -0.5) * (M_2_SQRTPI * M_SQRT1_2 * 0.5);
    return pdf * (2 - x.square());
  }
  // t = tanh(k (x + c x^3)), w = dt/dx / (1 - t^2) = k (1 + 3 c x^2):
  // d/dx (0.5 (1 + t) + 0.5 x (1 - t^2) w) = (1 - t^2) (w - x t w^2 + 3 k c x^2)
  const double k = 0.7978845608028654, c = 0.044715;
  Tensor x2 = x.square();
  Tensor t = tanh((x + x * x2 * c) * k);
  Tensor w = (x2 * (3 * c) + 1) * k;
  return (1 - t.square()) * (w - x * t * w.square() + x2 * (3 * k * c));
}

// gelu_backward(gy, x) = gy gelu'(x) in one kernel: linear in gy (d/dgy = gelu'(x)), and
// d/dx = gy gelu''(x), written with ops.
struct GeluBackward {
  static constexpr const char* name = "gelu_backward";
  auto fields() { return std::tie(approximate); }
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  GeluApproximation approximate;
  Tensor forward(const Tensor& gy, const Tensor& x) const {
    return kernels::binary(
        approximate == GeluApproximation::Tanh ? Binary::GeluTanhBackward : Binary::GeluErfBackward,
        gy, x);
  }
  PointwiseKernel fusion() const {
    return PointwiseKernel::of(approximate == GeluApproximation::Tanh ? Binary::GeluTanhBackward
                                                                      : Binary::GeluErfBackward);
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& gy = c.input(0);
    const Tensor& x = c.input(1);
    return {c.needs_grad(0) ? gelu_backward(g, x, approximate) : Tensor(),
            c.needs_grad(1) ? g * gy * gelu_second_derivative(x, approximate) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_x) const {
    const Tensor& x = c.input(1);
    return gelu_backward(t_gy, x, approximate) +
           c.input(0) * gelu_second_derivative(x, approximate) * t_x;
  }
};

struct Gelu {
  static constexpr const char* name = "gelu";
  auto fields() { return std::tie(approximate); }
  static constexpr Save save = Save::Inputs;
  static constexpr Batching batching = Batching::Pointwise;
  GeluApproximation approximate;
  Tensor forward(const Tensor& x) const {
    return kernels::unary(approximate == GeluApproximation::Tanh ? Unary::GeluTanh : Unary::GeluErf,
                          x);
  }
  PointwiseKernel fusion() const {
    return PointwiseKernel::of(approximate == GeluApproximation::Tanh ? Unary::GeluTanh
                                                                      : Unary::GeluErf);
  }
  // erf form: d/dx x Φ(x) = Φ(x) + x φ(x); tanh form, u = k (x + 0.044715 x^3), t = tanh(u):
  // d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return gelu_backward(gy, c.input(0), approximate);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return gelu_backward(tx, c.input(0), approximate);
  }
};

struct Silu : Pointwise<Silu> {
  static constexpr const char* name = "silu";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Silu, x); }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Silu); }
  // d/dx x s(x) = s (1 + x (1 - s))
  Tensor factor(const Ctx& c) const {
    Tensor s = sigmoid(c.input(0));
    return s * (c.input(0) * (1 - s) + 1);
  }
};

struct Softplus : Pointwise<Softplus> {
  static constexpr const char* name = "softplus";
  auto fields() { return std::tie(beta, threshold); }
  static constexpr Save save = Save::Inputs;
  double beta, threshold;
  Tensor forward(const Tensor& x) const {
    return kernels::unary(Unary::Softplus, x, beta, threshold);
  }
  PointwiseKernel fusion() const { return PointwiseKernel::of(Unary::Softplus, beta, threshold); }
  // d/dx log(1 + exp(beta x)) / beta = sigmoid(beta x); 1 above the threshold (linear region)
  Tensor factor(const Ctx& c) const {
    const Tensor& x = c.input(0);
    return where(gt(x * beta, threshold), ones_like(x), sigmoid(x * beta));
  }
};

struct Clamp : Pointwise<Clamp> {
  static constexpr const char* name = "clamp";
  auto fields() { return std::tie(lo, hi); }
  static constexpr Save save = Save::Inputs;
  std::optional<double> lo, hi;
  Tensor forward(const Tensor& x) const {
    Tensor y = x;
    if (lo) y = kernels::unary(Unary::ClampMin, y, *lo);
    if (hi) y = kernels::unary(Unary::ClampMax, y, *hi);
    return y.is_same(x) ? kernels::cast(x, x.dtype()) : y;
  }
  // d/dx clamp(x, lo, hi) = [lo <= x <= hi]
  Tensor factor(const Ctx& c) const {
    const Tensor& x = c.input(0);
    Tensor inside = ones_like(x).to(DType::Bool);
    if (lo) inside = logical_and(inside, ge(x, *lo));
    if (hi) inside = logical_and(inside, le(x, *hi));
    return inside.to(x.dtype());
  }
};

}  // namespace

Tensor relu(const Tensor& x) { return apply(Relu{}, x); }
Tensor relu_backward(const Tensor& gy, const Tensor& y) {
  if (gy.dtype() != y.dtype()) return relu_backward(gy.to(y.dtype()), y);
  return apply(ReluBackward{}, gy, y);
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return apply(LeakyRelu{{}, slope}, to_floating(x));
}
Tensor sigmoid(const Tensor& x) { return apply(Sigmoid{}, to_floating(x)); }
Tensor sigmoid_backward(const Tensor& gy, const Tensor& y) {
  if (gy.dtype() != y.dtype()) return sigmoid_backward(gy.to(y.dtype()), y);
  return apply(SigmoidBackward{}, gy, y);
}
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return apply(Gelu{approximate}, to_floating(x));
}
Tensor gelu_backward(const Tensor& gy, const Tensor& x, GeluApproximation approximate) {
  if (gy.dtype() != x.dtype()) return gelu_backward(gy.to(x.dtype()), x, approximate);
  return apply(GeluBackward{approximate}, gy, x);
}
Tensor silu(const Tensor& x) { return apply(Silu{}, to_floating(x)); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  ADJOINT_CHECK(beta != 0, Value, "softplus", "beta must be nonzero");
  return apply(Softplus{{}, beta, threshold}, to_floating(x));
}
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  ADJOINT_CHECK(lo || hi, Value, "clamp", "at least one of min and max must be given");
  ADJOINT_CHECK(x.dtype() != DType::Bool, DType, "clamp",
                "clamp is not supported for bool tensors");
  // An integer tensor clamped by a bound no int64 holds exactly (0.5, -inf, NaN, 1e30) is
  // computed in floating point, as PyTorch promotes for a float bound; an integral bound keeps
  // the integer dtype.
  auto integral = [](std::optional<double> v) {
    return !v || (detail::fits_int64(*v) && *v == std::trunc(*v));
  };
  if (!is_floating(x.dtype()) && !(integral(lo) && integral(hi)))
    return apply(Clamp{{}, lo, hi}, x.to(kDefaultFloat));
  return apply(Clamp{{}, lo, hi}, x);
}

Tensor Tensor::sigmoid() const { return adjoint::sigmoid(*this); }
Tensor Tensor::relu() const { return adjoint::relu(*this); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const {
  return adjoint::clamp(*this, lo, hi);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(activation)
