// --checkpoint none|sqrt|block for the deep-mlp and gpt-tiny workloads, and the saved-
// activation peak of one step (issue 5's benchmark): none runs the layers plainly, block
// checkpoints each layer (it keeps only its input), sqrt is checkpoint_sequential with
// ceil(sqrt(L)) segments.
#pragma once

#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace bench {

/// The layers applied to x in order, checkpointed as `mode` says.
inline adjoint::Tensor run_layers(const std::vector<adjoint::CheckpointLayer>& layers,
                                  const adjoint::Tensor& x, const std::string& mode) {
  if (mode == "sqrt") return adjoint::checkpoint_sequential(layers, x);
  adjoint::Tensor h = x;
  for (const auto& layer : layers) {
    h = mode == "block"
            ? adjoint::checkpoint(
                  [layer](const std::vector<adjoint::Tensor>& xs) { return layer(xs[0]); }, {h})
            : layer(h);
  }
  return h;
}

/// The same for the blocks of nn::GPT (its run_blocks hook); empty for none.
inline std::function<adjoint::Tensor(adjoint::nn::Sequential&, const adjoint::Tensor&)>
block_runner(const std::string& mode) {
  if (mode == "sqrt")
    return [](adjoint::nn::Sequential& blocks, const adjoint::Tensor& x) {
      return adjoint::checkpoint_sequential(blocks, x);
    };
  if (mode == "block")
    return [](adjoint::nn::Sequential& blocks, const adjoint::Tensor& x) {
      adjoint::Tensor h = x;
      for (const auto& block : blocks.children()) h = adjoint::checkpoint(block, h);
      return h;
    };
  return {};
}

/// Peak bytes of saved activations over one call of `step` (a forward and backward), as the
/// saved-memory tracker counts them: distinct storages held by tensors saved for backward.
template <class Step>
double saved_peak_bytes(Step&& step) {
  adjoint::SavedMemoryTracker tracker;
  adjoint::reset_peak_saved_memory_stats();
  step();
  return static_cast<double>(adjoint::saved_memory_stats().peak_bytes);
}

}  // namespace bench
