// Printing a model as a tree (operator<<, PyTorch's repr(model)) and nn::summary (torchinfo's
// table: output shapes, parameters, FLOPs, saved bytes per module), built on the profiler and
// the saved-tensor accounting.
#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "adjoint/grad_mode.h"
#include "adjoint/memory.h"
#include "adjoint/nn/activation.h"
#include "adjoint/nn/batchnorm.h"
#include "adjoint/nn/conv.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/embedding.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/module.h"
#include "adjoint/nn/normalization.h"
#include "adjoint/profiler.h"

namespace adjoint::nn {
namespace {

const char* boolean(bool b) { return b ? "true" : "false"; }

std::string list(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

std::string count_text(int64_t n) {
  return "# " + std::to_string(n) + (n == 1 ? " parameter" : " parameters");
}

void print_tree(std::ostream& os, const Module& m, int indent) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  const std::string extra = m.extra_repr();
  const auto children = m.named_children();
  const int64_t n = m.num_parameters();
  if (children.empty()) {
    os << m.type_name() << '(' << extra << ')';
    if (n > 0) os << "  " << count_text(n);
    return;
  }
  os << m.type_name() << '(';
  if (n > 0) os << "  " << count_text(n);
  if (!extra.empty()) os << '\n' << pad << "  " << extra;
  for (const auto& [name, child] : children) {
    os << '\n' << pad << "  (" << name << "): ";
    print_tree(os, *child, indent + 2);
  }
  os << '\n' << pad << ')';
}

}  // namespace

// The built-in layers' descriptions, in PyTorch's words; any other module lists its own
// parameters' shapes.
std::string Module::extra_repr() const {
  std::ostringstream os;
  if (auto* l = dynamic_cast<const Linear*>(this)) {
    os << "in_features=" << l->in_features() << ", out_features=" << l->out_features()
       << ", bias=" << boolean(l->bias.defined());
  } else if (auto* c = dynamic_cast<const ConvLayer*>(this)) {
    os << "in_channels=" << c->in_channels() << ", out_channels=" << c->out_channels()
       << ", kernel_size=" << list(c->kernel_size());
    if (c->groups() != 1) os << ", groups=" << c->groups();
    os << ", bias=" << boolean(c->bias.defined());
  } else if (auto* e = dynamic_cast<const Embedding*>(this)) {
    os << "num_embeddings=" << e->num_embeddings() << ", embedding_dim=" << e->embedding_dim();
  } else if (auto* ln = dynamic_cast<const LayerNorm*>(this)) {
    os << "normalized_shape=" << ln->normalized_shape() << ", eps=" << ln->eps()
       << ", elementwise_affine=" << boolean(ln->weight.defined());
  } else if (auto* rms = dynamic_cast<const RMSNorm*>(this)) {
    os << "dim=" << rms->dim() << ", eps=" << rms->eps();
  } else if (auto* bn = dynamic_cast<const BatchNormBase*>(this)) {
    os << "num_features=" << bn->num_features() << ", eps=" << bn->eps() << ", momentum=";
    if (bn->momentum())
      os << *bn->momentum();
    else
      os << "none";
    os << ", affine=" << boolean(bn->affine())
       << ", track_running_stats=" << boolean(bn->track_running_stats());
  } else if (auto* gn = dynamic_cast<const GroupNorm*>(this)) {
    os << "num_groups=" << gn->num_groups() << ", num_channels=" << gn->num_channels()
       << ", eps=" << gn->eps();
  } else if (auto* d = dynamic_cast<const Dropout*>(this)) {
    os << "p=" << d->p();
  } else if (auto* g = dynamic_cast<const GELU*>(this)) {
    if (g->approximate() == GeluApproximation::Tanh) os << "approximate='tanh'";
  } else {
    bool first = true;
    for (const auto& [name, p] : named_parameters(/*recurse=*/false)) {
      os << (first ? "" : ", ") << name << '=' << p.shape();
      first = false;
    }
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  print_tree(os, module, 0);
  return os;
}

ModelSummary summary(Module& model, const Tensor& input) {
  ModelSummary out;
  out.input_shape = input.shape();
  const auto modules = model.named_modules();
  struct Open {
    std::size_t first_event;
    std::size_t saved_bytes;
  };
  std::vector<std::vector<Open>> open(modules.size());
  out.rows.resize(modules.size());
  for (std::size_t i = 0; i < modules.size(); ++i) {
    ModuleSummaryRow& row = out.rows[i];
    row.name = modules[i].first;
    row.type = modules[i].second->type_name();
    row.parameters = modules[i].second->num_parameters();
    row.depth = row.name.empty()
                    ? 0
                    : 1 + static_cast<int>(std::count(row.name.begin(), row.name.end(), '.'));
  }

  EnableGradGuard grad;  // what backward would save is what the table reports
  SavedMemoryTracker tracker;
  const std::size_t saved_before = saved_memory_stats().current_bytes;
  Profiler profiler;
  std::vector<ModuleHookHandle> handles;
  auto remove_hooks = [&] {
    for (ModuleHookHandle& h : handles) h.remove();
    handles.clear();
  };
  try {
    for (std::size_t i = 0; i < modules.size(); ++i) {
      Module& m = *modules[i].second;
      handles.push_back(m.register_forward_pre_hook([&, i](Module&, const Tensor&) {
        open[i].push_back({profiler.events().size(), saved_memory_stats().current_bytes});
      }));
      handles.push_back(
          m.register_forward_hook([&, i](Module&, const Tensor&, const Tensor& output) {
            if (open[i].empty()) return;
            const Open o = open[i].back();
            open[i].pop_back();
            ModuleSummaryRow& row = out.rows[i];
            const auto& events = profiler.events();
            for (std::size_t e = o.first_event; e < events.size(); ++e)
              if (events[e].depth == 0 && !events[e].backward) row.flops += events[e].flops;
            const std::size_t now = saved_memory_stats().current_bytes;
            if (now > o.saved_bytes) row.saved_bytes += now - o.saved_bytes;
            if (output.defined()) row.output_shape = output.shape();
            ++row.calls;
          }));
    }
    Tensor result = model(input);
    out.total_saved_bytes = saved_memory_stats().current_bytes - saved_before;
    profiler.stop();
    remove_hooks();
  } catch (...) {
    remove_hooks();
    throw;
  }
  for (const ProfileEvent& e : profiler.events())
    if (e.depth == 0 && !e.backward) out.total_flops += e.flops;
  out.total_parameters = model.num_parameters();
  return out;
}

namespace {
// 1234567 -> "1.23M"; below 10000 as is.
std::string human(double v, const char* unit) {
  std::ostringstream os;
  const char* suffix[] = {"", "K", "M", "G", "T"};
  int k = 0;
  if (v >= 10000) {
    while (v >= 1000 && k < 4) {
      v /= 1000;
      ++k;
    }
    os << std::fixed << std::setprecision(2);
  }
  os << v << suffix[k] << unit;
  return os.str();
}
std::string shape_text(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}
}  // namespace

std::string ModelSummary::to_string() const {
  std::vector<std::string> names;
  std::size_t name_w = std::string("module").size();
  std::size_t shape_w = std::string("output shape").size();
  for (const ModuleSummaryRow& r : rows) {
    std::string n = std::string(static_cast<std::size_t>(2 * r.depth), ' ') +
                    (r.name.empty() ? r.type : r.name + " (" + r.type + ")");
    name_w = std::max(name_w, n.size());
    shape_w = std::max(shape_w, r.calls ? shape_text(r.output_shape).size() : 1);
    names.push_back(std::move(n));
  }
  std::ostringstream os;
  auto line = [&](const std::string& a, const std::string& b, const std::string& c,
                  const std::string& d, const std::string& e) {
    os << std::left << std::setw(static_cast<int>(name_w)) << a << "  "
       << std::setw(static_cast<int>(shape_w)) << b << "  " << std::right << std::setw(12) << c
       << "  " << std::setw(12) << d << "  " << std::setw(12) << e << '\n';
  };
  line("module", "output shape", "parameters", "FLOPs", "saved");
  const std::string rule(name_w + shape_w + 6 + 3 * 12 + 2, '-');
  os << rule << '\n';
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ModuleSummaryRow& r = rows[i];
    line(names[i], r.calls ? shape_text(r.output_shape) : "-", std::to_string(r.parameters),
         human(static_cast<double>(r.flops), ""), human(static_cast<double>(r.saved_bytes), "B"));
  }
  os << rule << '\n';
  os << "input " << input_shape << ", " << total_parameters << " parameters, "
     << human(static_cast<double>(total_flops), "") << " forward FLOPs, "
     << human(static_cast<double>(total_saved_bytes), "B") << " saved for backward\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const ModelSummary& s) { return os << s.to_string(); }

}  // namespace adjoint::nn
