// The kernel table: every computation ops perform goes through these functions, keyed by a
// kind enum. Kernels see plain tensors (no autograd), allocate their outputs contiguously and
// accept any strides on input. This is the CPU backend; a CUDA backend adds a second table.
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
Tensor unary(Unary kind, const Tensor& x, double a = 0, double b = 0);
/// unary() into an existing tensor of x's shape and the result dtype; out may be x itself.
void unary_into(Unary kind, const Tensor& out, const Tensor& x, double a = 0, double b = 0);

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
Tensor binary(Binary kind, const Tensor& a, const Tensor& b);

/// Each kind's own name ("mul_scalar", "tanh_backward"): compile's program listings. The
/// errors of kinds that one op has several of (clamp_min and clamp_max) name the op instead.
const char* kind_name(Unary kind);
const char* kind_name(Binary kind);
/// binary() into an existing tensor of the broadcast shape; out may be a itself (in-place ops).
void binary_into(Binary kind, const Tensor& out, const Tensor& a, const Tensor& b);
/// One contiguous block of n elements of float or double, computed exactly as unary() and
/// binary() compute each element (the same functions): compile's fused loops. Not for the
/// kinds that give bool. `out` may be an input.
template <class T>
void unary_block(Unary kind, const T* in, T* out, int64_t n, double a = 0, double b = 0);
template <class T>
void binary_block(Binary kind, const T* x, const T* y, T* out, int64_t n);

/// out += alpha * x (x broadcasts to out, same dtype): the optimizer step in one pass.
void add_scaled_into(const Tensor& out, const Tensor& x, double alpha);

/// cond ? a : b with broadcasting; a and b share a dtype, cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

/// A contiguous copy converted to `dtype`.
Tensor cast(const Tensor& x, DType dtype);
/// dst[...] = src[...], broadcasting src to dst's shape and converting dtype; dst may be strided.
void copy_into(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, Scalar value);

enum class Reduce { Sum, Prod, Max, Min };
/// Reduces over `dims` (wrapped, any order; empty means all). Sum of bool/int64 gives int64.
Tensor reduce(Reduce kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
/// prod's derivative: out_i = prod_{j != i} x_j over each slice of `dims` (normalized), shaped
/// like x; floating x (cpu/exclusive_products.cpp).
Tensor exclusive_products(const Tensor& x, const std::vector<int64_t>& dims);
enum class ArgReduce { ArgMax, ArgMin };
/// Index of the first max (min) along `dim`, int64.
Tensor arg_reduce(ArgReduce kind, const Tensor& x, int64_t dim, bool keepdim);

/// Batched matrix product of [..., m, k] and [..., k, n] tensors whose batch dims are equal
/// (the ops layer broadcasts first). Either operand may be a transposed view: no copy then.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x Wᵀ + bias for x [rows, in], W [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
/// c += a b for 2-d a [m, k], b [k, n] and a contiguous c [m, n] of their dtype, in one BLAS
/// call with beta = 1 (c must not overlap a or b).
void matmul_add_into(const Tensor& c, const Tensor& a, const Tensor& b);
/// c += float32(matmul(a, b)) for 2-d float16/bfloat16 a and b and a contiguous float32 c: the
/// bits of the 16-bit product, widened and added in one pass (Note [Adding into .grad through
/// a cast]): the float32 product is rounded to 16 bits in the pass that adds it.
void matmul_widened_add_into(const Tensor& c, const Tensor& a, const Tensor& b);
/// out += float32(x rounded to `dtype`) for a contiguous float32 out and a contiguous x of its
/// shape, either float32 (rounded to the 16-bit `dtype`, then widened) or of `dtype` (widened).
void add_widened_into(const Tensor& out, const Tensor& x, DType dtype);

// Indexing: index is int64; bounds are checked and reported with `op`.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const char* op);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const char* op);
/// A copy of x with src added at index along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   const char* op);
/// A copy of x with source's slices added at index along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 const char* op);

/// Numerically stable softmax (or log-softmax) along dim.
Tensor softmax(const Tensor& x, int64_t dim, bool log);
/// The gradient of softmax (log = false) or log-softmax along dim given its output y:
/// y (gy - sum(gy y)), or gy - exp(y) sum(gy). gy and y share a dtype and broadcast; the result
/// has the broadcast shape and `dim` is wrapped against it.
Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim, bool log);
/// softmax(masked_fill(x, mask, -inf), dim) with masked entries (and all-masked rows) exactly
/// 0; the bool mask broadcasts to x (src/backend/cpu/masked_softmax.cpp).
Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim);

// Factories and random fills (contiguous dst).
void arange(const Tensor& dst, double start, double step);
void uniform(const Tensor& dst, double low, double high, Generator& gen);
void normal(const Tensor& dst, double mean, double std, Generator& gen);
void randint(const Tensor& dst, int64_t low, int64_t high, Generator& gen);

}  // namespace adjoint::kernels
