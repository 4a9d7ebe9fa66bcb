// The fused LSTM cell (adjoint/rnn_ops.h) against its oracle, the composite of ops
// nn::detail::lstm_gates: values and gradients in float32 and float64 on the benchmark's sizes
// and odd ones, the nn::LSTM layer with and without fused gates, 16-bit inputs, double backward
// through the layer, and the errors. (Finite differences: the registry's samples_rnn_cell.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "adjoint/rnn_ops.h"
#include "nn/rnn_gates.h"

namespace adjoint {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.detach().contiguous().to(DType::Float64).to_vector<double>();
}

// The largest |got - want| / (|want| + floor) over the elements: a relative error that does not
// blow up where the oracle is near zero (floor: the scale of the result).
double max_rel(const Tensor& got, const Tensor& want, double floor) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<double> g = values(got), w = values(want);
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - w[i]) / (std::abs(w[i]) + floor));
  return worst;
}

// max |got - want| / max |want|: the error on the scale of the result (c' = f c + i g cancels,
// so an element's own relative error is not bounded by the roundings).
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

struct Case {
  int64_t rows, hidden;
};

// The vectorised sigmoid and tanh of the fused kernel and the scalar ones the composite runs on
// its strided chunks differ by an ulp or two, and the composite's products and sums round as
// the kernel's do (no FMA contraction there): a few ulps of the dtype on the result's scale.
double tolerance(DType dt) { return dt == DType::Float64 ? 4 * 2.2e-16 : 4 * 1.2e-7; }

TEST(LstmCellFused, MatchesTheCompositeForwardAndBackward) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& k : {Case{32, 512}, Case{3, 5}, Case{1, 1}, Case{7, 33}}) {
      SCOPED_TRACE(std::string(to_string(dt)) + " rows " + std::to_string(k.rows) + " hidden " +
                   std::to_string(k.hidden));
      Generator gen(3);
      const Tensor gi = (randn({k.rows, 4 * k.hidden}, dt, &gen) * 2.0).requires_grad_(true);
      const Tensor gh = randn({k.rows, 4 * k.hidden}, dt, &gen).requires_grad_(true);
      const Tensor c = randn({k.rows, k.hidden}, dt, &gen).requires_grad_(true);
      const nn::LSTMState want = nn::detail::lstm_gates(gi, gh, c);
      const nn::LSTMState got = nn::detail::lstm_gates_fused(gi, gh, c);
      EXPECT_LE(max_scaled(got.h, want.h), tolerance(dt));
      EXPECT_LE(max_scaled(got.c, want.c), tolerance(dt));
      // Both cotangents, and h' alone (dc' zero).
      const Tensor uh = randn({k.rows, k.hidden}, dt, &gen),
                   uc = randn({k.rows, k.hidden}, dt, &gen);
      for (bool with_c : {true, false}) {
        auto loss = [&](const nn::LSTMState& s) {
          return with_c ? (s.h * uh).sum() + (s.c * uc).sum() : (s.h * uh).sum();
        };
        const std::vector<Tensor> gw = autograd::grad({loss(want)}, {gi, gh, c}, {}, true);
        const std::vector<Tensor> gg = autograd::grad({loss(got)}, {gi, gh, c}, {}, true);
        for (std::size_t i = 0; i < 3; ++i)
          EXPECT_LE(max_scaled(gg[i], gw[i]), tolerance(dt)) << "gradient " << i;
      }
    }
  }
}

TEST(LstmCellFused, BackwardOpMatchesTheCompositeGradient) {
  Generator gen(5);
  const Tensor gates = randn({4, 24}, DType::Float64, &gen);
  const Tensor c = randn({4, 6}, DType::Float64, &gen);
  const Tensor dh = randn({4, 6}, DType::Float64, &gen), dc = randn({4, 6}, DType::Float64, &gen);
  const LSTMCellOutput got = lstm_cell_fused_backward(dh, dc, gates, c);
  const Tensor g = gates.detach().requires_grad_(true), cc = c.detach().requires_grad_(true);
  const nn::LSTMState s = nn::detail::lstm_gates(g, zeros_like(g), cc);
  const std::vector<Tensor> want = autograd::grad({(s.h * dh).sum() + (s.c * dc).sum()}, {g, cc});
  EXPECT_LE(max_rel(got.h, want[0], 1e-3), 1e-13);
  EXPECT_LE(max_rel(got.c, want[1], 1e-3), 1e-13);
  EXPECT_EQ(got.h.shape(), gates.shape());
  EXPECT_EQ(got.c.shape(), c.shape());
}

TEST(LstmCellFused, SixteenBitInputsComputeInFloat32) {
  Generator gen(9);
  const Tensor gates = randn({3, 16}, DType::Float32, &gen),
               c = randn({3, 4}, DType::Float32, &gen);
  const Tensor gb = gates.to(DType::BFloat16), cb = c.to(DType::BFloat16);
  const LSTMCellOutput got = lstm_cell_fused(gb, cb);
  EXPECT_EQ(got.h.dtype(), DType::BFloat16);
  // The float32 result on the same rounded inputs, rounded once.
  const LSTMCellOutput want = lstm_cell_fused(gb.to(DType::Float32), cb.to(DType::Float32));
  EXPECT_EQ(values(got.h), values(want.h.to(DType::BFloat16)));
  EXPECT_EQ(values(got.c), values(want.c.to(DType::BFloat16)));
}

// nn::LSTM with fused gates against the same layer on the composite: outputs, final states and
// every gradient; and the second derivative of a gradient norm through the fused layer against
// the composite's.
TEST(LstmCellFused, LayerMatchesTheUnfusedLayerToSecondOrder) {
  for (bool bidirectional : {false, true}) {
    SCOPED_TRACE(bidirectional ? "bidirectional" : "unidirectional");
    Generator ga(21), gb(21), gen(22);  // the same draws: the same parameters
    nn::LSTM fused(3, 4, {.num_layers = 2, .bidirectional = bidirectional, .gen = &ga});
    fused.to(DType::Float64);
    nn::LSTM plain(
        3, 4, {.num_layers = 2, .bidirectional = bidirectional, .fused_gates = false, .gen = &gb});
    plain.to(DType::Float64);
    const Tensor x = randn({5, 2, 3}, DType::Float64, &gen);
    auto run = [&](nn::LSTM& m) {
      const Tensor xi = x.detach().requires_grad_(true);
      const nn::RecurrentOutput o = m.forward(xi, Tensor(), Tensor());
      const Tensor loss = o.output.square().sum() + o.c_n.sum();
      std::vector<Tensor> wrt = m.parameters();
      wrt.push_back(xi);
      const std::vector<Tensor> g = autograd::grad({loss}, wrt, {}, true, true);
      Tensor norm = zeros({}, DType::Float64);
      for (const Tensor& t : g) norm = norm + t.square().sum();
      const Tensor gx = autograd::grad({norm}, {xi})[0];  // d |dL/dθ|² / dx
      std::vector<Tensor> out = {o.output, o.h_n, o.c_n, gx};
      for (const Tensor& t : g) out.push_back(t);
      return out;
    };
    const std::vector<Tensor> a = run(fused), b = run(plain);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(max_rel(a[i], b[i], 1e-3), 1e-12) << i;
  }
}

TEST(LstmCellFused, ErrorsNameTheOpAndShapes) {
  const Tensor g = zeros({2, 8}), c = zeros({2, 2});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad_width = message([&] { lstm_cell_fused(zeros({2, 7}), c); });
  EXPECT_NE(bad_width.find("lstm_cell_fused"), std::string::npos) << bad_width;
  EXPECT_NE(bad_width.find("[2, 7]"), std::string::npos) << bad_width;
  const std::string bad_rows = message([&] { lstm_cell_fused(g, zeros({3, 2})); });
  EXPECT_NE(bad_rows.find("[3, 2]"), std::string::npos) << bad_rows;
  const std::string ints = message([&] { lstm_cell_fused(g, zeros({2, 2}, DType::Int64)); });
  EXPECT_NE(ints.find("floating"), std::string::npos) << ints;
  const std::string grad = message([&] { lstm_cell_fused_backward(zeros({2, 3}), {}, g, c); });
  EXPECT_NE(grad.find("lstm_cell_fused_backward"), std::string::npos) << grad;
}

}  // namespace
}  // namespace adjoint
