// Running a sequential model with a checkpoint plan (each planned layer under its own
// checkpoint(), the others plainly), the one-call checkpoint_budget, the runners of the
// --checkpoint modes (adjoint-train, adjoint-bench), and byte sizes such as "64M" for command
// lines. Planning is in budget.cpp.
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "adjoint/checkpoint_budget.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/nn/container.h"
#include "checkpoint/budget_util.h"
#include "checkpoint/module_layers.h"

namespace adjoint {
namespace {

using Layers = std::vector<CheckpointLayer>;

// The layers are shared by the regions: each checkpointed segment runs again in backward.
Tensor run_plan(std::shared_ptr<const Layers> layers, const CheckpointPlan& plan,
                const Tensor& input, const CheckpointOptions& options) {
  const char* op = "checkpoint_with_plan";
  ADJOINT_CHECK(input.defined(), Value, op, "the input is undefined");
  ADJOINT_CHECK(plan.layers.size() == layers->size(), Value, op, "the plan is for ",
                plan.layers.size(), " layers but there are ", layers->size());
  for (std::size_t i = 0; i < layers->size(); ++i)
    ADJOINT_CHECK(static_cast<bool>((*layers)[i]), Value, op, "layer ", i, " is empty");
  Tensor x = input;
  std::size_t next = 0;
  for (const CheckpointSegment& s : plan.segments) {
    ADJOINT_CHECK(s.begin >= next && s.begin < s.end && s.end <= layers->size(), Value, op,
                  "the plan's segments must be non-empty, sorted, disjoint and within the ",
                  layers->size(), " layers; got [", s.begin, ", ", s.end, ") after layer ", next);
    x = detail::run_layers(*layers, next, s.begin, x);
    x = checkpoint(
        [layers, s](const std::vector<Tensor>& xs) {
          return detail::run_layers(*layers, s.begin, s.end, xs[0]);
        },
        {x}, options);
    next = s.end;
  }
  return detail::run_layers(*layers, next, layers->size(), x);
}

}  // namespace

Tensor checkpoint_with_plan(const std::vector<CheckpointLayer>& layers, const CheckpointPlan& plan,
                            const Tensor& input, CheckpointOptions options) {
  return run_plan(std::make_shared<const Layers>(layers), plan, input, options);
}

Tensor checkpoint_with_plan(const nn::Sequential& layers, const CheckpointPlan& plan,
                            const Tensor& input, CheckpointOptions options) {
  return run_plan(std::make_shared<const Layers>(detail::module_layers(layers)), plan, input,
                  detail::with_module_generators(layers, std::move(options)));
}

Tensor checkpoint_budget(const std::vector<CheckpointLayer>& layers, std::size_t budget_bytes,
                         const Tensor& input, CheckpointOptions options) {
  const CheckpointPlan plan =
      plan_checkpoints(profile_sequential(layers, input, options.generators), budget_bytes);
  return checkpoint_with_plan(layers, plan, input, std::move(options));
}

Tensor checkpoint_budget(const nn::Sequential& layers, std::size_t budget_bytes,
                         const Tensor& input, CheckpointOptions options) {
  const CheckpointPlan plan = plan_checkpoints(profile_sequential(layers, input), budget_bytes);
  return checkpoint_with_plan(layers, plan, input, std::move(options));
}

std::size_t parse_byte_size(std::string_view text, const char* what) {
  const std::string s(text);
  const auto bad = [&] {
    return detail::str("expected a byte size such as 1048576, 512K, 64M or 1.5G, got '", s, "'");
  };
  std::size_t pos = 0;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.'))
    ++pos;
  ADJOINT_CHECK(pos > 0, Value, what, bad());
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(s.substr(0, pos), &used);
    ADJOINT_CHECK(used == pos, Value, what, bad());
  } catch (const std::logic_error&) {  // stod's invalid_argument and out_of_range
    ADJOINT_CHECK(false, Value, what, bad());
  }
  std::string unit = s.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  static constexpr const char* kPrefixes = "KMGT";
  if (!unit.empty() && unit != "B") {
    const char* p = std::strchr(kPrefixes, unit[0]);
    ADJOINT_CHECK(p && *p, Value, what, bad());
    scale = std::pow(1024.0, static_cast<double>(p - kPrefixes + 1));
    const std::string rest = unit.substr(1);
    ADJOINT_CHECK(rest.empty() || rest == "B" || rest == "IB", Value, what, bad());
  }
  const double bytes = std::floor(value * scale);
  ADJOINT_CHECK(bytes < 1.8e19, Value, what, bad(), ": too large");
  return static_cast<std::size_t>(bytes);
}

SequentialRunner sequential_runner(const std::string& mode,
                                   std::function<void(const CheckpointPlan&)> on_plan,
                                   const char* what) {
  if (mode == "none") return {};
  if (mode == "block") {  // each module keeps only its input; backward reruns one at a time
    return [](nn::Sequential& seq, const Tensor& x) {
      Tensor h = x;
      for (const auto& module : seq.children()) h = checkpoint(module, h);
      return h;
    };
  }
  if (mode == "sqrt") {
    return [](nn::Sequential& seq, const Tensor& x) { return checkpoint_sequential(seq, x); };
  }
  ADJOINT_CHECK(mode.rfind("budget=", 0) == 0, Value, what,
                "the checkpointing mode must be none, block, sqrt or budget=BYTES, got '", mode,
                "'");
  const std::size_t budget = parse_byte_size(mode.substr(7), what);
  // Planned on the first call that records a graph: a call without one (an evaluation) saves
  // nothing, and its dropout may be off.
  auto plan = std::make_shared<std::optional<CheckpointPlan>>();
  return [budget, plan, on_plan](nn::Sequential& seq, const Tensor& x) {
    if (!plan->has_value()) {
      if (!is_grad_enabled()) return seq.forward(x);
      *plan = plan_checkpoints(profile_sequential(seq, x), budget);
      if (on_plan) on_plan(**plan);
    }
    return checkpoint_with_plan(seq, **plan, x);
  };
}

}  // namespace adjoint
