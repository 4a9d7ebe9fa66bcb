// The fused LSTM cell: one step's gate arithmetic (three sigmoids, a tanh, the state update and
// the output gate) as one op on one kernel, and its gradient as a second op. nn::LSTM uses it
// unless RecurrentOptions::fused_gates is off (docs/sequence.md, "Speed"); the composite of ops
// in nn::detail::lstm_gates (src/nn/rnn_gates.h) computes the same and is the tests' oracle.
// Both ops are differentiable to any order, have JVPs, batch under vmap and trace under compile.
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

}  // namespace adjoint
