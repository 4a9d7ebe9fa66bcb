// The calls of a compiled function with dynamic sizes: reading a call's sizes, and probing the
// function at more sizes to fit its graph's formulas (Note [Dynamic sizes] in
// dynamic_sizes.cpp).
#include "compile/dynamic_family.h"

#include <algorithm>
#include <deque>

#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "compile/trace.h"

namespace adjoint::detail {
namespace {

constexpr int kMaxSymbols = 3;  // 2^3 corners to probe

/// The arguments at sizes `at`: each one's rows along its dynamic dims taken in turn
/// (repeated when it has fewer), so that an index stays an index (embedding's tokens).
std::vector<Tensor> probe_inputs(const std::vector<Tensor>& stand_ins, const DynamicCall& call,
                                 const SymbolSizes& at) {
  std::vector<Tensor> out;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < stand_ins.size(); ++i) {
    Tensor x = stand_ins[i];
    if (call.dims[i].empty()) {
      out.push_back(x);
      continue;
    }
    for (const auto& [d, sym] : call.dims[i]) {
      std::vector<int64_t> rows(static_cast<std::size_t>(at[sym]));
      for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r) % x.size(d);
      x = index_select(x, d, tensor(rows));
    }
    x = detail::detach_alias(x.contiguous());
    if (stand_ins[i].requires_grad()) x.requires_grad_(true);
    out.push_back(x);
  }
  return out;
}

/// Traces the function at made-up sizes, counting the traces.
class Prober {
 public:
  Prober(const CompiledFunction::Fn& f, const StaticArgs& statics,
         const std::vector<Tensor>& stand_ins, const DynamicCall& call)
      : f_(f), statics_(statics), stand_ins_(stand_ins), call_(call) {}

  /// The graph at sizes `at`, or null when the function throws an Error there (a size it
  /// refuses: a length past its context). A graph break is thrown on.
  const Graph* trace_at(const SymbolSizes& at) {
    ++traces;
    try {
      graphs_.push_back(trace_function(f_, probe_inputs(stand_ins_, call_, at), statics_));
    } catch (const GraphBreak&) {
      throw;
    } catch (const Error& e) {
      last_error = e.what();
      return nullptr;
    }
    return &graphs_.back();
  }

  int64_t traces = 0;
  std::string last_error;  ///< of the last size the function refused

 private:
  const CompiledFunction::Fn& f_;
  const StaticArgs& statics_;
  const std::vector<Tensor>& stand_ins_;
  const DynamicCall& call_;
  std::deque<Graph> graphs_;  // a deque: the pointers handed out stay valid
};

/// The points one fit traces at, and the graphs there.
struct Probed {
  std::vector<const Graph*> graphs;
  std::vector<SymbolSizes> sizes;
  std::size_t base = 0;
  std::string refused;  ///< why the box could not be probed
};

/// The box's corners, then a near check and a far one (Note [Dynamic sizes]).
Probed probe_box(Prober& prober, const SymbolSizes& lo, const SymbolSizes& hi,
                 const SymbolSizes& first_sizes, const Graph& first,
                 const SymbolSizes& second_sizes, const Graph& second) {
  Probed p;
  for (const SymbolSizes& at : DynamicTemplate::corners(lo, hi)) {
    const Graph* g = at == first_sizes    ? &first
                     : at == second_sizes ? &second
                                          : prober.trace_at(at);
    if (g == nullptr) {
      p.refused = "the function fails at sizes " + describe_sizes(at) + ": " + prober.last_error;
      return p;
    }
    if (g == &first) p.base = p.graphs.size();
    p.graphs.push_back(g);
    p.sizes.push_back(at);
  }
  // Near: between the calls' sizes where there is room, else just past them, else just below.
  const std::size_t k = lo.size();
  SymbolSizes past(k), below(k);
  for (std::size_t i = 0; i < k; ++i) {
    const bool room = hi[i] - lo[i] >= 2;
    past[i] = room ? (lo[i] + hi[i]) / 2 : hi[i] + 1;
    below[i] = room || lo[i] < 3 ? past[i] : lo[i] - 1;
  }
  SymbolSizes near = past;
  const Graph* g = prober.trace_at(near);
  if (g == nullptr && below != past) g = prober.trace_at(near = below);
  if (g == nullptr) {
    p.refused = "the function fails at sizes " + describe_sizes(past) +
                " beside the traced ones: " + prober.last_error;
    return p;
  }
  p.graphs.push_back(g);
  p.sizes.push_back(near);
  // Far: twice the larger size, plus one, halfway back towards near while the function
  // refuses it; none when it refuses them all.
  SymbolSizes far(k);
  for (std::size_t i = 0; i < k; ++i) far[i] = 2 * hi[i] + 1;
  while (far != near) {
    if (const Graph* f = prober.trace_at(far)) {
      p.graphs.push_back(f);
      p.sizes.push_back(far);
      break;
    }
    const SymbolSizes was = far;
    for (std::size_t i = 0; i < k; ++i) far[i] = near[i] + (far[i] - near[i]) / 2;
    if (far == was) break;
  }
  return p;
}

}  // namespace

std::optional<DynamicCall> dynamic_call(const std::vector<DynamicDim>& dynamic,
                                        const std::vector<Tensor>& inputs, std::string& mismatch) {
  if (dynamic.empty()) return std::nullopt;
  std::vector<int64_t> symbol_size(kMaxSymbols, -1);
  std::vector<std::pair<std::size_t, int64_t>> dims;  // (input, dim), by entry of the option
  for (const DynamicDim& d : dynamic) {
    const auto i = static_cast<std::size_t>(d.input);
    ADJOINT_CHECK(d.input >= 0 && i < inputs.size() && inputs[i].defined(), Value, "compile",
                  "CompileOptions::dynamic names argument ", d.input, " of a call with ",
                  inputs.size(), " arguments", i < inputs.size() ? " (it is undefined)" : "");
    const Tensor& x = inputs[i];
    ADJOINT_CHECK(d.dim >= -x.dim() && d.dim < x.dim(), Value, "compile",
                  "CompileOptions::dynamic names dim ", d.dim, " of argument ", d.input,
                  ", which is ", adjoint::describe(x));
    ADJOINT_CHECK(d.symbol >= 0 && d.symbol < kMaxSymbols, Value, "compile",
                  "CompileOptions::dynamic: symbol ", d.symbol, " of dim ", d.dim, " of argument ",
                  d.input, " is not in [0, ", kMaxSymbols, ")");
    const int64_t dim = d.dim < 0 ? d.dim + x.dim() : d.dim;
    const int64_t n = x.shape()[dim];
    int64_t& size = symbol_size[static_cast<std::size_t>(d.symbol)];
    if (size >= 0 && n != size) {
      mismatch = str("the dims of dynamic symbol ", d.symbol, " have different sizes (", size,
                     " and ", n, " in argument ", d.input, "); such calls are traced size by size");
      return std::nullopt;
    }
    size = n;
    dims.emplace_back(i, dim);
  }
  DynamicCall call;
  std::vector<std::size_t> active(kMaxSymbols);
  for (std::size_t sym = 0; sym < static_cast<std::size_t>(kMaxSymbols); ++sym)
    if (symbol_size[sym] >= 2) {
      active[sym] = call.sizes.size();
      call.sizes.push_back(symbol_size[sym]);
    }
  if (call.sizes.empty()) return std::nullopt;
  call.dims.resize(inputs.size());
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const auto sym = static_cast<std::size_t>(dynamic[k].symbol);
    if (symbol_size[sym] >= 2) call.dims[dims[k].first].emplace_back(dims[k].second, active[sym]);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!call.dims[i].empty() && !inputs[i].is_contiguous()) return std::nullopt;
  return call;
}

FitOutcome fit_family(const CompiledFunction::Fn& f, const StaticArgs& statics,
                      const std::vector<Tensor>& stand_ins, const DynamicCall& call,
                      const SymbolSizes& first_sizes, const Graph& first, const Graph& second) {
  FitOutcome out;
  Prober prober(f, statics, stand_ins, call);
  const std::size_t k = call.sizes.size();
  try {
    // The box the two calls span. A symbol they did not change spans [n, n + 1], or when the
    // function refuses n + 1 (a length at its context), [n - 1, n].
    for (const bool downward : {false, true}) {
      SymbolSizes lo(k), hi(k);
      bool unchanged = false;
      for (std::size_t i = 0; i < k; ++i) {
        lo[i] = std::min(first_sizes[i], call.sizes[i]);
        hi[i] = std::max(first_sizes[i], call.sizes[i]);
        if (hi[i] == lo[i]) {
          unchanged = true;
          if (downward && lo[i] >= 3) {
            --lo[i];
          } else {
            ++hi[i];
          }
        }
      }
      if (downward && !unchanged) break;
      const Probed p = probe_box(prober, lo, hi, first_sizes, first, call.sizes, second);
      if (!p.refused.empty()) {
        out.refused = p.refused;
        continue;
      }
      auto fit = DynamicTemplate::fit(p.graphs, p.sizes, lo, hi, p.base);
      if (auto* t = std::get_if<DynamicTemplate>(&fit)) {
        out.fitted = std::make_shared<const DynamicTemplate>(std::move(*t));
        out.refused.clear();
      } else {
        out.refused = std::get<std::string>(fit);
      }
      break;
    }
  } catch (const GraphBreak& b) {
    out.refused = "the function cannot be traced at other sizes: " + b.reason();
  }
  out.probes = prober.traces;
  return out;
}

}  // namespace adjoint::detail
