// The graph `compile` records: values (inputs, captured tensors, constants, cotangents, op
// results) and the op calls between them, in the order they ran. See Note [Tracing] in
// trace.cpp for how it is built and passes.h for what is done to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adjoint/tensor.h"
#include "core/op_tracer.h"
#include "dispatch/layer.h"

namespace adjoint {
class Generator;
}

namespace adjoint::detail {

enum class ValueKind : uint8_t {
  Input,      ///< the function's argument `index`
  Capture,    ///< a tensor from outside the function (a parameter), read at every call
  Constant,   ///< a tensor a factory made from C++ values while tracing, kept as it was
  Cotangent,  ///< the gradient arriving for output `index` (the backward graph's input)
  Result      ///< output `index` of node `node` (0: its result, then what it saved)
};

struct Value {
  ValueKind kind;
  int index = 0;
  int node = -1;
  Shape shape;
  DType dtype = kDefaultFloat;
  /// A result that shares its input's memory (a view): that input's value id, else -1.
  int alias_of = -1;
};

struct GraphNode {
  std::shared_ptr<const TracedOp> op;
  std::vector<int> inputs;   ///< value ids; -1 for an undefined (optional) input
  std::vector<int> outputs;  ///< value ids: the result, then the tensors its forward saved
  bool backward = false;     ///< recorded while the VJPs ran
  bool random = false;       ///< a draw from a generator: never eliminated nor merged
  /// A side effect each replay performs (an optimizer's step: Note [Training steps under
  /// compile] in trace.cpp): never eliminated, merged nor fused; its result is undefined.
  bool effect = false;
  /// Whether passes must keep the node though nothing reads its result.
  bool pinned() const { return random || effect; }
};

/// A tensor of the caller's that a compiled function writes in place: argument `index`
/// (kind Input) or captured tensor `index` (kind Capture). See Note [In-place ops under compile].
/// `grad`: the write is to its .grad (Note [Training steps under compile] in trace.cpp).
struct LeafWrite {
  ValueKind kind;
  int index;
  bool grad = false;
};

/// Argument or captured tensor `index` (as LeafWrite) had a .grad (`defined`) or none when
/// the function read it (Note [Training steps under compile] in trace.cpp).
struct GradGuard {
  ValueKind kind;
  int index;
  bool defined;
};

struct Graph {
  std::vector<Value> values;
  std::vector<GraphNode> nodes;
  std::vector<int> inputs;        ///< value id of each argument
  std::vector<Tensor> captures;   ///< by Value::index: the caller's tensors, held
  std::vector<Tensor> constants;  ///< by Value::index
  /// By constant, while tracing: how its factory made it (no key: unknown), for dynamic
  /// sizes (Note [Dynamic sizes]). Shorter than `constants` in a graph read from a file.
  std::vector<ExternalExport> constant_recipes;
  std::vector<Generator*> generators;  ///< those the random nodes draw from
  std::vector<int> outputs;            ///< value id of each result of the function
  /// The caller's tensors the function wrote in place, in order; their final values are the
  /// last outputs (after the function's own), written into them at the end of each replay.
  std::vector<LeafWrite> writes;
  /// The caller's tensors whose .grad the function read before setting it, and whether it
  /// held one: a call where that differs traces again.
  std::vector<GradGuard> grad_guards;
  bool has_effects() const {
    for (const GraphNode& n : nodes)
      if (n.effect) return true;
    return false;
  }
  /// How many of `outputs` are the function's own results.
  std::size_t function_outputs() const { return outputs.size() - writes.size(); }
  /// By output: the traced result did not require grad. A result that is an argument's or a
  /// capture's detached alias (`x.detach()`) is that leaf's value in the graph, which does
  /// require grad; the replay hands it on detached, as the function did. Empty: no such
  /// result (a graph read from a file).
  std::vector<bool> output_detached;
  /// The backward: for each output, the cotangent value it receives (-1: it needs none), and
  /// for each differentiated leaf (an input or capture value), the value of its gradient (-1:
  /// the outputs do not depend on it).
  std::vector<int> cotangents;
  std::vector<int> grad_leaves;
  std::vector<int> grads;

  int add_value(Value v) {
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
  }
  bool has_backward() const { return !grad_leaves.empty(); }
  /// Sets each result's producer (Value::node, Value::index) from the node list, after the
  /// nodes were removed, added or reordered.
  void index_results();
};

/// A traced graph with what else its signature fixed: the arguments' strides (ops decide by
/// layout: reshape views or copies) and grad mode.
struct TracedSignature {
  Graph graph;
  std::vector<Shape> input_strides;  ///< by argument; empty for an undefined one
  bool grad_enabled = true;
};

/// The graph as text: one line per value definition, forward then backward.
std::string graph_to_text(const Graph& g);
/// The graph in Graphviz's dot language.
std::string graph_to_dot(const Graph& g);

}  // namespace adjoint::detail
