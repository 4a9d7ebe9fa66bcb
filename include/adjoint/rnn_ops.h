// The fused LSTM cell: one step's gate arithmetic (three sigmoids, a tanh, the state update and
// the output gate) as one op on one kernel, and its gradient as a second op. nn::LSTM uses it
// unless RecurrentOptions::fused_gates is off (docs/sequence.md, "Speed"); the composite of ops
// in nn::detail::lstm_gates (src/nn/rnn_gates.h) computes the same and is the tests' oracle.
// Both ops are differentiable to any order, have JVPs, batch under vmap and trace under compile.
// lstm_sequence runs a whole layer direction (every step's recurrent product and cell) as one op
// on one kernel; nn::LSTM uses it (docs/sequence.md, "Speed").
#pragma once

#include "adjoint/tensor.h"

namespace adjoint {

/// An LSTM step's new state.
struct LSTMCellOutput {
  Tensor h;  ///< h' = o tanh(c'), [*, H]
  Tensor c;  ///< c' = f c + i g, [*, H]
};

/// One LSTM step from the summed gate pre-activations `gates` [*, 4H] (W_ih x + b_ih + W_hh h +
/// b_hh, the blocks i, f, g, o in PyTorch's order along the last dim) and the cell state `c`
/// [*, H] (the same leading dims): i, f, o = sigmoid, g = tanh of their blocks, then c' and h'.
/// Floating inputs (promoted to one dtype); float16 and bfloat16 compute in float32. The
/// results are views of one [2, *, H] tensor (h' then c').
LSTMCellOutput lstm_cell_fused(const Tensor& gates, const Tensor& c);

/// The gradients of lstm_cell_fused for the cotangents `grad_h` and `grad_c` of h' and c'
/// (either undefined: zero): the gates' [*, 4H] and the cell state's [*, H] (in `h` and `c` of
/// the result, as views of one flat tensor). The gates are recomputed from `gates`.
LSTMCellOutput lstm_cell_fused_backward(const Tensor& grad_h, const Tensor& grad_c,
                                        const Tensor& gates, const Tensor& c);

/// Every step of an LSTM layer direction.
struct LSTMSequenceOutput {
  Tensor h;  ///< [T, B, H]: h_t of every step, in time order
  Tensor c;  ///< [T, B, H]: c_t of every step, in time order
};

/// An LSTM layer direction over a whole sequence: for t = 0 .. T-1 (T-1 down to 0 when
/// `reverse`), gates_t = xp[t] + h_prev W_hhᵀ and (h_t, c_t) = lstm_cell_fused(gates_t, c_prev),
/// from (h0, c0) at the first step. `xp` [T, B, 4H] is the input's share of the gate
/// pre-activations with both biases (x W_ihᵀ + b_ih + b_hh, blocks i, f, g, o), `w_hh` [4H, H],
/// `h0` and `c0` [B, H]; floating (promoted to one dtype), T and H at least 1. float16 and
/// bfloat16 compute in float32, and autocast runs it in float32. The results are views of one
/// [2, T, B, H] tensor. Its gradient is a reverse loop of lstm_cell_fused_backward with the
/// weight's gradient as one product over all steps (on one kernel, lstm_sequence_backward, where
/// nothing differentiates it); it differentiates to any order.
LSTMSequenceOutput lstm_sequence(const Tensor& xp, const Tensor& w_hh, const Tensor& h0,
                                 const Tensor& c0, bool reverse = false);

/// The gradients of an LSTM sequence in xp, h0 and c0.
struct LSTMSequenceGrad {
  Tensor xp;  ///< [T, B, 4H]: the gates' pre-activations' gradient, step by step
  Tensor h0;  ///< [B, H]
  Tensor c0;  ///< [B, H]
};

/// lstm_sequence's gradient in (xp, h0, c0) for the cotangents `grad_h` and `grad_c` [T, B, H]
/// of every step's h and c (either undefined: zero), from the forward's gate pre-activations
/// `gates` [T, B, 4H] (xp + h_prev W_hhᵀ of every step), its cell states `c` [T, B, H] (each
/// step's previous state is read from them or c0; the new one is recomputed from the gates, as
/// lstm_cell_fused_backward does), c0 and w_hh, with the forward's `reverse`: backpropagation
/// through time on one kernel. (W_hh's gradient is Σ_t gates' gradient_tᵀ h_prev, one product.)
/// Differentiable in the cotangents only (its VJP is lstm_sequence's forward mode); a derivative in
/// the other inputs is an error.
LSTMSequenceGrad lstm_sequence_backward(const Tensor& grad_h, const Tensor& grad_c,
                                        const Tensor& gates, const Tensor& c, const Tensor& c0,
                                        const Tensor& w_hh, bool reverse = false);

}  // namespace adjoint
