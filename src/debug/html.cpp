// graph_json and write_html: the GraphView as JSON, embedded in the page of html_page.h.
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "adjoint/autograd.h"
#include "adjoint/debug.h"
#include "adjoint/error.h"
#include "adjoint/io/text_file.h"
#include "adjoint/ops.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "autograd/saved_tensor.h"
#include "debug/graph_view.h"
#include "debug/graph_walk.h"
#include "debug/html_page.h"

namespace adjoint {
namespace {

using nlohmann::json;

// Values the page shows in full; beyond this it shows the first ones and the norm.
constexpr std::size_t kMaxJsonValues = 64;

// JSON has no NaN or infinity, and they are what a debugging page most needs to show: they
// travel as the strings JavaScript's Number() reads back ("NaN", "Infinity", "-Infinity").
json number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

json tensor_json(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const std::vector<double> v = t.to_vector<double>();
  json values = json::array();
  for (std::size_t i = 0; i < v.size() && i < kMaxJsonValues; ++i) values.push_back(number(v[i]));
  json shape = json::array();
  for (int64_t d : t.shape()) shape.push_back(d);
  return {{"shape", shape},
          {"dtype", std::string(to_string(t.dtype()))},
          {"numel", t.numel()},
          {"values", values},
          {"norm", number(debug::norm_of(t))}};
}

json view_json(const debug::GraphView& view, const GraphOptions& options, const std::string& note) {
  json nodes = json::array();
  for (const debug::ViewNode& v : view.nodes) {
    nodes.push_back({{"id", v.id},
                     {"op", v.op},
                     {"backward_name", v.backward_name},
                     {"name", v.name},
                     {"group", v.group},
                     {"leaf", v.leaf},
                     {"output", v.output},
                     {"shape", v.shape},
                     {"dtype", v.dtype},
                     {"saved_bytes", v.saved_bytes},
                     {"num_saved", v.num_saved},
                     {"saved_freed", v.saved_freed},
                     {"value", tensor_json(v.value)},
                     {"grad", tensor_json(v.grad)}});
  }
  json edges = json::array();
  for (const debug::ViewEdge& e : view.edges)
    edges.push_back({{"from", e.from}, {"to", e.to}, {"input", e.input}});
  json steps = json::array();
  for (std::size_t n : view.forward) steps.push_back({{"phase", "forward"}, {"node", n}});
  for (const debug::ViewStep& s : view.steps) {
    json grads_in = json::array();
    for (const Tensor& g : s.grads_in) grads_in.push_back(tensor_json(g));
    // What the VJP sent along each input edge of the node, by edge index in "edges".
    json vjp = json::array();
    for (std::size_t i = 0; i < view.edges.size(); ++i) {
      const debug::ViewEdge& e = view.edges[i];
      if (e.to == s.node && e.input < s.vjp.size())
        vjp.push_back({{"edge", i}, {"to", e.from}, {"grad", tensor_json(s.vjp[e.input])}});
    }
    steps.push_back({{"phase", "backward"},
                     {"node", s.node},
                     {"grads_in", grads_in},
                     {"vjp", vjp},
                     {"vjp_error", s.vjp_error}});
  }
  return {{"format", "adjoint-graph-1"},
          {"nodes", nodes},
          {"edges", edges},
          {"steps", steps},
          {"num_forward", view.forward.size()},
          {"num_backward", view.steps.size()},
          {"grouped", view.nodes.size() > options.max_nodes},
          {"left_to_right", options.left_to_right},
          {"note", note}};
}

bool saved_tensors_freed(const std::vector<Node*>& nodes) {
  bool freed = false;
  for (Node* n : nodes)
    n->visit_saved([&](const SavedTensor& t, const char*, std::size_t) { freed |= t.released(); });
  return freed;
}

}  // namespace

std::string graph_json(const std::vector<Tensor>& outputs, const GraphOptions& options) {
  return view_json(debug::build_view(outputs, options, "graph_json"), options, "").dump();
}

void write_html(const std::vector<Tensor>& outputs, const std::string& path, GraphOptions options) {
  const std::vector<Node*> nodes = debug::graph_nodes(outputs, "write_html");
  std::string note;
  // Gradients for a page made without a recording: one backward run through autograd::grad,
  // recorded, seeded with ones, keeping the graph and leaving every .grad as it is.
  std::optional<GraphRecorder> own;
  if (!options.recording) {
    if (saved_tensors_freed(nodes)) {
      note =
          "A backward pass already freed this graph's saved tensors, so the page has no "
          "gradients: keep a GraphRecorder alive during forward and backward, or write the "
          "page before backward.";
    } else {
      own.emplace();
      own->stop_forward();
      own->watch(outputs);
      std::vector<Tensor> leaves, seeds;
      for (Node* n : nodes)
        if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) leaves.emplace_back(acc->leaf());
      for (const Tensor& o : outputs) seeds.push_back(ones_like(detail::detach_alias(o)));
      if (!leaves.empty())
        autograd::grad(outputs, leaves, seeds, /*retain_graph=*/true, /*create_graph=*/false,
                       /*allow_unused=*/true);
      options.recording = &*own;
      note = "Gradients from one backward pass seeded with ones (autograd::grad; .grad untouched).";
    }
  }
  std::string data = view_json(debug::build_view(outputs, options, "write_html"), options, note)
                         .dump(-1, ' ', false, json::error_handler_t::replace);
  // The data sits in a <script> element: "</" inside it would end that element early.
  std::string safe;
  safe.reserve(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += data[i];
    }
  }
  std::string page = debug::kHtmlPage;
  const std::string marker = "@ADJOINT_GRAPH_DATA@";
  page.replace(page.find(marker), marker.size(), safe);
  io::write_text_file_atomic(path, page, "write_html");
}

}  // namespace adjoint
