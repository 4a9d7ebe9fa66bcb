// compile: trace a function over tensors once, run the recorded graph many times.
//
//   auto step = adjoint::compile([&](const std::vector<Tensor>& in) {
//     return std::vector<Tensor>{model.forward(in[0])};
//   });
//   Tensor y = step({x})[0];   // first call: traces; later calls with the same signature replay
//
// The first call with a given signature (the inputs' shapes, dtypes, requires-grad flags and
// layouts, grad mode, autocast, and the static arguments) runs the function once through the
// tracer, which records every op into a graph; tensors the function reads from outside
// (a module's parameters) become captured inputs, read again at every call. When an input or a
// captured tensor requires grad, the backward is traced too (the ops' VJPs), and a replay runs
// the forward kernels alone and attaches one node whose backward runs the traced backward
// graph. Later calls replay the optimised graph without running the function and without
// recording op by op. docs/compile.md has the whole story: what is traced, the cache, graph
// breaks, the passes, and how to read a dump.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// A non-tensor argument the traced function depends on: part of the cache key, so a new value
/// traces again (JAX's static_argnums).
using StaticArg = std::variant<int64_t, double, bool, std::string>;
using StaticArgs = std::vector<StaticArg>;

/// What to do when the function cannot be traced (it reads a tensor's values into C++, or
/// changes an input in place): see docs/compile.md, "Graph breaks".
enum class OnGraphBreak {
  Eager,  ///< run the function eagerly for that signature, with a warning printed once
  Throw   ///< throw an Error naming the reason
};

/// A size that may change between calls without tracing again: dim `dim` (negative counts
/// from the end) of argument `input`. Dims with the same `symbol` share one size (a batch that
/// the inputs and the targets share); up to 3 symbols (a batch and a sequence length: 0 and 1).
/// docs/compile.md, "Dynamic sizes".
struct DynamicDim {
  int input = 0;
  int64_t dim = 0;
  int symbol = 0;
};

struct CompileOptions {
  /// Passes, each switchable (docs/compile.md, "Passes").
  bool eliminate_dead_code = true;
  bool eliminate_common_subexpressions = true;
  /// The backward computes again the forward's pointwise values it needs, from what they
  /// were computed from, instead of keeping them.
  bool recompute_pointwise = true;
  /// Chains and trees of pointwise ops run as one loop over memory.
  bool fuse_pointwise = true;
  /// Most signatures traced for one compiled function; calls with a new signature beyond it
  /// run eagerly, with a warning printed once.
  std::size_t cache_limit = 8;
  OnGraphBreak on_graph_break = OnGraphBreak::Eager;
  /// Dims of the arguments whose sizes may change without a new trace. Once two calls with
  /// different sizes were traced, the function is traced at a few more (the other corners of
  /// the box the two span, a size between them and one about twice as large) to learn how the
  /// graph depends on the sizes, and later sizes (2 or more) get the graph built from that,
  /// without running the function. The function must not branch on these sizes
  /// (docs/compile.md, "Dynamic sizes"). Empty: every size is a new signature.
  std::vector<DynamicDim> dynamic;
  /// Prints warnings (graph breaks, the cache limit) to stderr.
  bool warn = true;
};

/// Counts a compiled function keeps: how often it traced, replayed, and fell back.
struct CompileStats {
  int64_t traces = 0;            ///< signatures traced (each a cache entry)
  int64_t replays = 0;           ///< calls served by a traced graph
  int64_t dispatched = 0;        ///< of those, replays op by op through the dispatch stack
                                 ///< (inputs batched by vmap or carrying jvp tangents)
  int64_t eager_calls = 0;       ///< calls run eagerly (graph breaks, the cache limit)
  int64_t graph_breaks = 0;      ///< signatures that could not be traced
  int64_t guard_failures = 0;    ///< retraces because a captured tensor changed shape or dtype
  int64_t cache_limit_hits = 0;  ///< calls beyond cache_limit
  int64_t probes = 0;            ///< traces at made-up dynamic sizes, to fit the graph's sizes
  int64_t instantiations = 0;    ///< signatures whose graph was built for new dynamic sizes
                                 ///< without a trace
};

/// The memory plan of a traced graph (docs/compile.md, "Memory planning"): values are let go
/// after their last use, so the caching allocator reuses their blocks; these are the most
/// bytes each run holds at once of the values it makes (size classes as the allocator counts
/// them; a view costs nothing), and what the forward keeps for the backward. Kernels' own
/// temporaries (a matmul's packing, a reduction's partial sums) are not in it.
struct CompiledMemoryPlan {
  std::size_t forward_peak_bytes = 0;
  std::size_t backward_peak_bytes = 0;
  std::size_t saved_bytes = 0;
  int nodes_traced = 0;  ///< before the passes
  int nodes = 0;         ///< as it runs
  int fused_away = 0;    ///< nodes folded into fused groups
  int recomputed = 0;    ///< forward nodes the backward computes again
};

class CompiledFunction;
namespace detail {
struct CompiledState;  // src/compile/compiled_function.cpp
struct TracedSignature;
/// The graph of the signature `f` called last, before the passes (for export); null before the
/// first trace or after a graph break.
std::shared_ptr<const TracedSignature> last_traced_signature(const CompiledFunction& f);
struct FittedFamily;  // src/compile/dynamic_family.h
/// The dynamic sizes' formulas of the signature `f` called last (for export); null when it
/// has none fitted.
std::shared_ptr<const FittedFamily> last_fitted_family(const CompiledFunction& f);
}  // namespace detail

class CompiledFunction {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&, const StaticArgs&)>;
  CompiledFunction(Fn f, CompileOptions options);

  /// Calls the function: traces on a new signature, else replays.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const StaticArgs& statics = {}) const;
  /// For a function of one tensor returning one. (A template, so that a braced list,
  /// `f({x, y})`, goes to the list form.)
  template <class T>
  requires std::same_as<T, Tensor> Tensor operator()(const T& x) const { return call_one(x); }

  CompileStats stats() const;
  /// The graph of the signature called last, as text: before the passes (`optimized` false)
  /// or as it runs. Empty before the first trace. docs/compile.md shows how to read it.
  std::string dump(bool optimized = true) const;
  /// The same graph in Graphviz's dot language.
  std::string to_dot(bool optimized = true) const;
  /// The memory plan and pass counts of the signature called last (zeros before a trace).
  CompiledMemoryPlan plan() const;

 private:
  Tensor call_one(const Tensor& x) const;
  std::shared_ptr<detail::CompiledState> state_;
  friend std::shared_ptr<const detail::TracedSignature> detail::last_traced_signature(
      const CompiledFunction& f);
  friend std::shared_ptr<const detail::FittedFamily> detail::last_fitted_family(
      const CompiledFunction& f);
};

/// Compiles f: a callable taking a list of tensors (and optionally the static arguments) and
/// returning a list, or taking one tensor and returning one.
template <class F>
CompiledFunction compile(F f, CompileOptions options = {}) {
  using List = std::vector<Tensor>;
  if constexpr (std::is_invocable_r_v<List, F, const List&, const StaticArgs&>) {
    return CompiledFunction(std::move(f), options);
  } else if constexpr (std::is_invocable_r_v<List, F, const List&>) {
    return CompiledFunction([f = std::move(f)](const List& in, const StaticArgs&) { return f(in); },
                            options);
  } else {
    static_assert(std::is_invocable_r_v<Tensor, F, const Tensor&>,
                  "compile takes f(std::vector<Tensor>) -> std::vector<Tensor>, "
                  "f(std::vector<Tensor>, StaticArgs) -> std::vector<Tensor>, or "
                  "f(Tensor) -> Tensor");
    return CompiledFunction(
        [f = std::move(f)](const List& in, const StaticArgs&) { return List{f(in.at(0))}; },
        options);
  }
}

}  // namespace adjoint
