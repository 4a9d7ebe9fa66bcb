// gradcheck samples for the fused LSTM cell (src/ops/rnn_cell.cpp): lstm_cell_fused (h' and c'
// together) and its gradient op lstm_cell_fused_backward, whose own VJP and JVP are what double
// backward and forward-over-reverse of the cell run. Odd hidden sizes, batch 1, one hidden
// unit, leading dims, an unbatched row, non-contiguous views, a constant state and an empty
// batch. Gate pre-activations are N(0, 1), where every nonlinearity has curvature.
#include "adjoint/rnn_ops.h"
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

Tensor both(const LSTMCellOutput& s) { return cat({s.h.reshape({-1}), s.c.reshape({-1})}); }

}  // namespace

ADJOINT_REGISTER_SAMPLES(rnn_cell) {
  auto cell = [](const Inputs& x) { return both(lstm_cell_fused(x[0], x[1])); };
  sink.add("rnn_cell/lstm_cell_fused/2d", cell, {randn64({3, 12}), randn64({3, 3})});
  sink.add("rnn_cell/lstm_cell_fused/batch1_hidden1", cell, {randn64({1, 4}), randn64({1, 1})});
  sink.add("rnn_cell/lstm_cell_fused/unbatched", cell, {randn64({8}), randn64({2})});
  sink.add("rnn_cell/lstm_cell_fused/leading_dims", cell, {randn64({2, 3, 8}), randn64({2, 3, 2})});
  sink.add("rnn_cell/lstm_cell_fused/noncontiguous", cell,
           {randn64({12, 2}).t(), randn64({3, 2}).t()});
  sink.add("rnn_cell/lstm_cell_fused/constant_state", cell,
           {randn64({2, 20}), constant(randn64({2, 5}))});
  sink.add("rnn_cell/lstm_cell_fused/empty_batch", cell, {randn64({0, 8}), randn64({0, 2})});
  sink.add("rnn_cell/lstm_cell_fused/h_only",
           [](const Inputs& x) { return lstm_cell_fused(x[0], x[1]).h; },
           {randn64({2, 12}), randn64({2, 3})});

  auto backward = [](const Inputs& x) {
    return both(lstm_cell_fused_backward(x[0], x[1], x[2], x[3]));
  };
  sink.add("rnn_cell/lstm_cell_fused_backward/2d", backward,
           {randn64({3, 3}), randn64({3, 3}), randn64({3, 12}), randn64({3, 3})});
  sink.add("rnn_cell/lstm_cell_fused_backward/leading_dims", backward,
           {randn64({2, 1, 2}), randn64({2, 1, 2}), randn64({2, 1, 8}), randn64({2, 1, 2})});
  sink.add("rnn_cell/lstm_cell_fused_backward/noncontiguous", backward,
           {randn64({2, 3}).t(), randn64({3, 2}), randn64({8, 3}).t(), randn64({2, 3}).t()});
  sink.add("rnn_cell/lstm_cell_fused_backward/grad_c_undefined",
           [](const Inputs& x) { return both(lstm_cell_fused_backward(x[0], {}, x[1], x[2])); },
           {randn64({2, 3}), randn64({2, 12}), randn64({2, 3})});
}
