// checkpoint(): the entry point that decides whether a region is needed, the ready-made
// policies, the Dropout generators of a module, and the counters.
#include "adjoint/checkpoint.h"

#include <algorithm>

#include "adjoint/error.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/module.h"
#include "checkpoint/region.h"
#include "checkpoint/stats.h"
#include "core/mode_state.h"

namespace adjoint {

namespace detail {

CheckpointCounters& checkpoint_counters() {
  static CheckpointCounters counters;
  return counters;
}

std::vector<Tensor> checkpoint_lists(CheckpointFn fn, const std::vector<Tensor>& inputs,
                                     CheckpointOptions options) {
  // Without grad mode nothing is saved, so there is nothing to recompute. Under an active
  // forward-mode level the ops also save what their tangent rules need, and a backward that
  // runs after the level closed could not recompute those: fn runs as is (docs/checkpointing.md).
  if (!tls_mode.grad_enabled || tls_mode.dual_visible != 0) return fn(inputs);
  auto region = std::make_shared<Region>(std::move(fn), std::move(options));
  return region->run(inputs);
}

}  // namespace detail

CheckpointPolicy save_ops(std::vector<std::string> ops) {
  return [ops = std::move(ops)](std::string_view op, const Tensor&) {
    const bool listed = std::find(ops.begin(), ops.end(), op) != ops.end();
    return listed ? CheckpointAction::Save : CheckpointAction::Recompute;
  };
}

std::vector<Generator*> module_generators(nn::Module& module) {
  std::vector<Generator*> gens;
  for (auto& [name, m] : module.named_modules())
    if (auto* drop = dynamic_cast<nn::Dropout*>(m.get())) gens.push_back(&drop->generator());
  return gens;
}

Tensor checkpoint(const std::shared_ptr<nn::Module>& module, const Tensor& input,
                  CheckpointOptions options) {
  ADJOINT_CHECK(module != nullptr, Value, "checkpoint", "got a null module");
  for (Generator* g : module_generators(*module)) options.generators.push_back(g);
  return detail::checkpoint_lists(
      [module](const std::vector<Tensor>& xs) { return std::vector<Tensor>{(*module)(xs[0])}; },
      {input}, std::move(options))[0];
}

CheckpointStats checkpoint_stats() {
  const detail::CheckpointCounters& c = detail::checkpoint_counters();
  return {c.regions.load(), c.recomputations.load(), c.replayed_ops.load(), c.kept_tensors.load(),
          c.kept_bytes.load()};
}

void reset_checkpoint_stats() {
  detail::CheckpointCounters& c = detail::checkpoint_counters();
  c.regions = 0;
  c.recomputations = 0;
  c.replayed_ops = 0;
}

}  // namespace adjoint
