// CompiledFunction: the cache of traced graphs by signature, graph breaks, and the choice
// between the kernel replay and the op-by-op replay (docs/compile.md).
#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "adjoint/compile.h"
#include "adjoint/generator.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "autograd/forward_ad.h"
#include "compile/dynamic_family.h"
#include "compile/run_plan.h"
#include "compile/trace.h"
#include "core/op_tracer.h"
#include "vmap/batched.h"

namespace adjoint {
namespace detail {

struct CompiledEntry {
  std::string key;
  std::shared_ptr<const Plan> plan;               ///< null after a graph break
  std::shared_ptr<const TracedSignature> traced;  ///< before the passes: dump(false), export
  std::string graph_break;                        ///< why it could not be traced
  std::vector<bool> capture_requires_grad;
  std::vector<Shape> capture_strides;
  bool instance = false;  ///< built for a dynamic size from the fitted graph, not traced
  std::string family;     ///< DynamicFamily::key for a call with a dynamic size, else empty
};

/// The signatures that differ only in their dynamic sizes (Note [Dynamic sizes] in
/// dynamic_sizes.cpp): the first one traced, then the graph fitted from traces at more sizes,
/// or why it could not be.
struct DynamicFamily {
  std::string key;  ///< the signature with the dynamic sizes left out
  SymbolSizes first_sizes;
  std::shared_ptr<const TracedSignature> first;
  DynamicDims dims;  ///< of the first call (every call of the family has them)
  std::shared_ptr<const DynamicTemplate> fitted;
  bool refused = false;
};

struct CompiledState {
  CompiledFunction::Fn f;
  CompileOptions options;
  mutable std::mutex mutex;
  std::vector<std::shared_ptr<const CompiledEntry>> entries;
  std::vector<std::shared_ptr<DynamicFamily>> families;
  std::shared_ptr<const CompiledEntry> last;
  CompileStats stats;
  std::unordered_set<std::string> warned;

  void warn_once(const std::string& message) {
    if (!options.warn || !warned.insert(message).second) return;
    std::cerr << "adjoint: compile: " << message << "\n";
  }
};

namespace {

void append(std::ostringstream& os, const Shape& s) {
  for (int64_t d : s) os << d << ',';
}

/// Everything a trace depended on besides the values: the inputs' shapes, dtypes, strides
/// and requires-grad flags, grad and inference mode, autocast, and the static arguments.
/// `dynamic`: by input, (dim, symbol) pairs written as `*symbol`, of inputs that are contiguous
/// (their strides follow from their shapes).
std::string signature(const std::vector<Tensor>& inputs, const StaticArgs& statics,
                      const DynamicDims* dynamic = nullptr) {
  std::ostringstream os;
  os << tls_mode.grad_enabled << tls_mode.inference << int(tls_mode.autocast) << '|';
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) {
      os << "u|";
      continue;
    }
    os << static_cast<int>(x.dtype()) << ':';
    if (dynamic && !(*dynamic)[i].empty()) {
      const auto& dims = (*dynamic)[i];
      for (int64_t d = 0; d < x.dim(); ++d) {
        const auto star = std::ranges::find(dims, d, &std::pair<int64_t, std::size_t>::first);
        if (star != dims.end()) {
          os << '*' << star->second << ',';
        } else {
          os << x.shape()[d] << ',';
        }
      }
      os << ":c";
    } else {
      append(os, x.shape());
      os << ':';
      append(os, x.strides());  // ops decide by layout (reshape views or copies)
    }
    os << x.requires_grad() << '|';
  }
  for (const StaticArg& a : statics) {
    os << a.index() << '=';
    std::visit([&](const auto& v) { os << v; }, a);
    os << ';';
  }
  return os.str();
}

/// What the tracer runs the function on: the input itself, or for a batched input or one
/// with tangents, a plain tensor of the same logical shape with real values (its first
/// example), so that the ops' checks see real data.
Tensor stand_in(const Tensor& x) {
  if (!x.defined()) return x;
  Tensor t = x;
  if (batch_level(x) != 0) {
    t = all_examples(x);
    while (t.dim() > x.dim()) t = adjoint::select(t, 0, 0);
  }
  Tensor s = detail::detach_alias(t);
  if (x.requires_grad()) s.requires_grad_(true);
  return s;
}

/// Fills e from a graph traced (or built for a dynamic size) on `inputs`.
void finish_entry(CompiledEntry& e, Graph g, const std::vector<Tensor>& inputs,
                  const CompileOptions& options) {
  auto traced = std::make_shared<TracedSignature>();
  traced->graph = g;
  for (const Tensor& x : inputs)
    traced->input_strides.push_back(x.defined() ? x.strides() : Shape{});
  traced->grad_enabled = is_grad_enabled();
  e.traced = std::move(traced);
  for (const Tensor& c : g.captures) {
    e.capture_requires_grad.push_back(c.requires_grad());
    e.capture_strides.push_back(c.strides());
  }
  e.plan = std::make_shared<const Plan>(make_plan(std::move(g), options));
}

/// Makes room for a graph built for a dynamic size by dropping the oldest graph of its family
/// (any of them can be built again without a trace); false when the cache holds none.
bool evict_from_family(CompiledState& s, const std::string& family) {
  for (auto it = s.entries.begin(); it != s.entries.end(); ++it)
    if ((*it)->family == family) {
      s.entries.erase(it);
      return true;
    }
  return false;
}

/// A call's dynamic sizes (none: `call` empty), its family's key, the family when it has
/// one, and the formulas to build its graph from (none while retracing).
struct DynamicLookup {
  std::optional<DynamicCall> call;
  std::string key;
  std::shared_ptr<DynamicFamily> family;
  std::shared_ptr<const DynamicTemplate> fitted;
};

DynamicLookup dynamic_lookup(CompiledState& s, const std::vector<Tensor>& inputs,
                             const StaticArgs& statics, bool retrace) {
  DynamicLookup d;
  std::string mismatch;
  d.call = dynamic_call(s.options.dynamic, inputs, mismatch);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!mismatch.empty()) s.warn_once(mismatch);
  if (!d.call) return d;
  d.key = signature(inputs, statics, &d.call->dims);
  const auto it = std::ranges::find(s.families, d.key, &DynamicFamily::key);
  if (it != s.families.end()) d.family = *it;
  if (d.family && !retrace) d.fitted = d.family->fitted;
  return d;
}

/// A new signature's entry: its graph built from its family's formulas when they are fitted,
/// else traced. A first trace with dynamic sizes starts a family; its second sizes fit the
/// formulas (Note [Dynamic sizes] in dynamic_sizes.cpp).
std::shared_ptr<const CompiledEntry> new_entry(CompiledState& s, const std::string& key,
                                               const std::vector<Tensor>& inputs,
                                               const StaticArgs& statics, DynamicLookup& dynamic) {
  auto e = std::make_shared<CompiledEntry>();
  e->key = key;
  e->family = dynamic.key;
  std::vector<Tensor> stand_ins;
  for (const Tensor& x : inputs) stand_ins.push_back(stand_in(x));
  if (dynamic.fitted) {
    std::optional<Graph> built;
    try {
      built = dynamic.fitted->at(dynamic.call->sizes);
    } catch (const Error&) {  // sizes the formulas cannot take (a negative dim): traced below
    }
    if (built) {
      finish_entry(*e, std::move(*built), inputs, s.options);
      e->instance = true;
    }
  }
  if (!e->instance) {
    try {
      finish_entry(*e, trace_function(s.f, stand_ins, statics), inputs, s.options);
    } catch (const GraphBreak& b) {
      if (s.options.on_graph_break == OnGraphBreak::Throw) throw;
      e->graph_break = b.reason();
    } catch (const Error& err) {
      // An undefined argument is allowed (an optional input), but a function that reads it
      // fails far from the call (in an accessor: "[dtype] called on an undefined tensor"):
      // say which argument it was.
      const auto undefined =
          std::ranges::find_if(inputs, [](const Tensor& x) { return !x.defined(); });
      const bool read_undefined =
          std::string_view(err.what()).find("undefined tensor") != std::string::npos;
      if (undefined == inputs.end() || !read_undefined) throw;
      throw Error(err.kind(), "compile",
                  str("argument ", undefined - inputs.begin(),
                      " is an undefined tensor, and the function failed on it: ", err.what()));
    }
  }
  std::shared_ptr<DynamicFamily>& family = dynamic.family;
  bool fit = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ++(e->instance ? s.stats.instantiations : s.stats.traces);
    if (!e->plan) ++s.stats.graph_breaks;
    std::erase_if(s.entries, [&](const auto& old) { return old->key == key; });
    s.entries.push_back(e);
    if (dynamic.call && !family && e->plan) {
      family = std::make_shared<DynamicFamily>(DynamicFamily{
          dynamic.key, dynamic.call->sizes, e->traced, dynamic.call->dims, nullptr, false});
      s.families.push_back(family);
    } else if (family && !family->fitted && !family->refused &&
               dynamic.call->sizes != family->first_sizes) {
      fit = true;
    }
  }
  if (fit) {
    FitOutcome o;
    if (e->plan) {
      o = fit_family(s.f, statics, stand_ins, *dynamic.call, family->first_sizes,
                     family->first->graph, e->traced->graph);
    } else {
      o.refused = "the second sizes could not be traced: " + e->graph_break;
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stats.probes += o.probes;
    family->fitted = o.fitted;
    family->refused = !o.fitted;
    if (!o.fitted)
      s.warn_once("the dynamic sizes cannot be symbolic, so each size is traced: " + o.refused);
  }
  return e;
}

bool guards_hold(const CompiledEntry& e, const std::vector<Tensor>& inputs) {
  if (!e.plan) return true;
  const Graph& g = e.plan->graph;
  for (const GradGuard& w : g.grad_guards) {
    const auto i = static_cast<std::size_t>(w.index);
    const Tensor& t = w.kind == ValueKind::Input ? inputs[i] : g.captures[i];
    if (t.defined() && t.grad().defined() != w.defined) return false;
  }
  for (std::size_t i = 0; i < g.captures.size(); ++i) {
    const Tensor& c = g.captures[i];
    const Value& v = g.values[static_cast<std::size_t>(e.plan->capture_ids[i])];
    if (c.shape() != v.shape || c.dtype() != v.dtype || c.strides() != e.capture_strides[i] ||
        c.requires_grad() != e.capture_requires_grad[i])
      return false;
  }
  return true;
}

}  // namespace
}  // namespace detail

CompiledFunction::CompiledFunction(Fn f, CompileOptions options)
    : state_(std::make_shared<detail::CompiledState>()) {
  state_->f = std::move(f);
  state_->options = options;
}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs,
                                                 const StaticArgs& statics) const {
  detail::CompiledState& s = *state_;
  // Called while another compiled function traces: traced into that graph, op by op.
  if (detail::tracing()) return s.f(inputs, statics);

  const std::string key = detail::signature(inputs, statics);
  std::shared_ptr<const detail::CompiledEntry> entry;
  bool retrace = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto& e : s.entries)
      if (e->key == key) entry = e;
    if (entry && !detail::guards_hold(*entry, inputs)) {
      ++s.stats.guard_failures;
      retrace = true;
      entry = nullptr;
      s.families.clear();  // fitted on captured tensors that changed
    }
  }
  // A new signature with dynamic sizes: its family, whose formulas may build its graph.
  detail::DynamicLookup dynamic;
  if (!entry) dynamic = detail::dynamic_lookup(s, inputs, statics, retrace);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!entry && !retrace && s.entries.size() >= s.options.cache_limit &&
        !(dynamic.fitted && detail::evict_from_family(s, dynamic.key))) {
      ++s.stats.cache_limit_hits;
      ++s.stats.eager_calls;
      s.warn_once(detail::str("more than cache_limit = ", s.options.cache_limit,
                              " signatures (shapes, dtypes, requires-grad flags, static "
                              "arguments); calls with new ones run eagerly. Raise "
                              "CompileOptions::cache_limit if this is expected"));
      return s.f(inputs, statics);
    }
  }

  if (!entry) entry = detail::new_entry(s, key, inputs, statics, dynamic);

  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.last = entry;
    if (!entry->plan) {
      ++s.stats.eager_calls;
      s.warn_once("graph break, running eagerly for this signature: " + entry->graph_break);
    } else {
      ++s.stats.replays;
    }
  }
  if (!entry->plan) return s.f(inputs, statics);
  const detail::Graph& graph = entry->plan->graph;
  if (detail::transformed(inputs, &graph)) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      ++s.stats.dispatched;
    }
    // A graph that reads what its ops saved for backward cannot go op by op through the
    // stack; the function itself can.
    // A graph that writes in place runs as the function, whose in-place ops the transforms
    // handle themselves (Note [In-place ops under compile] in trace.cpp).
    if (entry->plan->forward_reads_saved || !graph.writes.empty() || graph.has_effects())
      return s.f(inputs, statics);
    return detail::run_plan_dispatched(*entry->plan, inputs);
  }
  std::vector<Tensor> outs = detail::run_plan(
      entry->plan, inputs,
      [state = state_, statics](const std::vector<Tensor>& in) { return state->f(in, statics); });
  if (!graph.writes.empty()) detail::write_back(graph, inputs, outs);
  return outs;
}

Tensor CompiledFunction::call_one(const Tensor& x) const {
  std::vector<Tensor> out = (*this)(std::vector<Tensor>{x});
  ADJOINT_CHECK(out.size() == 1, Value, "compile", "the function returned ", out.size(),
                " tensors; call it with a list to get them");
  return out[0];
}

CompileStats CompiledFunction::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

std::string CompiledFunction::dump(bool optimized) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto& e = state_->last;
  if (!e) return "";
  if (!e->plan) return "graph break: " + e->graph_break + "\n";
  return detail::graph_to_text(optimized ? e->plan->graph : e->traced->graph);
}

CompiledMemoryPlan CompiledFunction::plan() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto& e = state_->last;
  if (!e || !e->plan) return {};
  const detail::Plan& p = *e->plan;
  return {p.forward_peak_bytes,
          p.backward_peak_bytes,
          p.saved_bytes,
          p.nodes_traced,
          static_cast<int>(p.graph.nodes.size()),
          p.fused,
          p.recomputed};
}

namespace detail {

std::shared_ptr<const FittedFamily> last_fitted_family(const CompiledFunction& f) {
  std::lock_guard<std::mutex> lock(f.state_->mutex);
  const auto& e = f.state_->last;
  if (!e || !e->plan || e->family.empty()) return nullptr;
  for (const auto& family : f.state_->families)
    if (family->key == e->family && family->fitted) {
      auto out = std::make_shared<FittedFamily>();
      out->first = family->first;
      out->fitted = family->fitted;
      for (std::size_t i = 0; i < family->dims.size(); ++i)
        for (const auto& [dim, symbol] : family->dims[i])
          out->dims.push_back({static_cast<int>(i), dim, static_cast<int>(symbol)});
      return out;
    }
  return nullptr;
}

std::shared_ptr<const TracedSignature> last_traced_signature(const CompiledFunction& f) {
  std::lock_guard<std::mutex> lock(f.state_->mutex);
  const auto& e = f.state_->last;
  return e && e->plan ? e->traced : nullptr;
}

}  // namespace detail

std::string CompiledFunction::to_dot(bool optimized) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto& e = state_->last;
  if (!e || !e->plan) return "";
  return detail::graph_to_dot(optimized ? e->plan->graph : e->traced->graph);
}

}  // namespace adjoint
