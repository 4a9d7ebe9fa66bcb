// to_dot: the DOT read back against an independent walk of the graph (node ids, edges), the
// labels against values computed by hand, and the errors for bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/nn.h"
#include "debug/graph_test_util.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

TEST(GraphDot, NodesAndEdgesAreTheGraphs) {
  TwoLayerExample ex;
  ex.forward();
  const ParsedDot dot = parse_dot(to_dot({ex.loss}));
  const WalkedGraph g = walk(ex.loss);
  std::set<std::string> ids;
  for (const auto& [id, label] : dot.node_labels) ids.insert(id);
  std::set<std::string> want;
  for (const auto& [id, n] : g.nodes) want.insert(id);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(dot.edges, g.edges);
  EXPECT_EQ(g.edges.size(), 10u);  // d * d reads d twice: two edges
  // Each op node's label opens with its forward op: the node's name without "Backward",
  // lower case (the ops here have one-word names).
  for (const auto& [id, n] : g.nodes) {
    const std::string label = dot.node_labels.at(id);
    const std::string first = label.substr(0, label.find('\n'));
    std::string want_op = n->name();
    if (want_op == "AccumulateGrad") continue;
    want_op = want_op.substr(0, want_op.size() - std::string("Backward").size());
    for (char& c : want_op) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(first, want_op) << label;
  }
}

TEST(GraphDot, WorkedExampleValuesGradientsAndOrder) {
  SumSinExample ex;
  GraphRecorder rec;
  ex.forward();
  ex.f.backward();
  GraphOptions o;
  o.names = {{"x", ex.x}, {"y", ex.y}};
  o.recording = &rec;
  o.show_grads = true;
  const ParsedDot dot = parse_dot(to_dot({ex.f}, o));
  const WalkedGraph g = walk(ex.f);
  const double x = 0.7, y = -1.9;
  std::string sin_id, add_id, mul_id, x_id, y_id;
  for (const auto& [id, n] : g.nodes) {
    const std::string name = n->name();
    if (name == "SinBackward") sin_id = id;
    if (name == "AddBackward") add_id = id;
    if (name == "MulBackward") mul_id = id;
  }
  x_id = node_id(autograd::gradient_edge(ex.x).node.get());
  y_id = node_id(autograd::gradient_edge(ex.y).node.get());
  EXPECT_EQ(dot.node_labels.at(x_id).substr(0, 2), "x\n");
  EXPECT_EQ(dot.node_labels.at(y_id).substr(0, 2), "y\n");
  // Leaves: .grad, and the hand-derived gradients: df/dx = sin x + (x + y) cos x, df/dy = sin x.
  expect_close_4(label_numbers(dot.node_labels.at(x_id), "grad"), ex.x.grad().to_vector<double>(),
                 "x grad");
  expect_close_4(label_numbers(dot.node_labels.at(x_id), "grad"),
                 {std::sin(x) + (x + y) * std::cos(x)}, "df/dx");
  expect_close_4(label_numbers(dot.node_labels.at(y_id), "grad"), {std::sin(x)}, "df/dy");
  // Forward values on nodes and edges.
  expect_close_4(label_numbers(dot.node_labels.at(sin_id), "value"), {std::sin(x)}, "sin");
  expect_close_4(label_numbers(dot.node_labels.at(add_id), "value"), {x + y}, "add");
  expect_close_4(label_numbers(dot.node_labels.at(mul_id), "value"), {(x + y) * std::sin(x)}, "f");
  expect_close_4(label_numbers(dot.edge_labels.at({add_id, mul_id}), "value"), {x + y}, "edge");
  // Gradients on edges: what each VJP sent. Along x -> sin: (x + y) cos x; along x -> add:
  // sin x; the two add up to df/dx.
  expect_close_4(label_numbers(dot.edge_labels.at({x_id, sin_id}), "grad"), {(x + y) * std::cos(x)},
                 "x->sin");
  expect_close_4(label_numbers(dot.edge_labels.at({x_id, add_id}), "grad"), {std::sin(x)},
                 "x->add");
  expect_close_4(label_numbers(dot.edge_labels.at({sin_id, mul_id}), "grad"), {x + y}, "sin->mul");
  // Backward order: each node ran once, after every node that reads its output.
  std::map<std::string, int> step;
  const std::regex step_re(R"(backward step (\d+))");
  for (const auto& [id, label] : dot.node_labels) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(label, m, step_re)) << label;
    step[id] = std::stoi(m[1]);
  }
  std::set<int> steps;
  for (const auto& [id, s] : step) steps.insert(s);
  EXPECT_EQ(steps, (std::set<int>{1, 2, 3, 4, 5}));
  for (const auto& [from, to] : g.edges) EXPECT_LT(step[to], step[from]) << from << " <- " << to;
}

TEST(GraphDot, ModuleParametersAreNamedByPath) {
  Generator gen(3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(3, 2, true, &gen)});
  Tensor loss = (*model)(randn({5, 4}, {}, &gen)).pow(2).mean();
  loss.backward();
  GraphOptions o;
  o.names = model->named_parameters();
  o.show_grads = true;
  o.max_values = 100;
  const ParsedDot dot = parse_dot(to_dot({loss}, o));
  ASSERT_EQ(o.names.size(), 4u);
  for (const auto& [name, p] : o.names) {
    const std::string id = node_id(autograd::gradient_edge(p).node.get());
    const std::string label = dot.node_labels.at(id);
    EXPECT_EQ(label.substr(0, label.find('\n')), name);
    expect_close_4(label_numbers(label, "grad"), p.grad().to_vector<double>(), name);
    EXPECT_NE(label.find(to_string(p.shape()) + " float32"), std::string::npos) << label;
  }
}

TEST(GraphDot, SavedBytesAndFreedTensors) {
  TwoLayerExample ex;
  ex.forward();
  // matmul(W2, h) saves both inputs: [1, 3] and [3, 1] float64.
  auto mm_label = [&](const std::string& dot) {
    const ParsedDot p = parse_dot(dot);
    return p.node_labels.at(node_id(ex.out.grad_fn().get()));
  };
  const std::string before = mm_label(to_dot({ex.loss}));
  EXPECT_NE(before.find("saved 48 B"), std::string::npos) << before;
  EXPECT_EQ(before.find("freed"), std::string::npos) << before;
  // Without a recording, shapes come from what nodes saved: matmul saved h, so relu's output
  // shape is known.
  const ParsedDot p = parse_dot(to_dot({ex.loss}));
  EXPECT_NE(p.node_labels.at(node_id(ex.h.grad_fn().get())).find("relu\n[3, 1] float64"),
            std::string::npos);
  ex.loss.backward();
  EXPECT_NE(mm_label(to_dot({ex.loss})).find("saved 48 B (freed)"), std::string::npos);
}

TEST(GraphDot, BadInputNamesTheFunction) {
  expect_error([] { to_dot({}); }, ErrorKind::Value, {"[to_dot]", "no outputs"});
  expect_error([] { to_dot({Tensor()}); }, ErrorKind::Value, {"[to_dot]", "undefined"});
  expect_error([] { to_dot({ones({2})}); }, ErrorKind::Value, {"[to_dot]", "no autograd graph"});
}

}  // namespace
}  // namespace adjoint::testing
