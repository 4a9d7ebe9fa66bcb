// Shared by the graph-picture tests: the worked examples, an independent walk of a graph,
// and a reader for the DOT that to_dot writes (nodes with labels, edges with labels).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/debug.h"

namespace adjoint::testing {

/// f(x, y) = (x + y) * sin(x) at x = 0.7, y = -1.9 (float64).
struct SumSinExample {
  Tensor x = scalar_tensor(0.7, DType::Float64).requires_grad_(true);
  Tensor y = scalar_tensor(-1.9, DType::Float64).requires_grad_(true);
  Tensor f;
  void forward() { f = (x + y) * sin(x); }
};

/// z = W1 x + b1, h = relu(z), loss = sum((W2 h - t)^2), with small fixed values.
struct TwoLayerExample {
  Tensor x = tensor({1.0, -2.0}, Shape{2, 1}, DType::Float64);
  Tensor W1 =
      tensor({0.5, -0.3, 0.8, 0.2, -0.6, 0.1}, Shape{3, 2}, DType::Float64).requires_grad_(true);
  Tensor b1 = tensor({0.1, 0.2, 0.3}, Shape{3, 1}, DType::Float64).requires_grad_(true);
  Tensor W2 = tensor({0.7, -0.4, 0.9}, Shape{1, 3}, DType::Float64).requires_grad_(true);
  Tensor t = tensor({0.5}, Shape{1, 1}, DType::Float64);
  Tensor z, h, out, loss;
  void forward() {
    z = matmul(W1, x) + b1;
    h = relu(z);
    out = matmul(W2, h);
    Tensor d = out - t;
    loss = (d * d).sum();
  }
  std::vector<std::pair<std::string, Tensor>> names() const {
    return {{"W1", W1}, {"b1", b1}, {"W2", W2}};
  }
};

/// The graph walked here, independently of src/debug: node ids ("n" + sequence number) with
/// their names, and the edges (input -> consumer) by id, once per input (x * x has two).
struct WalkedGraph {
  std::map<std::string, Node*> nodes;
  std::multiset<std::pair<std::string, std::string>> edges;
};

inline std::string node_id(const Node* n) {
  std::string id = "n";
  id += std::to_string(n->sequence_nr());
  return id;
}

inline WalkedGraph walk(const Tensor& output) {
  WalkedGraph g;
  std::vector<Node*> todo{autograd::gradient_edge(output).node.get()};
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    if (!g.nodes.emplace(node_id(n), n).second) continue;  // its edges are in already
    for (const Edge& e : n->next_edges()) {
      if (!e.node) continue;
      g.edges.insert({node_id(e.node.get()), node_id(n)});
      todo.push_back(e.node.get());
    }
  }
  return g;
}

/// What to_dot wrote, read back: labels with "\n" turned into newlines.
struct ParsedDot {
  std::map<std::string, std::string> node_labels;
  std::multiset<std::pair<std::string, std::string>> edges;
  std::map<std::pair<std::string, std::string>, std::string> edge_labels;
};

inline std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out += s[i + 1] == 'n' ? '\n' : s[i + 1];
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

inline ParsedDot parse_dot(const std::string& dot) {
  ParsedDot p;
  const std::regex node_re(R"re(^\s*(n\d+) \[label="((?:[^"\\]|\\.)*)")re");
  const std::regex edge_re(R"re(^\s*(n\d+) -> (n\d+)(?: \[label="((?:[^"\\]|\\.)*)"\])?;)re");
  std::istringstream in(dot);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, edge_re)) {
      p.edge_labels[{m[1], m[2]}] = unescape(m[3]);
      p.edges.insert({m[1], m[2]});
    } else if (std::regex_search(line, m, node_re)) {
      p.node_labels[m[1]] = unescape(m[2]);
    }
  }
  return p;
}

/// The numbers after "<key>: " on the label line that starts with it ("grad: [1, 2.5]").
inline std::vector<double> label_numbers(const std::string& label, const std::string& key) {
  std::istringstream in(label);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ": ", 0) != 0) continue;
    std::vector<double> v;
    const std::regex num(R"([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf))");
    std::string rest = line.substr(key.size() + 2);
    rest = rest.substr(0, rest.find(" ("));  // drop "(n values, norm ...)"
    for (std::sregex_iterator it(rest.begin(), rest.end(), num), end; it != end; ++it)
      v.push_back(std::strtod(it->str().c_str(), nullptr));
    return v;
  }
  return {};
}

/// Labels print 4 significant digits.
inline void expect_close_4(const std::vector<double>& shown, const std::vector<double>& want,
                           const std::string& what) {
  ASSERT_EQ(shown.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(shown[i], want[i], 6e-4 * std::max(1.0, std::abs(want[i])))
        << what << " [" << i << "]";
}

}  // namespace adjoint::testing
