// The recurrent cells: PyTorch's parameter names, shapes and initialisation bounds; one step
// against the gate equations written gate by gate from basic ops (rnn_oracle.h); gradients of
// inputs, states and every parameter against finite differences in float64; unbatched inputs;
// and errors that name the cell, the shapes and the dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "adjoint/adjoint.h"
#include "adjoint/gradcheck.h"
#include "adjoint/nn.h"
#include "nn/rnn_oracle.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
namespace rnn = adjoint::testing::rnn;

namespace {

constexpr int64_t kIn = 3, kHidden = 4, kBatch = 2;

Tensor randn64(const Shape& shape, Generator& gen) { return randn(shape, DType::Float64, &gen); }

// Names, order and shapes of a cell's parameters, and every value inside U(-1/sqrt(H), 1/sqrt(H))
// with the largest near the bound.
void expect_pytorch_parameters(const nn::RNNCellBase& cell, int64_t gates, bool bias) {
  const auto params = cell.named_parameters();
  ASSERT_EQ(params.size(), bias ? 4u : 2u);
  EXPECT_EQ(params[0].first, "weight_ih");
  EXPECT_EQ(params[1].first, "weight_hh");
  EXPECT_EQ(cell.weight_ih.shape(), (Shape{gates * kHidden, kIn}));
  EXPECT_EQ(cell.weight_hh.shape(), (Shape{gates * kHidden, kHidden}));
  if (bias) {
    EXPECT_EQ(params[2].first, "bias_ih");
    EXPECT_EQ(params[3].first, "bias_hh");
    EXPECT_EQ(cell.bias_ih.shape(), (Shape{gates * kHidden}));
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(kHidden));
  double top = 0;
  for (const auto& [name, p] : params)
    for (double v : rnn::values(p)) {
      EXPECT_LE(std::abs(v), bound) << name;
      top = std::max(top, std::abs(v));
    }
  EXPECT_GT(top, 0.8 * bound);
}

// The cell's parameters replaced by the given leaves, so gradcheck can perturb them.
void use_parameters(nn::RNNCellBase& cell, const std::vector<Tensor>& p) {
  cell.weight_ih = p[0];
  cell.weight_hh = p[1];
  cell.bias_ih = p[2];
  cell.bias_hh = p[3];
}

std::vector<Tensor> parameter_leaves(const nn::RNNCellBase& cell) {
  std::vector<Tensor> out;
  for (const Tensor& p : {cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh})
    out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

}  // namespace

TEST(RNNCell, TanhAndReluMatchTheEquations) {
  for (auto act : {nn::RNNNonlinearity::Tanh, nn::RNNNonlinearity::ReLU}) {
    Generator gen(1);
    nn::RNNCell cell(kIn, kHidden, true, act, &gen);
    expect_pytorch_parameters(cell, 1, true);
    cell.to(DType::Float64);
    const Tensor x = randn64({kBatch, kIn}, gen), h = randn64({kBatch, kHidden}, gen);
    const bool relu = act == nn::RNNNonlinearity::ReLU;
    rnn::expect_close(cell.forward(x, h), rnn::rnn_step(rnn::weights_of(cell), x, h, kHidden, relu),
                      1e-12, "h'");
    // No state means h = 0.
    rnn::expect_close(cell(x),
                      rnn::rnn_step(rnn::weights_of(cell), x,
                                    zeros({kBatch, kHidden}, DType::Float64), kHidden, relu),
                      1e-12, "h' from zeros");
  }
}

TEST(LSTMCell, MatchesTheGateEquationsInPyTorchOrder) {
  Generator gen(2);
  nn::LSTMCell cell(kIn, kHidden, true, &gen);
  expect_pytorch_parameters(cell, 4, true);
  cell.to(DType::Float64);
  const Tensor x = randn64({kBatch, kIn}, gen), h = randn64({kBatch, kHidden}, gen),
               c = randn64({kBatch, kHidden}, gen);
  const nn::LSTMState got = cell.forward(x, {h, c});
  const nn::LSTMState want = rnn::lstm_step(rnn::weights_of(cell), x, h, c, kHidden);
  rnn::expect_close(got.h, want.h, 1e-12, "h'");
  rnn::expect_close(got.c, want.c, 1e-12, "c'");
  const Tensor z = zeros({kBatch, kHidden}, DType::Float64);
  rnn::expect_close(cell(x), rnn::lstm_step(rnn::weights_of(cell), x, z, z, kHidden).h, 1e-12,
                    "h' from zeros");
}

TEST(GRUCell, MatchesTheGateEquationsWithTheResetInsideN) {
  Generator gen(3);
  nn::GRUCell cell(kIn, kHidden, true, &gen);
  expect_pytorch_parameters(cell, 3, true);
  cell.to(DType::Float64);
  const Tensor x = randn64({kBatch, kIn}, gen), h = randn64({kBatch, kHidden}, gen);
  rnn::expect_close(cell.forward(x, h), rnn::gru_step(rnn::weights_of(cell), x, h, kHidden), 1e-12,
                    "h'");
}

TEST(RecurrentCells, WithoutBiasAndUnbatched) {
  Generator gen(4);
  nn::GRUCell gru(kIn, kHidden, false, &gen);
  expect_pytorch_parameters(gru, 3, false);
  EXPECT_FALSE(gru.bias_ih.defined());
  gru.to(DType::Float64);
  const Tensor x = randn64({kIn}, gen), h = randn64({kHidden}, gen);
  const Tensor got = gru.forward(x, h);
  EXPECT_EQ(got.shape(), (Shape{kHidden}));
  rnn::expect_close(
      got, rnn::gru_step(rnn::weights_of(gru), x.unsqueeze(0), h.unsqueeze(0), kHidden).squeeze(0),
      1e-12, "unbatched h'");

  nn::LSTMCell lstm(kIn, kHidden, true, &gen);
  lstm.to(DType::Float64);
  const Tensor c = randn64({kHidden}, gen);
  const nn::LSTMState s = lstm.forward(x, {h, c});
  const nn::LSTMState want = rnn::lstm_step(rnn::weights_of(lstm), x.unsqueeze(0), h.unsqueeze(0),
                                            c.unsqueeze(0), kHidden);
  rnn::expect_close(s.c, want.c.squeeze(0), 1e-12, "unbatched c'");
}

TEST(RecurrentCells, GradientsMatchFiniteDifferences) {
  Generator gen(5);
  const Tensor x = randn64({kBatch, kIn}, gen).requires_grad_(true);
  const Tensor h = randn64({kBatch, kHidden}, gen).requires_grad_(true);
  const Tensor c = randn64({kBatch, kHidden}, gen).requires_grad_(true);
  auto check = [&](nn::RNNCellBase& cell, auto step) {
    cell.to(DType::Float64);
    std::vector<Tensor> in = parameter_leaves(cell);
    in.insert(in.end(), {x, h, c});
    auto f = [&](const std::vector<Tensor>& v) {
      use_parameters(cell, v);
      return step(v[4], v[5], v[6]);
    };
    const GradcheckResult r = gradcheck(f, in);
    EXPECT_TRUE(r.ok) << cell.type_name() << ": " << r.message;
    const GradcheckResult rr = gradgradcheck(f, in);
    EXPECT_TRUE(rr.ok) << cell.type_name() << " (second order): " << rr.message;
  };
  nn::RNNCell rnn_tanh(kIn, kHidden, true, nn::RNNNonlinearity::Tanh, &gen);
  check(rnn_tanh, [&](const Tensor& xv, const Tensor& hv, const Tensor&) {
    return rnn_tanh.forward(xv, hv);
  });
  nn::LSTMCell lstm(kIn, kHidden, true, &gen);
  // Both states in one output, so both paths are checked.
  check(lstm, [&](const Tensor& xv, const Tensor& hv, const Tensor& cv) {
    const nn::LSTMState s = lstm.forward(xv, {hv, cv});
    return cat({s.h, s.c}, 1);
  });
  nn::GRUCell gru(kIn, kHidden, true, &gen);
  check(gru,
        [&](const Tensor& xv, const Tensor& hv, const Tensor&) { return gru.forward(xv, hv); });
}

TEST(RecurrentCells, ReluCellGradientAwayFromTheKink) {
  Generator gen(6);
  nn::RNNCell cell(kIn, kHidden, true, nn::RNNNonlinearity::ReLU, &gen);
  cell.to(DType::Float64);
  std::vector<Tensor> in = parameter_leaves(cell);
  in.push_back(randn64({kBatch, kIn}, gen).requires_grad_(true));
  in.push_back(randn64({kBatch, kHidden}, gen).requires_grad_(true));
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& v) {
        use_parameters(cell, v);
        return cell.forward(v[4], v[5]);
      },
      in);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(RecurrentCells, ErrorsNameTheCellShapesAndDtypes) {
  nn::LSTMCell lstm(kIn, kHidden);
  expect_error(
      [&] {
        lstm.forward(ones({kBatch, kIn + 1}), nn::LSTMState{});
      },
      ErrorKind::Shape, {"nn.LSTMCell", "input_size 3", "[2, 4]", "float32"});
  expect_error(
      [&] {
        lstm.forward(ones({1, kBatch, kIn}), nn::LSTMState{});
      },
      ErrorKind::Shape, {"nn.LSTMCell", "[1, 2, 3]"});
  expect_error(
      [&] {
        lstm.forward(ones({kBatch, kIn}), {ones({kBatch, kHidden}), Tensor()});
      },
      ErrorKind::Value, {"nn.LSTMCell", "both"});
  expect_error(
      [&] {
        lstm.forward(ones({kBatch, kIn}), {ones({kBatch, kHidden}), ones({kBatch + 1, kHidden})});
      },
      ErrorKind::Shape, {"nn.LSTMCell", "cell state c", "[3, 4]", "[2, 4]"});
  nn::GRUCell gru(kIn, kHidden);
  expect_error(
      [&] {
        gru.forward(ones({kBatch, kIn}, DType::Float64), Tensor());
      },
      ErrorKind::DType, {"nn.GRUCell", "float64", "float32"});
  nn::RNNCell cell(kIn, kHidden);
  expect_error(
      [&] {
        cell.forward(ones({kBatch, kIn}), ones({kHidden}));
      },
      ErrorKind::Shape, {"nn.RNNCell", "hidden state", "[4]", "[2, 4]"});
  expect_error([&] { nn::RNNCell(kIn, 0); }, ErrorKind::Value, {"nn.RNNCell", "hidden_size"});
}
