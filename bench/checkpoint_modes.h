// --checkpoint none|sqrt|block|budget=BYTES for the deep-mlp and gpt-tiny workloads, and the
// saved-activation peak of one step (issue 5's benchmark): none runs the layers plainly,
// block checkpoints each layer (it keeps only its input), sqrt is checkpoint_sequential with
// ceil(sqrt(L)) segments, budget=BYTES the segments plan_checkpoints chooses for that many
// bytes of saved activations (planned once, on the first step that records a graph).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace bench {

/// Whether `mode` is a valid --checkpoint value.
inline bool valid_checkpoint_mode(const std::string& mode) {
  try {
    adjoint::sequential_runner(mode);  // validates the mode and a budget's byte size
    return true;
  } catch (const adjoint::Error&) {
    return false;
  }
}

/// The plan of a budget mode, made on the first call that records a graph and printed once.
inline const adjoint::CheckpointPlan& budget_plan(
    std::optional<adjoint::CheckpointPlan>& plan,
    const std::vector<adjoint::CheckpointLayer>& layers, const adjoint::Tensor& x,
    const std::string& mode) {
  if (!plan) {
    plan = adjoint::plan_checkpoints(adjoint::profile_sequential(layers, x),
                                     adjoint::parse_byte_size(mode.substr(7), "--checkpoint"));
    std::fprintf(stderr, "%s", plan->to_string().c_str());
  }
  return *plan;
}

/// The layers applied to x in order, checkpointed as `mode` says; `plan` holds a budget
/// mode's plan between calls.
inline adjoint::Tensor run_layers(const std::vector<adjoint::CheckpointLayer>& layers,
                                  const adjoint::Tensor& x, const std::string& mode,
                                  std::optional<adjoint::CheckpointPlan>& plan) {
  if (mode == "sqrt") return adjoint::checkpoint_sequential(layers, x);
  if (mode.rfind("budget=", 0) == 0)
    return adjoint::checkpoint_with_plan(layers, budget_plan(plan, layers, x, mode), x);
  adjoint::Tensor h = x;
  for (const auto& layer : layers) {
    h = mode == "block"
            ? adjoint::checkpoint(
                  [layer](const std::vector<adjoint::Tensor>& xs) { return layer(xs[0]); }, {h})
            : layer(h);
  }
  return h;
}

/// The same for the blocks of nn::GPT (its run_blocks hook; empty for none).
inline adjoint::SequentialRunner block_runner(const std::string& mode) {
  return adjoint::sequential_runner(
      mode,
      [](const adjoint::CheckpointPlan& plan) {
        std::fprintf(stderr, "%s", plan.to_string().c_str());
      },
      "--checkpoint");
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
