// The memory of a training step, measured on meta; see memory_estimate.h.
#include "memory_estimate.h"

#include <cstdio>
#include <optional>

#include "adjoint/allocator.h"
#include "adjoint/memory.h"

namespace adjoint::tools {
namespace {

// "3.2 MiB", "1.5 GiB".
std::string bytes_text(double n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (n >= 1024 && u < 5) n /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", n, units[u]);
  return buf;
}

}  // namespace

std::size_t MemoryEstimate::per_rank_bytes(int stage, int world) const {
  const std::size_t w = static_cast<std::size_t>(world);
  const std::size_t state = optimizer_bytes + master_bytes;
  // The step's peak holds the gradients it makes; under stage 2 each rank keeps 1/world.
  const std::size_t activations = step_peak_bytes - gradient_bytes;
  const std::size_t grads = stage >= 2 ? gradient_bytes / w : gradient_bytes;
  return parameter_bytes + (stage >= 1 ? state / w : state) + activations / w + grads;
}

MemoryEstimate estimate_memory(const TrainConfig& config) {
  DeviceGuard on_meta(kMeta);
  MemoryEstimate e;
  std::shared_ptr<nn::LanguageModel> model = make_model(config, nullptr);
  const std::optional<DType> amp = autocast_dtype_of(config.precision);
  if (config.master_weights && amp) model->to(*amp);
  model->run_blocks = sequential_runner(
      config.checkpoint, [&e](const CheckpointPlan& plan) { e.plan = plan.to_string(); },
      "estimate");
  model->train();
  for (const Tensor& p : model->parameters()) {
    e.parameters += p.numel();
    e.parameter_bytes += detail::block_bytes(p.nbytes());
    e.optimizer_bytes += 2 * detail::block_bytes(p.numel() * sizeof(float));
    if (config.master_weights && amp)
      e.master_bytes += detail::block_bytes(p.numel() * sizeof(float));
  }
  const Tensor tokens = zeros({config.batch, config.model.context}, DType::Int64);
  const Tensor targets = zeros({config.batch, config.model.context}, DType::Int64);
  const std::size_t before = memory_stats(kMeta).current_bytes;
  reset_peak_memory_stats(kMeta);
  {
    SavedMemoryTracker tracker;
    Tensor loss;
    {
      std::optional<Autocast> cast;
      if (amp) cast.emplace(*amp);
      loss = model->loss(tokens, targets);
    }
    loss.backward();
    e.saved_peak_bytes = saved_memory_stats().peak_bytes;
  }
  e.step_peak_bytes = memory_stats(kMeta).peak_bytes - before;
  e.gradient_bytes = memory_stats(kMeta).current_bytes - before;
  return e;
}

std::string estimate_report(const TrainConfig& config, std::size_t machine_bytes) {
  const MemoryEstimate e = estimate_memory(config);
  std::string out;
  auto line = [&out](const char* what, const std::string& value, const char* note = "") {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-18s %s%s\n", what, value.c_str(), note);
    out += buf;
  };
  char head[256];
  std::snprintf(head, sizeof head,
                "memory of one training step, measured on the meta device (nothing allocated, "
                "no data read)\n  %s: %lld layers, width %lld, %lld heads, context %lld, batch "
                "%lld, %s%s, checkpoint %s\n",
                config.arch.c_str(), static_cast<long long>(config.model.layers),
                static_cast<long long>(config.model.d_model),
                static_cast<long long>(config.model.heads),
                static_cast<long long>(config.model.context), static_cast<long long>(config.batch),
                config.precision.c_str(), config.master_weights ? " with master weights" : "",
                config.checkpoint.c_str());
  out += head;
  line("parameters", std::to_string(e.parameters) + " (" + bytes_text(e.parameter_bytes) + ")");
  line("gradients", bytes_text(e.gradient_bytes));
  line("optimizer state", bytes_text(e.optimizer_bytes), "  (AdamW: two float32 moments each)");
  if (e.master_bytes) line("master weights", bytes_text(e.master_bytes), "  (float32)");
  line("activations", bytes_text(e.saved_peak_bytes), "  saved for backward, at the peak");
  line("step peak", bytes_text(e.step_peak_bytes),
       "  (activations, temporaries and gradients, at the peak)");
  const std::size_t total = e.total_peak_bytes();
  const bool fits = machine_bytes == 0 || total <= machine_bytes;
  line("total peak", bytes_text(total),
       machine_bytes == 0 ? ""
       : fits             ? "  fits this machine's memory"
                          : "  does NOT fit this machine's memory");
  if (machine_bytes) line("this machine", bytes_text(machine_bytes));
  if (!e.plan.empty()) out += "  checkpoint plan, made on the meta step:\n" + e.plan;
  if (fits) return out;
  // The cheapest change that fits: recomputing blocks costs about one forward more; sharding
  // costs communication and ranks.
  for (const char* mode : {"block", "sqrt"}) {
    if (config.checkpoint == mode) continue;
    TrainConfig c = config;
    c.checkpoint = mode;
    const MemoryEstimate m = estimate_memory(c);
    if (m.total_peak_bytes() <= machine_bytes) {
      out += "  would fit with --checkpoint " + std::string(mode) + ": " +
             bytes_text(m.total_peak_bytes()) + "\n";
      return out;
    }
  }
  for (int world = 2; world <= 1024; world *= 2) {
    for (int stage = 1; stage <= 2; ++stage) {
      const std::size_t r = e.per_rank_bytes(stage, world);
      if (r <= machine_bytes) {
        out += "  would fit per rank with mpirun -np " + std::to_string(world) + " and --zero " +
               std::to_string(stage) + " (" + bytes_text(r) +
               " per rank, if each rank had this machine's memory)\n";
        return out;
      }
    }
  }
  out += "  no checkpoint mode or ZeRO stage up to 1024 ranks makes it fit\n";
  return out;
}

}  // namespace adjoint::tools
