// Activation checkpointing: trade compute for memory by keeping only a function's inputs in
// forward and running it again inside backward. checkpoint(), checkpoint_sequential() and
// selective policies; built on saved-tensor hooks (autograd.h). See docs/checkpointing.md.
// Not here: memory accounting (memory.h), which measures what these save.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint {

namespace nn {
class Module;
class Sequential;
}  // namespace nn

/// What a selective policy decides for one op of a checkpointed function.
enum class CheckpointAction {
  Save,      ///< keep the op's result; the recomputation reuses it instead of running the op
  Recompute  ///< keep nothing; the recomputation runs the op again
};

/// Asked once for every differentiable op the checkpointed function runs in forward: `op` is
/// the op's name as in its errors ("matmul", "linear", "gelu", "layer_norm"), `output` its
/// result (no history). Called in forward only, never during the recomputation.
using CheckpointPolicy = std::function<CheckpointAction(std::string_view op, const Tensor& output)>;

/// A policy that saves the results of the ops named in `ops` and recomputes all others, e.g.
/// save_ops({"matmul", "linear"}) keeps the products and recomputes the elementwise ops.
CheckpointPolicy save_ops(std::vector<std::string> ops);

struct CheckpointOptions {
  /// Generators whose state is recorded before the function runs and restored for its
  /// recomputation, so random ops (dropout) draw the same numbers again. The default
  /// generator is always included; nn::Dropout holds its own, which module_generators()
  /// collects. They must outlive the graph.
  std::vector<Generator*> generators;
  /// false: record and restore no generator state (the function draws nothing at random).
  bool preserve_rng_state = true;
  /// Selective checkpointing (empty: recompute everything). See CheckpointPolicy.
  CheckpointPolicy policy;
};

/// The generators of every nn::Dropout in `module` and its descendants.
std::vector<Generator*> module_generators(nn::Module& module);

namespace detail {
using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> checkpoint_lists(CheckpointFn fn, const std::vector<Tensor>& inputs,
                                     CheckpointOptions options);

template <class R>
std::vector<Tensor> checkpoint_outputs(R&& r) {
  if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
    return {std::forward<R>(r)};
  } else {
    static_assert(std::is_same_v<std::decay_t<R>, std::vector<Tensor>>,
                  "a checkpointed function must return a Tensor or a std::vector<Tensor>");
    return std::forward<R>(r);
  }
}
template <class R>
auto checkpoint_result(std::vector<Tensor> outs) {
  if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
    return std::move(outs[0]);
  } else {
    return outs;
  }
}
}  // namespace detail

/// fn(inputs) without keeping the tensors its ops save for backward: the graph is recorded
/// as usual, but what its nodes need is recomputed in backward by running fn again (with the
/// generator states of the first run) on the same inputs. fn takes a std::vector<Tensor> and
/// returns a Tensor or a std::vector<Tensor>; it is copied and called again in backward, so
/// what it captures by reference must outlive the graph. Gradients are those of fn itself,
/// bitwise when fn is deterministic. With grad mode off, or inside an active forward-mode
/// level, fn simply runs.
///   Tensor y = checkpoint([&](const std::vector<Tensor>& xs) { return block(xs[0]); }, {x});
template <class F>
requires std::invocable < const F&, const std::vector<Tensor>
& > auto checkpoint(F fn, const std::vector<Tensor>& inputs, CheckpointOptions options = {}) {
  using R = std::decay_t<std::invoke_result_t<const F&, const std::vector<Tensor>&>>;
  std::vector<Tensor> outs = detail::checkpoint_lists(
      [fn = std::move(fn)](const std::vector<Tensor>& xs) {
        return detail::checkpoint_outputs(fn(xs));
      },
      inputs, std::move(options));
  return detail::checkpoint_result<R>(std::move(outs));
}

/// checkpoint with a selective policy: checkpoint(fn, inputs, save_ops({"matmul"})).
template <class F>
requires std::invocable < const F&, const std::vector<Tensor>
& > auto checkpoint(F fn, const std::vector<Tensor>& inputs, CheckpointPolicy policy) {
  CheckpointOptions options;
  options.policy = std::move(policy);
  return checkpoint(std::move(fn), inputs, std::move(options));
}

/// checkpoint for a function of tensors one by one: checkpoint(f, x, y) runs f(x, y).
template <class F, class... Ts>
requires(std::same_as<Ts, Tensor>&&...) &&
    std::invocable<const F&, const Tensor&, const Ts&...> auto checkpoint(F fn, const Tensor& first,
                                                                          const Ts&... rest) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Tensor&, const Ts&...>>;
  std::vector<Tensor> outs = detail::checkpoint_lists(
      [fn = std::move(fn)](const std::vector<Tensor>& xs) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
          return detail::checkpoint_outputs(fn(xs[I]...));
        }
        (std::index_sequence_for<Tensor, Ts...>{});
      },
      {first, rest...}, CheckpointOptions{});
  return detail::checkpoint_result<R>(std::move(outs));
}

/// module->forward(input), checkpointed; the module's Dropout generators are added to
/// options.generators. The module is kept alive until backward.
Tensor checkpoint(const std::shared_ptr<nn::Module>& module, const Tensor& input,
                  CheckpointOptions options = {});

// ---------------------------------------------------------------------------------------------
// Sequential models
// ---------------------------------------------------------------------------------------------

/// One layer of a sequential model.
using CheckpointLayer = std::function<Tensor(const Tensor&)>;

/// The [begin, end) layer ranges checkpoint_sequential uses for `num_layers` layers in
/// `segments` segments (0: ceil(sqrt(num_layers))), as equal as possible with the longer
/// ones first; more segments than layers give one layer each. Throws on segments < 0.
std::vector<std::pair<std::size_t, std::size_t>> checkpoint_segments(std::size_t num_layers,
                                                                     int64_t segments = 0);

/// Runs the layers in order, split by checkpoint_segments(layers.size(), segments); every
/// segment but the last is checkpointed (the last one's activations are needed at once by
/// backward, as in PyTorch), so forward keeps one input per segment and backward recomputes
/// one segment at a time. The layers are copied (they run again in backward).
Tensor checkpoint_sequential(const std::vector<CheckpointLayer>& layers, int64_t segments,
                             const Tensor& input, CheckpointOptions options = {});
/// With the default ceil(sqrt(L)) segments.
Tensor checkpoint_sequential(const std::vector<CheckpointLayer>& layers, const Tensor& input,
                             CheckpointOptions options = {});
/// Over the modules of an nn::Sequential (its Dropout generators are added to the options).
Tensor checkpoint_sequential(const nn::Sequential& layers, int64_t segments, const Tensor& input,
                             CheckpointOptions options = {});
Tensor checkpoint_sequential(const nn::Sequential& layers, const Tensor& input,
                             CheckpointOptions options = {});

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

/// Process-wide counters. The first three count events since the last reset; the kept ones
/// are live (what policies keep right now, in regions whose graph is alive).
struct CheckpointStats {
  int64_t regions = 0;         ///< checkpointed calls that recorded a region
  int64_t recomputations = 0;  ///< runs of a checkpointed function inside backward
  int64_t replayed_ops = 0;    ///< ops a recomputation took from a policy's saved results
  int64_t kept_tensors = 0;    ///< tensors policies keep (op results and their extras)
  int64_t kept_bytes = 0;      ///< their bytes (shared storage counted per tensor)
};
CheckpointStats checkpoint_stats();
/// Zeroes regions, recomputations and replayed_ops.
void reset_checkpoint_stats();

}  // namespace adjoint
