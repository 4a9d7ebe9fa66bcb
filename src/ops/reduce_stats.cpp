// Statistical reductions: var and std (composites of mean, sub, square and sum), prod (its own
// op, with a zero-safe VJP), logsumexp (stable composite) and the vector p-norm (p = 2 is its
// own op so that its gradient at the zero vector is 0). Sum and mean are in reduce.cpp; max,
// min, amax, amin and the arg-reductions are in reduce_extrema.cpp.
#include <cmath>
#include <limits>

#include "adjoint/error.h"
#include "core/op_fields.h"
#include "ops/reduce_util.h"

namespace adjoint {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_floating(const Tensor& x, const char* op) {
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op,
                "expected a floating tensor (convert with to()), got ", describe(x));
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[d];
  return n;
}

/// A reduced tensor (output shape of a reduction) in keepdim form, so it broadcasts against x.
Tensor keep(const Tensor& r, const Shape& input_shape, const std::vector<int64_t>& dims,
            bool keepdim) {
  return keepdim ? r : r.reshape(keepdim_shape(input_shape, dims));
}

// Note [Zero-safe prod gradient]
// d/dx_i prod(x) = prod_{j != i} x_j. Dividing the output by x_i is exact only when no element
// is zero, so that fast path is taken when x has no zeros. Otherwise, per reduced slice, with
// p = the product of its non-zero elements and z = its number of zeros:
//   z == 0: p / x_i
//   z == 1: p at the zero element; x_0 * p / x_i elsewhere, where x_0 (= 0) is the zero
//           element's value, kept as a differentiable factor so second derivatives are exact
//   z >= 2: 0 (the first derivatives are exact; second derivatives are not: they would need
//           a product over all but two elements)
// Everything is written with differentiable ops and divides only by non-zero values, so
// double backward works and no NaN leaks through an unselected branch of where.
struct Prod {
  static constexpr const char* name = "prod";
  auto fields() { return std::tie(dims, keepdim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  std::vector<int64_t> dims;  // normalized
  bool keepdim;
  Tensor forward(const Tensor& x) const {
    return kernels::reduce(kernels::Reduce::Prod, x, dims, keepdim);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return reduced_spec(spec_of(in, 0, name), dims, keepdim, name);
  }
  // d/dx_i prod(x) = prod_{j != i} x_j, shaped like x. See Note [Zero-safe prod gradient].
  Tensor partials(const Ctx& c) const {
    const Tensor& x = c.input(0);
    // (a batched x cannot be read: the zero-safe way is right for every example)
    const bool has_zero = detail::batch_level(x) != 0 || eq(x, 0).sum().item<int64_t>() > 0;
    if (!has_zero) return keep(c.output(), c.input_shape(0), dims, keepdim) / x;
    Tensor nonzero = ne(x, 0);
    Tensor safe = where(nonzero, x, 1.0);
    Tensor p = prod(safe, dims, true);
    Tensor is_zero = logical_not(nonzero);
    Tensor zeros_in_slice = sum(is_zero, dims, true);
    Tensor ratio = p / safe;
    Tensor zero_value = sum(where(is_zero, x, 0.0), dims, true);
    Tensor one_zero = where(nonzero, zero_value * ratio, p);
    return where(eq(zeros_in_slice, 0), ratio, where(eq(zeros_in_slice, 1), one_zero, 0.0));
  }
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return keep(gy, c.input_shape(0), dims, keepdim) * partials(c);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return sum(tx * partials(c), dims, keepdim); }
  Tensor vmap(const BatchArgs& b) const {
    const detail::BatchedReduction r = detail::batched_reduction(b, dims, keepdim);
    return apply(Prod{r.dims, r.keepdim}, r.x);
  }
};

// The Euclidean norm sqrt(sum(x^2)). Narrower inputs are squared and summed in float64 so that
// values above 1e19 do not overflow.
struct Norm2 {
  static constexpr const char* name = "norm";
  auto fields() { return std::tie(dims, keepdim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  std::vector<int64_t> dims;  // normalized
  bool keepdim;
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return reduced_spec(spec_of(in, 0, name), dims, keepdim, name);
  }
  Tensor forward(const Tensor& x) const {
    Tensor wide = x.dtype() != DType::Float64 ? kernels::cast(x, DType::Float64) : x;
    Tensor sq = kernels::unary(Unary::Square, wide);
    Tensor n =
        kernels::unary(Unary::Sqrt, kernels::reduce(kernels::Reduce::Sum, sq, dims, keepdim));
    return n.dtype() == x.dtype() ? n : kernels::cast(n, x.dtype());
  }
  // s / ||x||, and 0 where ||x|| = 0 (as PyTorch); s has the output's shape.
  static Tensor over_norm(const Tensor& s, const Tensor& y) {
    Tensor nonzero = ne(y, 0);
    return where(nonzero, s / where(nonzero, y, 1.0), 0.0);
  }
  // d||x|| = <x, dx> / ||x||: dx_i = gy x_i / ||x|| (0 at the zero vector)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    const Shape& shape = c.input_shape(0);
    return keep(over_norm(gy, c.output()), shape, dims, keepdim) * c.input(0);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return over_norm(sum(c.input(0) * tx, dims, keepdim), c.output());
  }
  Tensor vmap(const BatchArgs& b) const {
    const detail::BatchedReduction r = detail::batched_reduction(b, dims, keepdim);
    return apply(Norm2{r.dims, r.keepdim}, r.x);
  }
};

}  // namespace

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  check_floating(x, "var");
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "var");
  const int64_t n = reduced_count(x.shape(), d);
  // var = sum((x - mean)^2) / max(N - correction, 0); the divisor 0 gives inf or nan, as torch.
  const double divisor = static_cast<double>(std::max<int64_t>(n - correction, 0));
  Tensor centered = x - mean(x, d, true);
  return sum(centered.square(), d, keepdim) / divisor;
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  check_floating(x, "std");
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ADJOINT_CHECK(x.defined(), Value, "prod", "got an undefined tensor");
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "prod");
  Tensor in = x.dtype() == DType::Bool ? x.to(DType::Int64) : x;
  return apply(Prod{d, keepdim}, in);
}

Tensor logsumexp(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  ADJOINT_CHECK(x_in.defined(), Value, "logsumexp", "got an undefined tensor");
  Tensor x = to_floating(x_in);
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "logsumexp");
  const Shape kept = keepdim_shape(x.shape(), d);
  // log sum exp(x) = m + log sum exp(x - m) for any m; m = max (detached: the total derivative
  // with respect to m is 0) keeps exp from overflowing. An infinite max is replaced by 0 so that
  // x - m is not inf - inf; an empty reduction gives log 0 = -inf, as torch.
  Tensor m;
  if (reduced_count(x.shape(), d) == 0) {
    m = zeros(kept, x.dtype());
  } else {
    m = amax(x.detach(), d, true);
    m = where(ne(abs(m), kInf), m, 0.0);
  }
  Tensor r = log(sum(exp(x - m), d, true)) + m;
  if (keepdim) return r;
  Shape out;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!std::binary_search(d.begin(), d.end(), i)) out.push_back(x.shape()[i]);
  return r.reshape(out);
}

Tensor norm(const Tensor& x_in, double p, const std::vector<int64_t>& dims, bool keepdim) {
  ADJOINT_CHECK(x_in.defined(), Value, "norm", "got an undefined tensor");
  ADJOINT_CHECK(!std::isnan(p), Value, "norm", "p must not be NaN (input ", describe(x_in), ")");
  Tensor x = to_floating(x_in);
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "norm");
  if (p == 2) return apply(Norm2{d, keepdim}, x);
  if (std::isinf(p))
    ADJOINT_CHECK(reduced_count(x.shape(), d) > 0, Shape, "norm", "cannot compute the ",
                  p > 0 ? "inf" : "-inf", "-norm of an empty input ", describe(x), " over dims ",
                  Shape(d), ": max and min of no elements are undefined");
  if (p == kInf) return amax(abs(x), d, keepdim);              // max |x_i|
  if (p == -kInf) return amin(abs(x), d, keepdim);             // min |x_i|
  if (p == 1) return sum(abs(x), d, keepdim);                  // d/dx_i = sign(x_i)
  if (p == 0) return sum(ne(x, 0).to(x.dtype()), d, keepdim);  // a count: not differentiable
  // (sum |x_i|^p)^(1/p)
  return pow(sum(pow(abs(x), p), d, keepdim), 1.0 / p);
}

Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return adjoint::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return adjoint::std(*this, dims, correction, keepdim);
}
Tensor Tensor::prod(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::prod(*this, dims, keepdim);
}
Tensor Tensor::logsumexp(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::norm(double p, const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::norm(*this, p, dims, keepdim);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(reduce_stats)
