// The kernels: every computation ops perform goes through these functions, keyed by a kind
// enum. Each call goes to its inputs' device's implementation (Note [The kernel table] in
// backend/device_kernels.h): cpu/ computes, meta/ only infers shapes and dtypes.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/scalar.h"
#include "adjoint/tensor.h"

namespace adjoint::kernels {

// Unary kinds, some with parameters a and b. Comparisons with a scalar give bool.
enum class Unary {
  Neg,
  Exp,
  Log,
  Log1p,
  Expm1,
  Sqrt,
  Rsqrt,
  Abs,
  Sign,
  Sin,
  Cos,
  Tan,
  Tanh,
  Erf,
  Sigmoid,
  Relu,
  Reciprocal,
  Square,
  LeakyRelu,   // a = negative slope
  Softplus,    // a = beta, b = threshold
  ClampMin,    // max(x, a)
  ClampMax,    // min(x, a)
  AddScalar,   // x + a
  MulScalar,   // x * a
  RSubScalar,  // a - x
  RDivScalar,  // a / x
  PowScalar,   // x ^ a
  RPowScalar,  // a ^ x
  GeluErf,
  GeluTanh,
  Silu,
  EqScalar,
  NeScalar,
  LtScalar,
  LeScalar,
  GtScalar,
  GeScalar,
  LogicalNot,  // -> bool
};

// Binary kinds; both operands have the same dtype and broadcast. Comparisons give bool.
// TanhBackward(gy, y) = gy (1 - y^2), SigmoidBackward(gy, y) = gy y (1 - y),
// ReluBackward(gy, y) = gy [!(y <= 0)] (gy at NaN), GeluTanhBackward(gy, x) = gy gelu_tanh'(x) and
// GeluErfBackward(gy, x) = gy gelu'(x): the fused gradients of the common activations.
enum class Binary {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Minimum,
  Maximum,
  TanhBackward,
  SigmoidBackward,
  ReluBackward,
  GeluTanhBackward,
  GeluErfBackward,
  Eq,  // first of the kinds that give bool
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  And,
  Or,
};

/// Each kind's own name ("mul_scalar", "tanh_backward"): compile's program listings. The
/// errors of kinds that one op has several of (clamp_min and clamp_max) name the op instead.
const char* kind_name(Unary kind);
const char* kind_name(Binary kind);
/// One contiguous block of n elements of float or double, computed exactly as unary() and
/// binary() compute each element (the same functions): compile's fused loops. Not for the
/// kinds that give bool. `out` may be an input.
template <class T>
void unary_block(Unary kind, const T* in, T* out, int64_t n, double a = 0, double b = 0);
template <class T>
void binary_block(Binary kind, const T* x, const T* y, T* out, int64_t n);

/// A multiply (MulScalar) or add (AddScalar) by a constant that a kernel applies to each result
/// before storing it (its epilogue) or to its first operand as it loads it (its prologue): one
/// correctly rounded operation, so the bits are those of unary(MulScalar or AddScalar) run as
/// a pass of its own. Compile's fused loop merges such passes into their neighbours this way:
/// a simple pass costs its stores (Note [Epilogues] in src/compile/merge_scalar_steps.cpp).
enum class ScalarStep { None, MulScalar, AddScalar };

enum class Reduce { Sum, Prod, Max, Min };
enum class ArgReduce { ArgMax, ArgMin };

// The kernels of this family, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/core.inc"

}  // namespace adjoint::kernels
