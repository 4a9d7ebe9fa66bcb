// GraphView: one plain description of a graph (nodes, edges, forward and backward steps)
// built from the graph itself, the names given and a recording. to_dot and graph_json only
// format it, so the picture and the page always say the same thing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/debug.h"

namespace adjoint::debug {

struct ViewNode {
  const Node* node = nullptr;
  std::string id;             // "n<sequence_nr>": stable within one graph
  std::string op;             // forward op ("mul"); "leaf" for AccumulateGrad
  std::string backward_name;  // node->name() ("MulBackward")
  std::string name;           // from GraphOptions::names, or empty
  std::string group;          // module prefix ("layers.0"), or empty: see GraphOptions
  bool leaf = false;
  int output = -1;              // which of the outputs this node produced, or -1
  std::string shape, dtype;     // of output 0, empty when unknown
  std::size_t saved_bytes = 0;  // elements of the tensors saved for backward
  std::size_t num_saved = 0;
  bool saved_freed = false;                 // a backward released them
  Tensor value;                             // forward value (recorded, the leaf, or the output)
  Tensor grad;                              // the leaf's .grad when show_grads
  int64_t forward_index = -1;               // its place among the recorded forward ops
  std::vector<std::size_t> backward_steps;  // indices into GraphView::steps
};

struct ViewEdge {
  std::size_t from = 0, to = 0;  // node indices: producer (input) -> consumer
  std::size_t input = 0;         // which input of the consumer (its next_edges index)
  Tensor value;                  // the producer's forward value, when known
  Tensor grad;                   // what the consumer's VJP sent along it in its last recorded step
};

struct ViewStep {
  std::size_t node = 0;
  std::vector<Tensor> grads_in;  // per output of the node
  std::vector<Tensor> vjp;       // per input edge of the node (empty when unknown)
  std::string vjp_error;
};

struct GraphView {
  std::vector<ViewNode> nodes;  // creation order
  std::vector<ViewEdge> edges;
  std::vector<std::size_t> forward;  // node indices in the order the forward ran
  std::vector<ViewStep> steps;       // backward, in the order the engine ran
};

/// Builds the view; `op` names the public function in errors.
GraphView build_view(const std::vector<Tensor>& outputs, const GraphOptions& options,
                     const char* op);

/// "0.6442", "[1, -2.5, 3]", "[1, 2, 3, ...] (12 values, norm 9.1)": at most `max_values`
/// numbers, with 4 significant digits.
std::string format_values(const Tensor& t, std::size_t max_values);
/// Euclidean norm of all elements, in double.
double norm_of(const Tensor& t);
/// "[2, 3]".
std::string shape_text(const Tensor& t);

}  // namespace adjoint::debug
