// nn::RNN, nn::LSTM and nn::GRU: multi-layer, optionally bidirectional recurrent networks over
// whole sequences, as torch.nn.RNN/LSTM/GRU (parameter names, shapes, gate order, dropout between
// layers, initial and final states). One step is the arithmetic of the cells in rnn_cell.h;
// docs/sequence.md is the guide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/nn/module.h"
#include "adjoint/nn/rnn_cell.h"

namespace adjoint::nn {

/// The constructor arguments that follow input_size and hidden_size, as PyTorch's, e.g.
///   nn::LSTM lstm(32, 64, {.num_layers = 2, .batch_first = true, .bidirectional = true});
struct RecurrentOptions {
  int64_t num_layers = 1;
  bool bias = true;
  /// Inputs and outputs as [B, T, features] instead of [T, B, features] (states stay
  /// [layers * directions, B, H], as PyTorch's).
  bool batch_first = false;
  /// Dropout probability on the outputs of every layer but the last, in training mode only.
  double dropout = 0;
  bool bidirectional = false;
  /// nn::RNN only: tanh or relu.
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;
  /// nn::LSTM only: each direction's whole loop of steps on the fused op lstm_sequence
  /// (adjoint/rnn_ops.h) instead of a loop of ops per step (the same values within rounding;
  /// faster: see docs/sequence.md, "Speed").
  bool fused_gates = true;
  /// Draws the initial weights and seeds the dropout generator (the default generator when null).
  Generator* gen = nullptr;
};

/// What a layer returns. D = 2 when bidirectional, else 1; L = num_layers.
struct RecurrentOutput {
  Tensor output;  ///< the last layer's h at every step: [T, B, D * H] ([B, T, D * H] batch_first;
                  ///< [T, D * H] unbatched); the two directions concatenated, forward first
  Tensor h_n;     ///< the final h of every layer and direction: [L * D, B, H] ([L * D, H]
                  ///< unbatched), ordered layer 0 forward, layer 0 reverse, layer 1 forward, ...
  Tensor c_n;     ///< LSTM only: the final cell states, shaped as h_n
};

/// One layer's and direction's parameters (see RecurrentLayer).
struct RecurrentWeights {
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

/// What the three layers share (PyTorch's RNNBase). Parameters, for layer k and a suffix that is
/// "" for the forward direction and "_reverse" for the reverse one: "weight_ih_l{k}{suffix}"
/// [gates * H, I] (I = input_size for layer 0, D * H above it), "weight_hh_l{k}{suffix}"
/// [gates * H, H], "bias_ih_l{k}{suffix}" and "bias_hh_l{k}{suffix}" [gates * H], registered in
/// that order, layer by layer, forward before reverse, each drawn from U(-1/sqrt(H), 1/sqrt(H)).
///
/// forward(x) runs the sequence from zero states and returns the output alone; each layer's
/// forward(x, state...) also takes initial states ([L * D, B, H], undefined: zeros) and returns
/// the final ones. Every direction projects its whole input sequence with one matrix product,
/// then runs one product on h and the gates per step.
class RecurrentLayer : public Module {
 public:
  /// The output ([T, B, D * H], as RecurrentOutput::output) from zero initial states.
  Tensor forward(const Tensor& x) override;

  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return options_.num_layers; }
  int64_t num_directions() const { return options_.bidirectional ? 2 : 1; }
  const RecurrentOptions& options() const { return options_; }
  /// The parameters of layer `layer`, direction `direction` (0 forward, 1 reverse).
  const RecurrentWeights& weights(int64_t layer, int64_t direction) const;
  /// The generator of the dropout between layers.
  Generator& generator() { return dropout_gen_; }

 protected:
  enum class Kind { RNN, LSTM, GRU };
  RecurrentLayer(const char* type_name, Kind kind, int64_t input_size, int64_t hidden_size,
                 const RecurrentOptions& options);
  /// The whole network over x, from h0 (and c0 for an LSTM); undefined states are zeros.
  RecurrentOutput run(const Tensor& x, const Tensor& h0, const Tensor& c0);
  std::string op_name() const { return "nn." + type_name(); }

 private:
  // x as [T, B, I] (batch_first and unbatched inputs arranged so), checked.
  Tensor sequence_major(const Tensor& x) const;
  // An initial state ([L * D, B, H]) for the sequence-major x: h0 checked, or zeros.
  Tensor initial_state(const Tensor& state, const Tensor& x_seq, bool unbatched,
                       const char* what) const;
  // One direction of one layer over the sequence: the h of every step [T, B, H], and the final
  // h and c (c only for an LSTM).
  Tensor run_direction(const RecurrentWeights& w, const Tensor& input, bool reverse, Tensor& h,
                       Tensor& c) const;

  Kind kind_;
  int64_t input_size_, hidden_size_;
  RecurrentOptions options_;
  std::vector<RecurrentWeights> weights_;  // layer-major: [layer * D + direction]
  Generator dropout_gen_;
};

/// An Elman network, h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh) with act tanh or relu
/// (options.nonlinearity), as torch.nn.RNN.
class RNN : public RecurrentLayer {
 public:
  RNN(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options = {});
  using RecurrentLayer::forward;
  /// output and h_n from the initial state h0 ([L * D, B, H]; undefined: zeros).
  RecurrentOutput forward(const Tensor& x, const Tensor& h0);
};

/// A long short-term memory network (LSTMCell's equations at every step), as torch.nn.LSTM.
class LSTM : public RecurrentLayer {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options = {});
  using RecurrentLayer::forward;
  /// output, h_n and c_n from the initial states h0 and c0 ([L * D, B, H] each; both undefined:
  /// zeros).
  RecurrentOutput forward(const Tensor& x, const Tensor& h0, const Tensor& c0);
};

/// A gated recurrent unit network (GRUCell's equations at every step), as torch.nn.GRU.
class GRU : public RecurrentLayer {
 public:
  GRU(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options = {});
  using RecurrentLayer::forward;
  /// output and h_n from the initial state h0 ([L * D, B, H]; undefined: zeros).
  RecurrentOutput forward(const Tensor& x, const Tensor& h0);
};

}  // namespace adjoint::nn
