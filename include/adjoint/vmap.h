// vmap: the vectorizing map of JAX and torch.func. vmap(f)(xs) is f applied to every example
// of a batch, stacked, computed in one pass over the whole batch: each op runs once on the
// batched values through its batching rule, instead of once per example.
//
//   auto per_example_grad = vmap(grad(loss, 0), {no_batch, 0, 0});   // params shared
//   Tensor g = per_example_grad(w, x, y);   // g[i] = grad of loss(w, x[i], y[i])
//
// It composes with every transform in transforms.h in either order (vmap(grad(f)),
// grad(vmap(f)), jvp(vmap(f)), vmap(vmap(f))) and with itself. See docs/transforms.md.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"
#include "adjoint/transforms.h"

namespace adjoint {

/// What random ops (rand, randn, randint, dropout) do inside vmap, as torch.func's
/// `randomness` argument.
enum class Randomness {
  Error,      ///< throw: a random op inside vmap is ambiguous (the default)
  Different,  ///< every example draws its own values
  Same        ///< every example sees the same values
};

/// An argument's batch dim (negative counts from the end), or no_batch.
using BatchDim = std::optional<int64_t>;
/// The argument is not batched: every example sees all of it.
inline constexpr std::nullopt_t no_batch = std::nullopt;

struct VmapOptions {
  /// Run the batch in chunks of this many examples (bounds memory); the results are joined.
  std::optional<int64_t> chunk_size;
  Randomness randomness = Randomness::Error;
};

namespace detail {

std::vector<Tensor> vmap_lists(const ListFn& f, const std::vector<Tensor>& args,
                               const std::vector<BatchDim>& in_dims,
                               const std::vector<BatchDim>& out_dims, const VmapOptions& options);

template <class F>
class VmapTransform {
 public:
  VmapTransform(F f, std::vector<BatchDim> in_dims, std::vector<BatchDim> out_dims,
                VmapOptions options)
      : f_(std::move(f)),
        in_dims_(std::move(in_dims)),
        out_dims_(std::move(out_dims)),
        options_(options) {}

  template <class... A>
  auto operator()(const A&... args) const {
    constexpr bool list_in = list_call<A...>;
    using Out = std::decay_t<decltype(f_(args...))>;
    std::vector<Tensor> outs = vmap_lists(list_fn<list_in, sizeof...(A)>(f_), pack_primals(args...),
                                          in_dims_, out_dims_, options_);
    if constexpr (std::is_same_v<Out, Tensor>) {
      return std::move(outs[0]);
    } else {
      return outs;
    }
  }

 private:
  F f_;
  std::vector<BatchDim> in_dims_;
  std::vector<BatchDim> out_dims_;
  VmapOptions options_;
};

}  // namespace detail

/// vmap(f, in_dims, out_dims, options): in_dims has one entry per argument (or per element of a
/// list argument), or one entry for all of them; out_dims likewise per output. Every batched
/// argument must have the same size along its batch dim. An output that does not depend on a
/// batched argument is broadcast along out_dim, unless its out_dim is no_batch.
template <class F>
auto vmap(F f, std::vector<BatchDim> in_dims = {0}, std::vector<BatchDim> out_dims = {0},
          VmapOptions options = {}) {
  return detail::VmapTransform<F>(std::move(f), std::move(in_dims), std::move(out_dims), options);
}

}  // namespace adjoint
