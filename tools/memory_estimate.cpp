// The memory of a training step, measured on meta; see memory_estimate.h.
#include "memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "adjoint/allocator.h"
#include "adjoint/memory.h"
#include "adjoint/optim.h"

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

// The modules the per-module table has rows for: the model's children, and a child that is a
// container (children of its own, no parameters of its own: the blocks) by its children.
std::vector<std::pair<std::string, nn::Module*>> table_modules(nn::Module& model) {
  std::vector<std::pair<std::string, nn::Module*>> out;
  for (const auto& [name, child] : model.named_children()) {
    const auto grandchildren = child->named_children();
    if (!grandchildren.empty() && child->parameters(/*recurse=*/false).empty()) {
      for (const auto& [sub, m] : grandchildren) out.emplace_back(name + "." + sub, m.get());
    } else {
      out.emplace_back(name, child.get());
    }
  }
  return out;
}

// Per-module numbers of the step the estimate runs: forward hooks on each table module note
// where its first call begins and ends in a memory timeline of the step (later calls, a
// checkpoint's recomputation in backward, are not the forward's).
class ModuleMeter {
 public:
  ModuleMeter(nn::Module& model, bool masters)
      : masters_(masters), modules_(table_modules(model)), rows_(modules_.size()) {
    for (std::size_t i = 0; i < modules_.size(); ++i) {
      nn::Module& m = *modules_[i].second;
      ModuleMemory& row = rows_[i];
      row.name = modules_[i].first;
      row.type = m.type_name();
      handles_.push_back(m.register_forward_pre_hook([this, i](nn::Module&, const Tensor&) {
        if (open_.count(i) || done_.count(i)) return;
        open_[i] = {timeline_.events().size(), saved_memory_stats().current_bytes};
      }));
      handles_.push_back(
          m.register_forward_hook([this, i](nn::Module&, const Tensor&, const Tensor&) {
            const auto it = open_.find(i);
            if (it == open_.end()) return;
            close(i, it->second);
            open_.erase(it);
            done_.insert(i);
          }));
    }
  }
  ~ModuleMeter() { stop(); }
  ModuleMeter(const ModuleMeter&) = delete;
  ModuleMeter& operator=(const ModuleMeter&) = delete;

  /// After the forward: no more rows are measured.
  void stop() {
    for (nn::ModuleHookHandle& h : handles_) h.remove();
    handles_.clear();
  }

  /// After backward: the weights, gradients and state of each module, alike neighbours merged.
  std::vector<ModuleMemory> rows() {
    for (std::size_t i = 0; i < modules_.size(); ++i) {
      ModuleMemory& row = rows_[i];
      for (const Tensor& p : modules_[i].second->parameters()) {
        row.parameters += p.numel();
        row.parameter_bytes += detail::block_bytes(p.nbytes());
        row.optimizer_bytes += 2 * detail::block_bytes(p.numel() * sizeof(float));
        if (masters_) row.master_bytes += detail::block_bytes(p.numel() * sizeof(float));
        if (p.grad().defined()) row.gradient_bytes += detail::block_bytes(p.grad().nbytes());
      }
    }
    std::vector<ModuleMemory> merged;
    for (const ModuleMemory& row : rows_) {
      if (!merged.empty() && alike(merged.back(), row)) {
        ModuleMemory& run = merged.back();
        ++run.count;
        run.name = run.name.substr(0, run.name.find('-')) + "-" + suffix(row.name);
        continue;
      }
      merged.push_back(row);
    }
    return merged;
  }

  /// What the forward saved inside the table's modules (their first calls).
  std::size_t saved_in_modules() const {
    std::size_t n = 0;
    for (const ModuleMemory& row : rows_) n += row.saved_bytes;
    return n;
  }

 private:
  struct Open {
    std::size_t first_event;
    std::size_t saved_bytes;
  };

  void close(std::size_t i, const Open& o) {
    ModuleMemory& row = rows_[i];
    const std::vector<MemoryEvent>& events = timeline_.events();
    const std::size_t base = o.first_event == 0 ? timeline_.start().storage_bytes
                                                : events[o.first_event - 1].storage_bytes;
    for (std::size_t e = o.first_event; e < events.size(); ++e)
      if (events[e].storage_bytes > base)
        row.forward_peak_bytes = std::max(row.forward_peak_bytes, events[e].storage_bytes - base);
    const std::size_t now = saved_memory_stats().current_bytes;
    row.saved_bytes = now > o.saved_bytes ? now - o.saved_bytes : 0;
  }

  // The last dotted part of a name ("blocks.7" -> "7").
  static std::string suffix(const std::string& name) { return name.substr(name.rfind('.') + 1); }

  // Neighbours of one type and one container whose numbers agree: one row.
  static bool alike(const ModuleMemory& a, const ModuleMemory& b) {
    const auto container = [](const std::string& n) { return n.substr(0, n.rfind('.')); };
    return a.type == b.type && a.name.find('.') != std::string::npos &&
           container(a.name) == container(b.name) && a.parameters == b.parameters &&
           a.parameter_bytes == b.parameter_bytes && a.gradient_bytes == b.gradient_bytes &&
           a.saved_bytes == b.saved_bytes && a.forward_peak_bytes == b.forward_peak_bytes;
  }

  bool masters_;
  std::vector<std::pair<std::string, nn::Module*>> modules_;
  std::vector<ModuleMemory> rows_;
  std::vector<nn::ModuleHookHandle> handles_;
  std::map<std::size_t, Open> open_;
  std::set<std::size_t> done_;
  MemoryTimeline timeline_;
};

// The per-module table of the report: one line per row, the numbers of one module.
std::string module_table(const MemoryEstimate& e) {
  std::string out =
      "  per module (a run of alike modules is one row, with the numbers of one of them):\n";
  char buf[320];
  std::snprintf(buf, sizeof buf, "    %-22s %-22s %14s %10s %10s %10s %12s %10s\n", "module",
                "type", "parameters", "weights", "gradients", "optimizer", "activations",
                "fwd peak");
  out += buf;
  for (const ModuleMemory& m : e.modules) {
    const std::string name = m.count > 1 ? m.name + " (" + std::to_string(m.count) + "x)" : m.name;
    std::snprintf(buf, sizeof buf, "    %-22s %-22s %14lld %10s %10s %10s %12s %10s\n",
                  name.c_str(), m.type.c_str(), static_cast<long long>(m.parameters),
                  bytes_text(static_cast<double>(m.parameter_bytes)).c_str(),
                  bytes_text(static_cast<double>(m.gradient_bytes)).c_str(),
                  bytes_text(static_cast<double>(m.optimizer_bytes + m.master_bytes)).c_str(),
                  bytes_text(static_cast<double>(m.saved_bytes)).c_str(),
                  bytes_text(static_cast<double>(m.forward_peak_bytes)).c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "    %-45s %60s\n", "outside these modules (head, loss)",
                bytes_text(static_cast<double>(e.saved_outside_modules_bytes)).c_str());
  out += buf;
  return out;
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
  }
  const Tensor tokens = zeros({config.batch, config.model.context}, DType::Int64);
  const Tensor targets = zeros({config.batch, config.model.context}, DType::Int64);
  const std::size_t before = memory_stats(kMeta).current_bytes;
  reset_peak_memory_stats(kMeta);
  {
    SavedMemoryTracker tracker;
    ModuleMeter meter(*model, config.master_weights && amp);
    Tensor loss;
    {
      std::optional<Autocast> cast;
      if (amp) cast.emplace(*amp);
      loss = model->loss(tokens, targets);
    }
    meter.stop();
    const std::size_t saved_forward = saved_memory_stats().current_bytes;
    loss.backward();
    e.saved_peak_bytes = saved_memory_stats().peak_bytes;
    e.modules = meter.rows();
    const std::size_t inside = meter.saved_in_modules();
    e.saved_outside_modules_bytes = saved_forward > inside ? saved_forward - inside : 0;
  }
  e.step_peak_bytes = memory_stats(kMeta).peak_bytes - before;
  e.gradient_bytes = memory_stats(kMeta).current_bytes - before;
  // The optimizer's state, measured: the trainer's AdamW takes its first step on meta, which
  // makes its moments and, with --master-weights, its float32 masters; its state dict lists
  // them. (Not the memory the step added: on meta the op-by-op update keeps scratch buffers
  // that the fused kernel of a CPU step does not need.)
  {
    optim::AdamW adamw(model->parameters(), optim::AdamWOptions{});
    if (config.master_weights && amp) adamw.keep_master_weights();
    adamw.step();
    e.master_bytes = 0;
    for (const auto& [key, value] : adamw.state_dict()) {
      // The step counts are numbers in memory, tensors only in the dict.
      if (key.rfind("state.", 0) != 0 || key.ends_with(".step")) continue;
      const std::size_t bytes = detail::block_bytes(value.nbytes());
      (key.ends_with(".master") ? e.master_bytes : e.optimizer_bytes) += bytes;
    }
  }
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
  out += module_table(e);
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
