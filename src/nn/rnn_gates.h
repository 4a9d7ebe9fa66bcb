// The gate arithmetic of one recurrent step, from the two pre-activations gi = W_ih x + b_ih and
// gh = W_hh h + b_hh, written with ops (so every transform and higher derivative goes through).
// The cells (rnn_cell.cpp) compute gi per call; the layers (rnn.cpp) compute it for a whole
// sequence in one product and hand these functions one step of it.
#pragma once

#include <vector>

#include "adjoint/nn/rnn_cell.h"
#include "adjoint/ops.h"
#include "adjoint/rnn_ops.h"

namespace adjoint::nn::detail {

/// h' = act(gi + gh).
inline Tensor rnn_gates(const Tensor& gi, const Tensor& gh, RNNNonlinearity act) {
  const Tensor pre = gi + gh;
  return act == RNNNonlinearity::Tanh ? tanh(pre) : relu(pre);
}

/// (h', c') from the four gates i, f, g, o stacked along the last dim of gi + gh.
inline LSTMState lstm_gates(const Tensor& gi, const Tensor& gh, const Tensor& c) {
  const std::vector<Tensor> g = chunk(gi + gh, 4, -1);
  const Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), cand = tanh(g[2]), o = sigmoid(g[3]);
  Tensor c_next = f * c + i * cand;
  Tensor h_next = o * tanh(c_next);
  return {std::move(h_next), std::move(c_next)};
}

/// What lstm_gates computes, on the fused op (adjoint/rnn_ops.h): one kernel forward and one
/// backward instead of about ten ops each way.
inline LSTMState lstm_gates_fused(const Tensor& gi, const Tensor& gh, const Tensor& c) {
  LSTMCellOutput s = lstm_cell_fused(gi + gh, c);
  return {std::move(s.h), std::move(s.c)};
}

/// h' from the gates r, z, n of gi and gh, kept apart because n adds r * (W_hn h + b_hn).
inline Tensor gru_gates(const Tensor& gi, const Tensor& gh, const Tensor& h) {
  const std::vector<Tensor> a = chunk(gi, 3, -1), b = chunk(gh, 3, -1);
  const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
  const Tensor n = tanh(a[2] + r * b[2]);
  // (1 - z) * n + z * h, with one product fewer
  return n + z * (h - n);
}

}  // namespace adjoint::nn::detail
