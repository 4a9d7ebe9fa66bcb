// Statistical reductions: var and std (composites of mean, sub, square and sum), prod (its own
// op, with a VJP exact at zeros), logsumexp (stable composite) and the vector p-norm (p = 2 is its
// own op so that its gradient at the zero vector is 0). Sum and mean are in reduce.cpp; max,
// min, amax, amin and the arg-reductions are in reduce_extrema.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adjoint/error.h"
#include "adjoint/transforms.h"
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

// Note [Prod gradient without division]
// d/dx_i prod(x) = prod_{j != i} x_j = (prod_{j < i} x_j) (prod_{j > i} x_j): per reduced
// slice, an exclusive prefix product times an exclusive suffix product. Each scan is log2(n)
// steps of a multiply by a copy of itself shifted by 1, 2, 4, ... (filled with ones), so it is
// written with mul, slice and cat alone: no division, so any number of zeros is exact, and
// every derivative of it is again such ops, so second and higher derivatives are exact too
// (hessian(prod)([0, 0]) = [[0, 1], [1, 0]]). Nothing reads values to choose a way (the rule
// is the same traced, batched or eager). The scans cost O(n log n) multiplies per slice, so the
// first derivative comes from a kernel doing the same two products in one O(n) pass each
// (ProdPartials, below); only its own derivatives run the scans. Dividing the product by each
// element would be O(n) too, and wrong at zeros.
Tensor exclusive_products(const Tensor& x, const std::vector<int64_t>& dims) {
  if (x.dim() == 0) return ones_like(x);
  if (x.numel() == 0) return zeros_like(x);
  // The reduced dims last, flattened into one of n elements.
  std::vector<int64_t> perm, kept_shape;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      kept_shape.push_back(x.size(d));
    }
  for (int64_t d : dims) perm.push_back(d);
  const Tensor moved = permute(x, perm);
  Shape flat(kept_shape);
  flat.push_back(reduced_count(x.shape(), dims));
  const Tensor v = moved.reshape(flat);
  const int64_t n = flat.back(), last = static_cast<int64_t>(flat.size()) - 1;
  auto filler = [&](int64_t k) {
    Shape s = flat;
    s.back() = k;
    return ones(s, TensorOptions(x.dtype()).device(x.device()));
  };
  // prefix_i = prod_{j < i} v_j: v shifted right by one, then an inclusive scan.
  Tensor prefix = cat({filler(1), slice(v, last, 0, n - 1)}, last);
  Tensor suffix = cat({slice(v, last, 1, n), filler(1)}, last);
  for (int64_t k = 1; k < n; k *= 2) {
    prefix = prefix * cat({filler(k), slice(prefix, last, 0, n - k)}, last);
    suffix = suffix * cat({slice(suffix, last, k, n), filler(k)}, last);
  }
  std::vector<int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = i;
  return permute((prefix * suffix).reshape(moved.shape()), inverse);
}

// prod's partials from an O(n) kernel (one prefix and one suffix pass per slice); its own
// derivatives, needed from prod's second order on, are the composite's above, which a kernel
// cannot give. So a first derivative of prod costs a pass over x, not log2(n) of them.
struct ProdPartials {
  static constexpr const char* name = "prod_partials";
  auto fields() { return std::tie(dims); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  std::vector<int64_t> dims;  // normalized
  Tensor forward(const Tensor& x) const { return kernels::exclusive_products(x, dims); }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    reduced_spec(x, dims, true, name);  // checks the dims
    return {x.shape, x.dtype};
  }
  // d partials: the composite's pullback and pushforward
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const std::vector<int64_t> d = dims;
    return adjoint::vjp([d](const Tensor& v) { return exclusive_products(v, d); }, c.input(0))
        .pullback(g);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    const std::vector<int64_t> d = dims;
    return adjoint::jvp([d](const Tensor& v) { return exclusive_products(v, d); }, c.input(0), tx)
        .tangents;
  }
  // Batching: the same slices, past the batch dim in front.
  Tensor vmap(const BatchArgs& b) const {
    std::vector<int64_t> d;
    for (int64_t k : dims) d.push_back(k + 1);
    return apply(ProdPartials{d}, b[0]);
  }
};

struct Prod {
  static constexpr const char* name = "prod";
  auto fields() { return std::tie(dims, keepdim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  std::vector<int64_t> dims;  // normalized
  bool keepdim;
  Tensor forward(const Tensor& x) const {
    return kernels::reduce(kernels::Reduce::Prod, x, dims, keepdim);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return reduced_spec(spec_of(in, 0, name), dims, keepdim, name);
  }
  // d/dx_i prod(x) = prod_{j != i} x_j, shaped like x. See Note [Prod gradient without
  // division].
  Tensor partials(const Ctx& c) const { return apply(ProdPartials{dims}, c.input(0)); }
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
// values above 1e19 do not overflow; float64 slices are scaled by their largest magnitude
// first, as LAPACK's dnrm2 does, since their squares overflow above 1e154 and underflow below
// 1e-154 (an iterative solver's residual of 1e200 read as inf, a converged one as 0).
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
    if (x.dtype() == DType::Float64 && x.numel() != 0) return scaled(x);
    Tensor wide = x.dtype() != DType::Float64 ? kernels::cast(x, DType::Float64) : x;
    Tensor sq = kernels::unary(Unary::Square, wide);
    Tensor n =
        kernels::unary(Unary::Sqrt, kernels::reduce(kernels::Reduce::Sum, sq, dims, keepdim));
    return n.dtype() == x.dtype() ? n : kernels::cast(n, x.dtype());
  }
  // m sqrt(sum((x / m)^2)) with m the slice's largest magnitude; a slice whose m is 0, inf or
  // NaN takes m = 1, whose norm is then 0, inf or NaN as it should be.
  Tensor scaled(const Tensor& x) const {
    const Tensor one = scalar_tensor(1.0, DType::Float64);
    Tensor m = kernels::reduce(kernels::Reduce::Max, kernels::unary(Unary::Abs, x), dims, true);
    m = kernels::where(kernels::unary(Unary::LtScalar, m, kInf), m, one);  // (NaN: false)
    m = kernels::where(kernels::unary(Unary::GtScalar, m, 0.0), m, one);
    const Tensor sq = kernels::unary(Unary::Square, kernels::binary(kernels::Binary::Div, x, m));
    const Tensor sums = kernels::reduce(kernels::Reduce::Sum, sq, dims, true);
    const Tensor n = kernels::binary(kernels::Binary::Mul, m, kernels::unary(Unary::Sqrt, sums));
    // A sum over the kept dims of one element each drops them, exactly.
    return keepdim ? n : kernels::reduce(kernels::Reduce::Sum, n, dims, false);
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
  // As PyTorch: the sum or product of bools or narrow integers is an int64.
  Tensor in = is_integral(x.dtype()) && x.dtype() != DType::Int64 ? x.to(DType::Int64) : x;
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
    m = zeros(kept, TensorOptions(x.dtype()).device(x.device()));
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
