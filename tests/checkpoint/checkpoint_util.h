// Helpers shared by the checkpointing tests: a small GELU MLP with its input, gradients as exact
// values, generator states, and a count of the tensors a plain run saves for backward.
#pragma once

#include <gtest/gtest.h>

#include <any>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace adjoint::testing {

/// A GELU MLP of the given widths and an input batch that requires grad, drawn from seed.
struct MlpWithInput {
  std::shared_ptr<nn::MLP> net;
  Tensor x;
  MlpWithInput(std::vector<int64_t> widths, int64_t rows, uint64_t seed,
               DType dtype = DType::Float32) {
    Generator gen(seed);
    net = std::make_shared<nn::MLP>(widths, nn::Activation::GELU, true, &gen);
    net->to(dtype);
    x = randn({rows, widths.front()}, dtype, &gen).requires_grad_(true);
  }
  /// The parameters, then x: every leaf a gradient reaches.
  std::vector<Tensor> leaves() const {
    std::vector<Tensor> ps = net->parameters();
    ps.push_back(x);
    return ps;
  }
  Tensor run(const std::vector<Tensor>& xs) const { return net->forward(xs[0]); }
  static Tensor loss(const Tensor& y) { return (y * y).mean(); }
};

/// The elements of each tensor as doubles (exact for float32 and float64).
inline std::vector<std::vector<double>> values_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts)
    out.push_back(t.defined() ? t.to_vector<double>() : std::vector<double>{});
  return out;
}

/// The .grad of each tensor, as values_of.
inline std::vector<std::vector<double>> grads_of(const std::vector<Tensor>& ts) {
  std::vector<Tensor> g;
  for (const Tensor& t : ts) g.push_back(t.grad());
  return values_of(g);
}

/// Bitwise equality of two lists of values, reporting the first difference.
inline void expect_bitwise(const std::vector<std::vector<double>>& a,
                           const std::vector<std::vector<double>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << "tensor " << i;
    ASSERT_FALSE(a[i].empty()) << "tensor " << i << " has no values (no gradient?)";
    for (std::size_t j = 0; j < a[i].size(); ++j)
      ASSERT_EQ(a[i][j], b[i][j]) << "tensor " << i << " element " << j;
  }
}

/// Generator states, to run the same random draws twice.
struct GeneratorStates {
  std::vector<std::pair<Generator*, Generator::State>> states;
  explicit GeneratorStates(std::vector<Generator*> gens) {
    gens.push_back(&default_generator());
    for (Generator* g : gens) states.emplace_back(g, g->state());
  }
  void restore() const {
    for (const auto& [g, s] : states) g->set_state(s);
  }
};

inline bool same_state(const Generator::State& a, const Generator::State& b) {
  return a.s0 == b.s0 && a.s1 == b.s1 && a.has_cached == b.has_cached;
}

/// How many tensors f's ops save for backward when nothing is checkpointed.
template <class F>
int count_saved(F&& f) {
  int n = 0;
  SavedTensorHooks hooks(
      [&n](const Tensor& t) {
        ++n;
        return std::any(t);
      },
      [](const std::any& a) { return std::any_cast<Tensor>(a); });
  f();
  return n;
}

}  // namespace adjoint::testing
