// nn::RNNCell, nn::LSTMCell and nn::GRUCell: one time step of a recurrent network, with
// PyTorch's parameter names, layouts, gate order and default initialisation. The layers that run
// whole sequences (nn::RNN, nn::LSTM, nn::GRU) are in rnn.h; docs/sequence.md is the guide.
#pragma once

#include <cstdint>
#include <string>

#include "adjoint/generator.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// The activation of a plain (Elman) recurrent network: h' = act(W_ih x + b_ih + W_hh h + b_hh).
enum class RNNNonlinearity { Tanh, ReLU };

/// An LSTM's two states: the hidden state h and the cell state c, each [B, H] (or [H]).
struct LSTMState {
  Tensor h;
  Tensor c;
};

/// What the three cells share (PyTorch's RNNCellBase): parameters "weight_ih" [gates * H, I],
/// "weight_hh" [gates * H, H], "bias_ih" and "bias_hh" [gates * H] (no biases with bias =
/// false), each drawn from U(-1/sqrt(H), 1/sqrt(H)) in that order from `gen` (the default
/// generator when null). gates is 1 (RNNCell), 4 (LSTMCell: i, f, g, o) or 3 (GRUCell: r, z, n).
class RNNCellBase : public Module {
 public:
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }

  Tensor weight_ih;  ///< [gates * hidden, input]
  Tensor weight_hh;  ///< [gates * hidden, hidden]
  Tensor bias_ih;    ///< [gates * hidden], undefined without bias
  Tensor bias_hh;    ///< [gates * hidden], undefined without bias

 protected:
  RNNCellBase(const char* type_name, int64_t input_size, int64_t hidden_size, bool bias,
              int64_t gates, Generator* gen);
  /// Checks x ([B, I] or unbatched [I]) and, when defined, a state `h` ([B, H] or [H], `what`
  /// names it in the message) against the sizes and the parameters' dtype, naming the module.
  void check_input(const Tensor& x) const;
  void check_state(const Tensor& x, const Tensor& h, const char* what) const;
  /// Zeros of the state's shape for x ([B, H], or [H] when x is unbatched).
  Tensor zero_state(const Tensor& x) const;
  std::string op_name() const { return "nn." + type_name(); }

 private:
  int64_t input_size_, hidden_size_;
};

/// h' = act(W_ih x + b_ih + W_hh h + b_hh), act tanh or relu, as torch.nn.RNNCell.
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh, Generator* gen = nullptr);
  /// One step from h = 0.
  Tensor forward(const Tensor& x) override;
  /// One step from h (undefined: zeros). x [B, I] and h [B, H], or unbatched [I] and [H].
  Tensor forward(const Tensor& x, const Tensor& h);

  RNNNonlinearity nonlinearity() const { return nonlinearity_; }

 private:
  RNNNonlinearity nonlinearity_;
};

/// As torch.nn.LSTMCell, with the gates in PyTorch's order i, f, g, o:
///   i = σ(W_ii x + b_ii + W_hi h + b_hi)   f = σ(W_if x + b_if + W_hf h + b_hf)
///   g = tanh(W_ig x + b_ig + W_hg h + b_hg) o = σ(W_io x + b_io + W_ho h + b_ho)
///   c' = f * c + i * g                       h' = o * tanh(c')
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, Generator* gen = nullptr);
  /// h' of one step from h = c = 0 (the single-tensor forward that Module::operator() calls;
  /// use forward(x, state) for c' too).
  Tensor forward(const Tensor& x) override;
  /// One step: (h', c') from the state (undefined h and c: zeros; both or neither).
  LSTMState forward(const Tensor& x, const LSTMState& state);
};

/// As torch.nn.GRUCell, with the gates in PyTorch's order r, z, n:
///   r = σ(W_ir x + b_ir + W_hr h + b_hr)   z = σ(W_iz x + b_iz + W_hz h + b_hz)
///   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
///   h' = (1 - z) * n + z * h
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true, Generator* gen = nullptr);
  /// One step from h = 0.
  Tensor forward(const Tensor& x) override;
  /// One step from h (undefined: zeros).
  Tensor forward(const Tensor& x, const Tensor& h);
};

}  // namespace adjoint::nn
