// Each elementwise kind's own name (kernels::kind_name).
#include "backend/kernels.h"

namespace adjoint::kernels {

const char* kind_name(Unary k) {
  switch (k) {
    case Unary::Neg:
      return "neg";
    case Unary::Exp:
      return "exp";
    case Unary::Log:
      return "log";
    case Unary::Log1p:
      return "log1p";
    case Unary::Expm1:
      return "expm1";
    case Unary::Sqrt:
      return "sqrt";
    case Unary::Rsqrt:
      return "rsqrt";
    case Unary::Abs:
      return "abs";
    case Unary::Sign:
      return "sign";
    case Unary::Sin:
      return "sin";
    case Unary::Cos:
      return "cos";
    case Unary::Tan:
      return "tan";
    case Unary::Tanh:
      return "tanh";
    case Unary::Erf:
      return "erf";
    case Unary::Sigmoid:
      return "sigmoid";
    case Unary::Relu:
      return "relu";
    case Unary::Reciprocal:
      return "reciprocal";
    case Unary::Square:
      return "square";
    case Unary::LeakyRelu:
      return "leaky_relu";
    case Unary::Softplus:
      return "softplus";
    case Unary::ClampMin:
      return "clamp_min";
    case Unary::ClampMax:
      return "clamp_max";
    case Unary::AddScalar:
      return "add_scalar";
    case Unary::MulScalar:
      return "mul_scalar";
    case Unary::RSubScalar:
      return "rsub_scalar";
    case Unary::RDivScalar:
      return "rdiv_scalar";
    case Unary::PowScalar:
      return "pow_scalar";
    case Unary::RPowScalar:
      return "rpow_scalar";
    case Unary::GeluErf:
      return "gelu_erf";
    case Unary::GeluTanh:
      return "gelu_tanh";
    case Unary::Silu:
      return "silu";
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
    case Unary::LogicalNot:
      return "logical_not";
  }
  return "?";
}

const char* kind_name(Binary k) {
  switch (k) {
    case Binary::Add:
      return "add";
    case Binary::Sub:
      return "sub";
    case Binary::Mul:
      return "mul";
    case Binary::Div:
      return "div";
    case Binary::Pow:
      return "pow";
    case Binary::Minimum:
      return "minimum";
    case Binary::Maximum:
      return "maximum";
    case Binary::TanhBackward:
      return "tanh_backward";
    case Binary::SigmoidBackward:
      return "sigmoid_backward";
    case Binary::ReluBackward:
      return "relu_backward";
    case Binary::GeluTanhBackward:
      return "gelu_tanh_backward";
    case Binary::GeluErfBackward:
      return "gelu_erf_backward";
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
      return "and";
    case Binary::Or:
      return "or";
  }
  return "?";
}

}  // namespace adjoint::kernels
