// Checkpointing under a memory budget: profile a sequential model once (what each layer saves
// for backward, what its input costs to keep, its FLOPs), choose the layers to checkpoint so
// that the predicted peak of saved activations fits a byte budget with the least recomputed
// FLOPs, and run the model with that plan. See docs/checkpointing.md, "Memory budgets".
// Not here: checkpoint() itself (checkpoint.h) and memory accounting (memory.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "adjoint/checkpoint.h"
#include "adjoint/generator.h"
#include "adjoint/storage.h"
#include "adjoint/tensor.h"

namespace adjoint {

// ---------------------------------------------------------------------------------------------
// Profile
// ---------------------------------------------------------------------------------------------

/// No storage: a layer's input that the budget does not count (see SequentialProfile).
inline constexpr std::size_t kNoStorage = std::numeric_limits<std::size_t>::max();

/// One layer run plainly on the sample input. Storages are ids into
/// SequentialProfile::storage_bytes, so that a storage two layers share (a layer's output that
/// the next layer saves as its input) is one id.
struct LayerProfile {
  std::vector<std::size_t> saved;  ///< activation storages its ops save for backward, each once
  std::size_t input = kNoStorage;  ///< its input's storage: what a checkpoint of it keeps
  uint64_t flops = 0;              ///< its forward FLOPs: what a checkpoint of it costs again
  int64_t ops = 0;                 ///< differentiable ops it ran

  // For reading; the planner works from the ids above.
  std::size_t saved_bytes = 0;  ///< bytes its storages add to those of the layers before it
  std::size_t input_bytes = 0;  ///< bytes of its input's storage (0 without one)
};

/// What a sequential model saves for backward, layer by layer, on one input. Bytes are those
/// of saved-memory tracking (memory.h): each storage once and whole. The budget covers
/// activations only: storages of leaves that require grad (parameters) and the model's input
/// when it is a leaf stay alive whatever the plan, so they are left out (`excluded`); every
/// other storage a layer saves counts, including tensors it makes without a graph (dropout
/// masks) and constant buffers (a causal mask).
struct SequentialProfile {
  std::vector<std::size_t> storage_bytes;  ///< bytes of each storage id
  std::vector<LayerProfile> layers;
  /// The storages left out of the budget (parameters, a leaf input), for measure_saved_peak.
  std::vector<std::weak_ptr<StorageImpl>> excluded;

  /// Sum of the layers' FLOPs: one forward pass.
  uint64_t forward_flops() const;
  /// Predicted peak without checkpointing: every storage any layer saves.
  std::size_t plain_peak_bytes() const;
  /// One row per layer: saved bytes, input bytes, FLOPs, ops.
  std::string to_string() const;
};

/// Runs the layers once plainly (grad on) on `input` and records, per layer, the storages its
/// ops save for backward, its input's storage and its FLOPs. Each layer runs on a detached
/// copy of its input and its graph is dropped once walked, so the profile holds one layer's
/// activations at a time, not all of them. The states of the default generator and of
/// `generators` are restored afterwards: profiling draws no random numbers as far as the run
/// after it is concerned. FLOPs are counted per op (see
/// docs/checkpointing.md): 2mnk for matmul and linear, nothing for views, otherwise the
/// larger element count of the op's inputs and output. Replace LayerProfile::flops to use
/// your own costs. The layers must run plainly: no saved-tensor hooks active, no checkpoint
/// inside a layer (it would report only what it keeps).
SequentialProfile profile_sequential(const std::vector<CheckpointLayer>& layers,
                                     const Tensor& input,
                                     const std::vector<Generator*>& generators = {});
/// Over the modules of an nn::Sequential (their Dropout generators are restored too).
SequentialProfile profile_sequential(const nn::Sequential& layers, const Tensor& input);

// ---------------------------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------------------------

/// Layers [begin, end) run as one checkpoint() call: the region keeps only the input of layer
/// `begin` and reruns all of them at once in backward.
struct CheckpointSegment {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const CheckpointSegment&) const = default;
};

/// Which layers to checkpoint, and what that is predicted to cost.
struct CheckpointPlan {
  struct Layer {
    bool checkpointed = false;
    /// Bytes it adds to what the forward keeps: its saved storages that no layer before it
    /// holds, or, for the first layer of a checkpointed segment, the segment's input.
    std::size_t held_bytes = 0;
    /// Checkpointed only: saved bytes while backward recomputes its segment (and while the
    /// segment's first run is in progress): what the layers before the segment hold plus
    /// everything the segment's layers save.
    std::size_t recompute_peak_bytes = 0;
    uint64_t flops = 0;  ///< its forward FLOPs
  };
  std::vector<Layer> layers;
  std::vector<CheckpointSegment> segments;  ///< the checkpointed regions, in order
  std::size_t budget_bytes = 0;             ///< the budget it was planned for (0: none)
  std::size_t predicted_peak_bytes = 0;     ///< max(forward_bytes, every recompute peak)
  std::size_t forward_bytes = 0;            ///< saved when the forward ends
  uint64_t extra_flops = 0;    ///< recomputed in one backward: the checkpointed layers' FLOPs
  uint64_t forward_flops = 0;  ///< of one forward pass of all layers

  /// extra_flops / forward_flops (0 for a model without FLOPs).
  double extra_fraction() const;
  /// The indices of the checkpointed layers.
  std::vector<std::size_t> checkpointed() const;
  /// A summary line and one row per layer.
  std::string to_string() const;
};

struct CheckpointPlanOptions {
  /// The longest checkpointed segment, in layers (0: no limit). 1 checkpoints layers one by
  /// one, which cannot help a chain whose layers save only their inputs and outputs (Linear
  /// then Tanh): every layer boundary stays held, by a layer or as a checkpoint's input.
  std::size_t max_segment_layers = 0;
};

/// The plan with the fewest recomputed FLOPs whose predicted peak of saved activations is at
/// most `budget_bytes` (ties: the lowest peak). It splits the layers into segments, each run
/// plainly or as one checkpoint() that keeps only the segment's input and reruns it once in
/// backward. The predicted peak is the larger of what the forward keeps and, for each
/// checkpointed segment, what is held while backward recomputes it (the layers before it plus
/// everything the segment saves). Exact for models whose layers share storages only with
/// their neighbours (their inputs and outputs), conservative otherwise (see
/// docs/checkpointing.md). Throws a Value error naming the budget and the smallest peak any
/// plan reaches when none fits.
CheckpointPlan plan_checkpoints(const SequentialProfile& profile, std::size_t budget_bytes,
                                const CheckpointPlanOptions& options = {});

/// The prediction for given checkpointed segments (sorted, disjoint; the other layers run
/// plainly), budget_bytes 0.
CheckpointPlan predict_checkpoint_plan(const SequentialProfile& profile,
                                       const std::vector<CheckpointSegment>& segments);
/// The same with each layer i for which checkpointed[i] holds checkpointed on its own.
CheckpointPlan predict_checkpoint_layers(const SequentialProfile& profile,
                                         const std::vector<bool>& checkpointed);

// ---------------------------------------------------------------------------------------------
// Run
// ---------------------------------------------------------------------------------------------

/// Runs the layers in order: each segment of the plan as one checkpoint() call (with
/// `options`), the other layers plainly. Gradients are those of the plain run. The layers are
/// copied (the checkpointed ones run again in backward).
Tensor checkpoint_with_plan(const std::vector<CheckpointLayer>& layers, const CheckpointPlan& plan,
                            const Tensor& input, CheckpointOptions options = {});
/// Over the modules of an nn::Sequential (their Dropout generators are added to the options).
Tensor checkpoint_with_plan(const nn::Sequential& layers, const CheckpointPlan& plan,
                            const Tensor& input, CheckpointOptions options = {});

/// profile_sequential, plan_checkpoints and checkpoint_with_plan in one call. It profiles on
/// every call, an extra forward pass: in a training loop plan once and reuse the plan.
Tensor checkpoint_budget(const std::vector<CheckpointLayer>& layers, std::size_t budget_bytes,
                         const Tensor& input, CheckpointOptions options = {});
Tensor checkpoint_budget(const nn::Sequential& layers, std::size_t budget_bytes,
                         const Tensor& input, CheckpointOptions options = {});

/// Peak saved bytes while `step` runs (typically a forward with a plan and its backward),
/// counted as the planner predicts them: relative to the saved bytes when it starts, with
/// the profile's excluded storages held as counted throughout so that they never add to the
/// peak. Turns saved-memory tracking on while it runs and resets the saved peak.
std::size_t measure_saved_peak(const SequentialProfile& profile, const std::function<void()>& step);

/// How to run an nn::Sequential under a checkpointing mode, for nn::GPT::run_blocks: "none"
/// (an empty function: run it plainly), "block" (each module checkpointed), "sqrt"
/// (checkpoint_sequential) or "budget=BYTES" (planned on the first call that records a graph,
/// then reused; calls without grad run plainly; `on_plan` is shown the plan once). The input
/// must have the same shape at every call. A Value error naming `what` for another mode.
using SequentialRunner = std::function<Tensor(nn::Sequential&, const Tensor&)>;
SequentialRunner sequential_runner(const std::string& mode,
                                   std::function<void(const CheckpointPlan&)> on_plan = {},
                                   const char* what = "sequential_runner");

/// "1048576", "512K", "64M", "1.5G", "2GiB" (powers of 1024; a trailing B or iB is allowed)
/// as bytes. A Value error naming `what` for anything else.
std::size_t parse_byte_size(std::string_view text, const char* what = "parse_byte_size");

}  // namespace adjoint
