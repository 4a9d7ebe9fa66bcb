// checkpoint_sequential: a chain of layers split into segments, each but the last one a
// checkpointed region, so forward keeps one input per segment and backward recomputes one
// segment at a time (about 2 sqrt(L) layers' activations at once with the default split).
#include <cmath>
#include <memory>

#include "adjoint/checkpoint.h"
#include "adjoint/error.h"
#include "adjoint/nn/container.h"
#include "checkpoint/module_layers.h"

namespace adjoint {
namespace {

using Layers = std::vector<CheckpointLayer>;

// The layers are shared by the regions: each one runs its own range again in backward.
Tensor run_segments(std::shared_ptr<const Layers> layers, int64_t segments, const Tensor& input,
                    const CheckpointOptions& options) {
  const auto plan = checkpoint_segments(layers->size(), segments);
  Tensor x = input;
  for (std::size_t s = 0; s < plan.size(); ++s) {
    const std::size_t begin = plan[s].first, end = plan[s].second;
    if (s + 1 == plan.size()) return detail::run_layers(*layers, begin, end, x);
    x = checkpoint(
        [layers, begin, end](const std::vector<Tensor>& xs) {
          return detail::run_layers(*layers, begin, end, xs[0]);
        },
        {x}, options);
  }
  return x;  // no layers
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> checkpoint_segments(std::size_t num_layers,
                                                                     int64_t segments) {
  ADJOINT_CHECK(segments >= 0, Value, "checkpoint_sequential",
                "segments must be positive (or 0 for ceil(sqrt(layers))), got ", segments);
  std::vector<std::pair<std::size_t, std::size_t>> plan;
  if (num_layers == 0) return plan;
  auto n = static_cast<std::size_t>(segments);
  if (n == 0) n = static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(num_layers))));
  n = std::min(n, num_layers);
  // Sizes differ by at most one, the longer ones first (PyTorch gives the remainder to the
  // last, unrecomputed segment instead, whose activations then all stay saved).
  const std::size_t base = num_layers / n, extra = num_layers % n;
  std::size_t begin = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const std::size_t end = begin + base + (s < extra ? 1 : 0);
    plan.emplace_back(begin, end);
    begin = end;
  }
  return plan;
}

Tensor checkpoint_sequential(const std::vector<CheckpointLayer>& layers, int64_t segments,
                             const Tensor& input, CheckpointOptions options) {
  for (std::size_t i = 0; i < layers.size(); ++i)
    ADJOINT_CHECK(static_cast<bool>(layers[i]), Value, "checkpoint_sequential", "layer ", i,
                  " is empty");
  return run_segments(std::make_shared<const Layers>(layers), segments, input, options);
}

Tensor checkpoint_sequential(const std::vector<CheckpointLayer>& layers, const Tensor& input,
                             CheckpointOptions options) {
  return checkpoint_sequential(layers, 0, input, std::move(options));
}

Tensor checkpoint_sequential(const nn::Sequential& layers, int64_t segments, const Tensor& input,
                             CheckpointOptions options) {
  return run_segments(std::make_shared<const Layers>(detail::module_layers(layers)), segments,
                      input, detail::with_module_generators(layers, std::move(options)));
}

Tensor checkpoint_sequential(const nn::Sequential& layers, const Tensor& input,
                             CheckpointOptions options) {
  return checkpoint_sequential(layers, 0, input, std::move(options));
}

}  // namespace adjoint
