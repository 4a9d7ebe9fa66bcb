// gradcheck samples for the whole-sequence LSTM op (src/ops/rnn_sequence.cpp): forward and
// reverse, odd sizes, one step, batch 1 and one hidden unit, an empty batch, non-contiguous
// views, constant initial states or weight, and h alone. The gradcheck's double backward and
// forward-over-reverse run the op's rules, which are ops (Note [LSTM sequence rules]). And the
// fused gradient, lstm_sequence_backward, in its cotangents, the only inputs it differentiates
// in (Note [The fused LSTM sequence gradient]).
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

Tensor flat(const LSTMSequenceGrad& g) {
  return cat({g.xp.reshape({-1}), g.h0.reshape({-1}), g.c0.reshape({-1})});
}

// grad_h, grad_c [T, B, H] (checked); gates [T, B, 4H], c [T, B, H], c0 [B, H] and w_hh [4H, H]
// held fixed: any values are a point of the linear map.
Inputs backward_sizes(int64_t steps, int64_t batch, int64_t hidden) {
  return {randn64({steps, batch, hidden}),
          randn64({steps, batch, hidden}),
          constant(randn64({steps, batch, 4 * hidden})),
          constant(randn64({steps, batch, hidden})),
          constant(randn64({batch, hidden})),
          constant(half(randn64({4 * hidden, hidden})))};
}

void register_backward(SampleSink& sink) {
  auto run = [](bool reverse) {
    return [reverse](const Inputs& x) {
      return flat(lstm_sequence_backward(x[0], x[1], x[2], x[3], x[4], x[5], reverse));
    };
  };
  const std::string op = "rnn_sequence/lstm_sequence_backward/";
  sink.add(op + "3_steps", run(false), backward_sizes(3, 2, 3));
  sink.add(op + "reverse", run(true), backward_sizes(3, 2, 3));
  sink.add(op + "batch1_hidden1", run(false), backward_sizes(4, 1, 1));
  sink.add(op + "empty_batch", run(false), backward_sizes(2, 0, 2));
  Inputs strided = backward_sizes(3, 2, 3);
  strided[0] = randn64({2, 3, 3}).transpose(0, 1);
  strided[2] = constant(randn64({3, 12, 2}).transpose(1, 2));
  sink.add(op + "noncontiguous", run(false), strided);
  sink.add(op + "h_only",
           [](const Inputs& x) {
             return flat(lstm_sequence_backward(x[0], Tensor(), x[1], x[2], x[3], x[4]));
           },
           {randn64({3, 2, 3}), constant(randn64({3, 2, 12})), constant(randn64({3, 2, 3})),
            constant(randn64({2, 3})), constant(half(randn64({12, 3})))});
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
  register_backward(sink);
}
