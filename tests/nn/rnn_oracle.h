// The recurrent tests' independent oracle: PyTorch's gate equations written gate by gate from
// basic ops (matmul with each gate's rows of the weights, exp-based sigmoid and tanh), so that
// they share nothing with src/nn/rnn_gates.h (which chunks one fused product and calls the
// sigmoid and tanh ops); and comparison helpers.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace adjoint::testing::rnn {

inline std::vector<double> values(const Tensor& t) {
  return t.contiguous().to(DType::Float64).to_vector<double>();
}

inline void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = values(got), w = values(want);
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol) << what << " at " << i;
}

inline Tensor sig(const Tensor& x) { return 1.0 / (1.0 + exp(-x)); }
inline Tensor th(const Tensor& x) { return 2.0 * sig(2.0 * x) - 1.0; }

// Gate k's rows of a stacked weight [gates * H, ...] or bias [gates * H].
inline Tensor rows(const Tensor& w, int64_t k, int64_t hidden) {
  return w.defined() ? w.narrow(0, k * hidden, hidden) : Tensor();
}

// W_k x + b_k for gate k: x [B, in] times the gate's rows transposed.
inline Tensor affine(const Tensor& x, const Tensor& w, const Tensor& b, int64_t k, int64_t hidden) {
  Tensor y = matmul(x, rows(w, k, hidden).transpose(0, 1));
  return b.defined() ? y + rows(b, k, hidden) : y;
}

struct Weights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

inline Weights weights_of(const nn::RNNCellBase& cell) {
  return {cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh};
}

// Gate k's pre-activation from both inputs: W_ik x + b_ik + W_hk h + b_hk.
inline Tensor pre(const Weights& w, const Tensor& x, const Tensor& h, int64_t k, int64_t hidden) {
  return affine(x, w.w_ih, w.b_ih, k, hidden) + affine(h, w.w_hh, w.b_hh, k, hidden);
}

inline Tensor rnn_step(const Weights& w, const Tensor& x, const Tensor& h, int64_t hidden,
                       bool relu) {
  const Tensor a = pre(w, x, h, 0, hidden);
  return relu ? where(gt(a, 0.0), a, 0.0) : th(a);
}

// PyTorch's LSTM, gates i, f, g, o.
inline nn::LSTMState lstm_step(const Weights& w, const Tensor& x, const Tensor& h, const Tensor& c,
                               int64_t hidden) {
  const Tensor i = sig(pre(w, x, h, 0, hidden));
  const Tensor f = sig(pre(w, x, h, 1, hidden));
  const Tensor g = th(pre(w, x, h, 2, hidden));
  const Tensor o = sig(pre(w, x, h, 3, hidden));
  const Tensor c_next = f * c + i * g;
  return {o * th(c_next), c_next};
}

// PyTorch's GRU, gates r, z, n, with n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
inline Tensor gru_step(const Weights& w, const Tensor& x, const Tensor& h, int64_t hidden) {
  const Tensor r = sig(pre(w, x, h, 0, hidden));
  const Tensor z = sig(pre(w, x, h, 1, hidden));
  const Tensor n =
      th(affine(x, w.w_ih, w.b_ih, 2, hidden) + r * affine(h, w.w_hh, w.b_hh, 2, hidden));
  return (1.0 - z) * n + z * h;
}

}  // namespace adjoint::testing::rnn
