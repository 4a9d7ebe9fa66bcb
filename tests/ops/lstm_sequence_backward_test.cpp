// lstm_sequence's fused gradient (Note [The fused LSTM sequence gradient]): a first-order
// gradient runs on the one-kernel op, with the same bits as calling lstm_sequence_backward on
// the forward's saved pre-activations, and agrees with its oracle, the rule's loop of ops (which
// a gradient with create_graph runs), forward and reverse, float32 on the benchmark's sizes
// and float64 on odd ones; it differentiates in its cotangents (the registry checks that
// against finite differences) and names its error for the other inputs; bad input is named.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/rnn_ops.h"
#include "autograd/saved_tensor.h"

namespace adjoint {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.detach().contiguous().to(DType::Float64).to_vector<double>();
}

double max_scaled(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<double> g = values(got), w = values(want);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

struct Problem {
  Tensor xp, w, h0, c0, uh, uc;
  Problem(int64_t steps, int64_t batch, int64_t hidden, DType dt, uint64_t seed) {
    Generator gen(seed);
    const double r = 1.0 / std::sqrt(static_cast<double>(hidden));
    xp = randn({steps, batch, 4 * hidden}, dt, &gen).requires_grad_(true);
    w = ((rand({4 * hidden, hidden}, dt, &gen) * 2.0 - 1.0) * r).detach().requires_grad_(true);
    h0 = randn({batch, hidden}, dt, &gen).requires_grad_(true);
    c0 = randn({batch, hidden}, dt, &gen).requires_grad_(true);
    uh = randn({steps, batch, hidden}, dt, &gen);
    uc = randn({steps, batch, hidden}, dt, &gen);
  }
  Tensor loss(const LSTMSequenceOutput& s) const { return (s.h * uh).sum() + (s.c * uc).sum(); }
};

// The forward node's saved pre-activations (Note [LSTM sequence rules]).
Tensor saved_gates(const LSTMSequenceOutput& s) {
  std::shared_ptr<Node> node = s.h.grad_fn();
  while (node && node->name() != "LstmSequenceBackward")
    node = node->next_edges().empty() ? nullptr : node->next_edges()[0].node;
  EXPECT_TRUE(node) << "no LstmSequenceBackward node";
  Tensor gates;
  if (node)
    node->visit_saved([&](const SavedTensor& t, const char* role, std::size_t i) {
      if (std::string(role) == "saved" && i == 0) gates = t.unpack(node);
    });
  return gates;
}

TEST(LstmSequenceBackward, FirstOrderGradientsRunOnTheFusedOpAndMatchTheLoopOfOps) {
  struct Case {
    int64_t steps, batch, hidden;
    DType dt;
  };
  for (const Case& k : {Case{64, 32, 512, DType::Float32}, Case{9, 4, 33, DType::Float32},
                        Case{9, 4, 33, DType::Float64}, Case{1, 1, 1, DType::Float64}}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(std::string(to_string(k.dt)) + " H " + std::to_string(k.hidden) +
                   (reverse ? " reverse" : ""));
      const Problem p(k.steps, k.batch, k.hidden, k.dt, 21);
      const LSTMSequenceOutput s = lstm_sequence(p.xp, p.w, p.h0, p.c0, reverse);
      const std::vector<Tensor> inputs{p.xp, p.w, p.h0, p.c0};
      const std::vector<Tensor> fused = autograd::grad({p.loss(s)}, inputs, {}, true);
      // With create_graph the rule runs as ops (the oracle).
      const std::vector<Tensor> ops = autograd::grad({p.loss(s)}, inputs, {}, true, true);
      const double tolerance = k.dt == DType::Float64 ? 1e-12 : 2e-5;
      for (std::size_t i = 0; i < inputs.size(); ++i)
        EXPECT_LE(max_scaled(fused[i], ops[i]), tolerance) << "input " << i;
      // The same bits as the op called on the saved pre-activations.
      const LSTMSequenceGrad direct = lstm_sequence_backward(
          p.uh, p.uc, saved_gates(s), s.c.detach(), p.c0.detach(), p.w.detach(), reverse);
      EXPECT_EQ(values(fused[0]), values(direct.xp));
      EXPECT_EQ(values(fused[2]), values(direct.h0));
      EXPECT_EQ(values(fused[3]), values(direct.c0));
    }
  }
}

TEST(LstmSequenceBackward, SameResultOnOneThreadAndTwo) {
  const Problem p(7, 8, 96, DType::Float32, 5);
  const int before = get_num_threads();
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const LSTMSequenceOutput s = lstm_sequence(p.xp, p.w, p.h0, p.c0);
    runs.push_back(autograd::grad({p.loss(s)}, {p.xp, p.w, p.h0, p.c0}));
  }
  set_num_threads(before);
  for (std::size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_LE(max_scaled(runs[1][i], runs[0][i]), 2e-6) << "input " << i;
}

TEST(LstmSequenceBackward, DerivativesInTheGatesStatesOrWeightAreANamedError) {
  const Problem p(3, 2, 4, DType::Float64, 9);
  const Tensor gates = randn({3, 2, 16}, DType::Float64).requires_grad_(true);
  const Tensor c = randn({3, 2, 4}, DType::Float64);
  const LSTMSequenceGrad g =
      lstm_sequence_backward(p.uh, p.uc, gates, c, p.c0.detach(), p.w.detach());
  try {
    autograd::grad({g.xp.sum()}, {gates});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("lstm_sequence_backward"), std::string::npos) << m;
    EXPECT_NE(m.find("only in its cotangent"), std::string::npos) << m;
  }
}

TEST(LstmSequenceBackward, BadInputIsANamedError) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor u = zeros({3, 2, 2}), gates = zeros({3, 2, 8}), w = zeros({8, 2}), s = zeros({2, 2});
  const std::string width = message([&] {
    lstm_sequence_backward(u, u, zeros({3, 2, 7}), u, s, w);
  });
  EXPECT_NE(width.find("lstm_sequence_backward"), std::string::npos) << width;
  EXPECT_NE(width.find("[3, 2, 7]"), std::string::npos) << width;
  const std::string grad = message([&] {
    lstm_sequence_backward(zeros({3, 2}), u, gates, u, s, w);
  });
  EXPECT_NE(grad.find("grad_h"), std::string::npos) << grad;
  const std::string ints = message([&] {
    lstm_sequence_backward(u, u, gates, u, zeros({2, 2}, DType::Int64), w);
  });
  EXPECT_NE(ints.find("int64"), std::string::npos) << ints;
}

}  // namespace
}  // namespace adjoint
