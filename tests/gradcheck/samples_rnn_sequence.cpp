// gradcheck samples for the whole-sequence LSTM op (src/ops/rnn_sequence.cpp): forward and
// reverse, odd sizes, one step, batch 1 and one hidden unit, an empty batch, non-contiguous
// views, constant initial states or weight, and h alone. The gradcheck's double backward and
// forward-over-reverse run the op's rules, which are ops (Note [LSTM sequence rules]).
#include "adjoint/rnn_ops.h"
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

Tensor both(const LSTMSequenceOutput& s) { return cat({s.h.reshape({-1}), s.c.reshape({-1})}); }

// A leaf of half the scale: smaller recurrent weights keep the gates off saturation.
Tensor half(const Tensor& x) { return (x.detach() * 0.5).requires_grad_(true); }

// xp [T, B, 4H], w_hh [4H, H], h0 and c0 [B, H].
Inputs sizes(int64_t steps, int64_t batch, int64_t hidden) {
  return {randn64({steps, batch, 4 * hidden}), half(randn64({4 * hidden, hidden})),
          randn64({batch, hidden}), randn64({batch, hidden})};
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(rnn_sequence) {
  auto forward = [](const Inputs& x) { return both(lstm_sequence(x[0], x[1], x[2], x[3])); };
  auto reverse = [](const Inputs& x) { return both(lstm_sequence(x[0], x[1], x[2], x[3], true)); };
  sink.add("rnn_sequence/lstm_sequence/3_steps", forward, sizes(3, 2, 3));
  sink.add("rnn_sequence/lstm_sequence/reverse", reverse, sizes(3, 2, 3));
  sink.add("rnn_sequence/lstm_sequence/one_step", forward, sizes(1, 2, 2));
  sink.add("rnn_sequence/lstm_sequence/batch1_hidden1", forward, sizes(4, 1, 1));
  sink.add("rnn_sequence/lstm_sequence/empty_batch", forward, sizes(2, 0, 2));
  sink.add("rnn_sequence/lstm_sequence/noncontiguous", forward,
           {randn64({3, 2, 8}).transpose(0, 1), randn64({2, 8}).t(), randn64({2, 3}).t(),
            randn64({3, 2})});
  Inputs constant_state = sizes(3, 2, 2);
  constant_state[2] = constant(constant_state[2]);
  constant_state[3] = constant(constant_state[3]);
  sink.add("rnn_sequence/lstm_sequence/constant_state", reverse, constant_state);
  Inputs constant_weight = sizes(3, 2, 2);
  constant_weight[1] = constant(constant_weight[1]);
  sink.add("rnn_sequence/lstm_sequence/constant_weight", forward, constant_weight);
  sink.add(
      "rnn_sequence/lstm_sequence/h_only",
      [](const Inputs& x) { return lstm_sequence(x[0], x[1], x[2], x[3]).h; }, sizes(3, 2, 3));
}
