// Batching rules: how apply<Op> runs an op whose inputs are batched (Note [Batched tensors] in
// batched.h). A rule sits in the op struct beside forward, vjp and jvp:
//
//   Tensor vmap(const BatchArgs& b) const;                // or vmap(const BatchArgs&, Saver&)
//
// It gets the physical inputs with the batch dim in front ([B, *logical]; unbatched inputs as
// they are) and returns the physical output with the batch dim in front, computed with ops, so
// that whatever is below the vmap (an outer grad, jvp or vmap) sees them. A rule that saves
// extra tensors for the op's VJP saves logical (wrapped) ones with the Saver.
//
// Pointwise and broadcasting ops share one rule: `static constexpr Batching batching =
// Batching::Pointwise` aligns every batched input to the largest logical rank ([B, 1, .., *s])
// so that ordinary broadcasting does the rest, and runs the op itself on the physical values.
// An op with neither is an error naming it, never a silent loop.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <span>
#include <utility>

#include "adjoint/ops.h"
#include "adjoint/tensor.h"
#include "vmap/batched.h"

namespace adjoint {

enum class Batching : uint8_t { Rule, Pointwise };

template <class Op, class... Ts>
Tensor apply(Op op, const Ts&... xs);

/// The inputs of an op as its batching rule sees them.
class BatchArgs {
 public:
  template <class Inputs>
  BatchArgs(const Inputs& inputs, int level) : level_(level), size_(detail::level_size(level)) {
    x_.reserve(inputs.size());
    for (const Tensor& t : inputs) {
      const bool b = detail::batch_level(t) == level;
      batched_.push_back(b);
      logical_dims_.push_back(t.defined() ? t.dim() : 0);
      x_.push_back(b ? detail::batch_front(t, level) : t);
    }
  }

  std::size_t count() const { return x_.size(); }
  /// Input i: [B, *logical] when batched, else as given.
  const Tensor& operator[](std::size_t i) const { return x_[i]; }
  bool batched(std::size_t i) const { return batched_[i]; }
  int64_t logical_dim(std::size_t i) const { return logical_dims_[i]; }
  int64_t size() const { return size_; }
  int level() const { return level_; }
  int64_t max_logical_dim() const {
    int64_t r = 0;
    for (int64_t d : logical_dims_) r = std::max(r, d);
    return r;
  }
  /// Input i with `rank` logical dims right-aligned after the batch dim ([B, 1, .., *s]);
  /// unbatched inputs as given (they broadcast from the right).
  Tensor aligned(std::size_t i, int64_t rank) const;
  /// Input i as [B, *logical], unbatched ones expanded (no copy).
  Tensor with_batch(std::size_t i) const;
  /// Input i as the op saw it (batched inputs wrapped again): what a rule saves for the VJP.
  Tensor logical(std::size_t i) const;

 private:
  int level_;
  int64_t size_;
  std::vector<Tensor> x_;
  std::vector<bool> batched_;
  std::vector<int64_t> logical_dims_;
};

namespace detail {

[[noreturn]] void throw_no_batching_rule(const char* op);

template <class Op>
constexpr Batching batching_of() {
  if constexpr (requires { Op::batching; }) {
    return Op::batching;
  } else {
    return Batching::Rule;
  }
}

}  // namespace detail
}  // namespace adjoint

namespace adjoint::detail {

/// Logical dims as physical ones, past the batch dim in front.
inline std::vector<int64_t> shift_dims(std::vector<int64_t> dims) {
  for (int64_t& d : dims) ++d;
  return dims;
}
/// What a reduction over logical `dims` (empty: all) reduces physically: the input, its dims
/// past the batch dim, and keepdim. A logical 0-d input gets a dim of one to reduce, so that
/// the batch dim is never reduced.
struct BatchedReduction {
  Tensor x;
  std::vector<int64_t> dims;
  bool keepdim;
};
inline BatchedReduction batched_reduction(const BatchArgs& b, const std::vector<int64_t>& dims,
                                          bool keepdim) {
  if (b.logical_dim(0) == 0) return {b[0].unsqueeze(1), {1}, false};
  if (!dims.empty()) return {b[0], shift_dims(dims), keepdim};
  std::vector<int64_t> all;
  for (int64_t d = 1; d <= b.logical_dim(0); ++d) all.push_back(d);
  return {b[0], all, keepdim};
}

/// The slow rule, for corners that a rule does not cover (a logical 0-d input of an indexing
/// op): fn on each example's inputs (batched ones indexed along the batch dim, the others as
/// given), the results stacked along a new batch dim in front. Ops all the way down, so outer
/// transforms see it; a loop over the batch, so only for corners (functorch's fallback).
template <class F>
Tensor each_example(const BatchArgs& b, F&& fn) {
  std::vector<Tensor> xs(b.count());
  auto example = [&](int64_t k) {
    for (std::size_t i = 0; i < b.count(); ++i) xs[i] = b.batched(i) ? b[i].select(0, k) : b[i];
    return fn(xs);
  };
  if (b.size() == 0) {  // the result's shape from a stand-in example
    for (std::size_t i = 0; i < b.count(); ++i) {
      const Tensor& x = b[i];
      if (!b.batched(i)) {
        xs[i] = x;
        continue;
      }
      Shape one = x.shape();
      one[0] = 1;
      xs[i] = zeros(one, x.dtype()).select(0, 0);
    }
    const Tensor y = fn(xs);
    Shape none = y.shape();
    none.insert(0, 0);
    return zeros(none, y.dtype());
  }
  std::vector<Tensor> outs;
  outs.reserve(static_cast<std::size_t>(b.size()));
  for (int64_t k = 0; k < b.size(); ++k) outs.push_back(example(k));
  return stack(outs, 0);
}

/// fn (a computation without history on plain tensors with batch-like leading dims, such as a
/// LAPACK kernel) on every example of x at once (all_examples), the result wrapped again at
/// x's levels.
Tensor on_all_examples(const Tensor& x, const std::function<Tensor(const Tensor&)>& fn);

/// A logical shape with the batch size in front.
inline Shape with_batch_size(Shape shape, int64_t size) {
  shape.insert(0, size);
  return shape;
}

}  // namespace adjoint::detail

namespace adjoint::detail {

/// fn (a pointwise op of N inputs) on the inputs aligned to their largest logical rank: the
/// physical result of the shared Pointwise rule.
template <std::size_t N, class F>
Tensor pointwise_on_batch(const BatchArgs& b, F&& fn) {
  const int64_t rank = b.max_logical_dim();
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return fn(b.aligned(I, rank)...); }
  (std::make_index_sequence<N>{});
}

}  // namespace adjoint::detail
