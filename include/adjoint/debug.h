// Seeing the autograd graph: a recorder that keeps each op's forward value and, in backward,
// the order the nodes ran with the gradient reaching each and what its VJP sent on; the graph
// as Graphviz DOT (rendered to SVG by Graphviz's `dot` program); and a self-contained HTML
// page that steps through forward and backward node by node. How to read them: docs/graphs.md.
// Anomaly mode is in anomaly.h, profiles in profiler.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// Records a graph as it runs, for to_dot and write_html. While alive it keeps a copy of the
/// output of every op this thread runs through the autograd layer, and hooks the nodes those
/// ops make (and the leaves they read) so that a later backward, on any thread, records the
/// order the nodes ran, the gradient arriving at each and, for single-output nodes, the
/// gradients its VJP sent to each input. The VJP is computed a second time inside the hook
/// (without recording), so recording costs about one extra backward; it is a debugging tool.
/// A leaf hooked by a recorder gets its gradient through AccumulateGrad rather than added
/// into .grad in place by the VJP (same values, one more buffer).
/// Nodes made elsewhere (custom functions, other threads) are hooked by watch().
class GraphRecorder {
 public:
  GraphRecorder();
  /// Stops recording and removes the hooks from the nodes still alive.
  ~GraphRecorder();
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  /// Stops recording forward ops (the backward hooks stay until destruction). Idempotent;
  /// call it on the thread that made the recorder.
  void stop_forward();
  /// Hooks every node reachable from `outputs` that is not hooked yet, so a later backward
  /// through them is recorded too (their forward values stay unknown).
  void watch(const std::vector<Tensor>& outputs);
  /// Forward ops recorded and backward nodes run so far.
  std::size_t num_forward_ops() const;
  std::size_t num_backward_steps() const;

  struct Impl;
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;  // shared with the hooks installed on nodes
};

/// What to draw and how.
struct GraphOptions {
  /// Names for tensors: a leaf's name labels its AccumulateGrad node, any other tensor's the
  /// node that produced it. Pass a model's named_parameters() (as torchviz's params=), and
  /// add inputs: {{"x", x}, {"W1", w1}}.
  std::vector<std::pair<std::string, Tensor>> names;
  /// Forward values, backward order and the gradients on each edge, from a recorder alive
  /// during the forward and backward of `outputs`.
  const GraphRecorder* recording = nullptr;
  /// Each leaf's .grad (norm, and values when small) on its node.
  bool show_grads = false;
  /// Bytes of the tensors each node saved for backward.
  bool show_saved = true;
  /// Elements printed per tensor before "..."; larger tensors show shape, norm and the first
  /// ones.
  std::size_t max_values = 6;
  /// Draw the forward flow left to right (the default is top to bottom).
  bool left_to_right = false;
  /// write_html only: above this many nodes the page draws one box per module (the dotted
  /// prefix of the parameter names each op reads) and steps through the nodes inside it.
  std::size_t max_nodes = 150;
};

/// The autograd graph behind `outputs` as Graphviz DOT: one node per backward node, labelled
/// with the forward op, output shape and dtype, saved bytes and, with a recording, values,
/// gradients and the backward step(s); edges run the way the forward data flowed (input to
/// consumer). Throws adjoint::Error when `outputs` is empty, holds an undefined tensor or
/// has no graph at all.
std::string to_dot(const std::vector<Tensor>& outputs, const GraphOptions& options = {});

/// Whether Graphviz's `dot` program can be run (Debian package graphviz).
bool graphviz_available();
/// Lays `dot_source` out with Graphviz's `dot -Tsvg` and returns the SVG; adjoint::Error
/// (NotImplemented) naming render_svg when `dot` is missing, (Value) when it rejects the input.
std::string render_svg(const std::string& dot_source);
/// to_dot, rendered and written atomically to `path` (.svg).
void write_svg(const std::vector<Tensor>& outputs, const std::string& path,
               const GraphOptions& options = {});

/// The page's data: the graph and every step (forward nodes in the order they ran, then the
/// recorded backward steps) as one JSON object. What write_html embeds.
std::string graph_json(const std::vector<Tensor>& outputs, const GraphOptions& options = {});

/// Writes one self-contained HTML page (inline script, style and SVG; nothing fetched) that
/// draws the graph and steps through it: forward node by node with its value, then backward
/// node by node with the gradient arriving and the gradients its VJP sends on, with
/// play/pause/step controls. Without a recording in `options`, and while the graph still
/// holds its saved tensors, it records a backward itself with autograd::grad (no .grad
/// changes) so the page has gradients. Written atomically (temp file + rename); adjoint::Error
/// naming write_html for bad outputs or a path it cannot write.
void write_html(const std::vector<Tensor>& outputs, const std::string& path,
                GraphOptions options = {});

}  // namespace adjoint
