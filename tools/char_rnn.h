// The sequence demo's pieces (adjoint-sequence, docs/sequence.md): a byte-level recurrent
// language model (Embedding -> nn::LSTM or a tanh nn::RNN -> Linear), its training step, text
// sampling with the layer's states, and the two measurements of the vanishing-gradient story:
// the norm of dL/dh_t against the distance from the loss, and the bytes saved for backward per
// time step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace adjoint::tools {

enum class CharCell { LSTM, RNN };

struct CharRNNConfig {
  CharCell cell = CharCell::LSTM;
  int64_t embed = 64;
  int64_t hidden = 256;
  int64_t layers = 1;
  /// The LSTM's forget-gate bias at initialisation (added to bias_hh's f block, bias_ih's stays
  /// PyTorch's): 1 starts the cell path at f = sigmoid(1) = 0.73 per step instead of about 0.5
  /// (Gers et al. 2000, Jozefowicz et al. 2015). 0 is PyTorch's default init exactly.
  double forget_bias = 1.0;
};

/// Bytes in, next-byte logits out: Embedding(256, embed), the recurrent layer (batch_first),
/// Linear(hidden, 256). Children "embed", "rnn", "head".
class CharRNN : public nn::Module {
 public:
  CharRNN(const CharRNNConfig& config, Generator& gen);
  /// tokens [B, T] int64 -> logits [B, T, 256].
  Tensor forward(const Tensor& tokens) override;
  /// Mean cross-entropy of forward(inputs) against targets, both [B, T].
  Tensor loss(const Tensor& inputs, const Tensor& targets);

  /// The top layer's h_t for t = 0..T-1 of tokens [B, T], each [B, H], computed by a loop of
  /// cells that share the layer's parameters (so every h_t is a tensor one can differentiate
  /// with respect to), and the logits of the last step [B, 256].
  std::vector<Tensor> hidden_states(const Tensor& tokens, Tensor& last_logits);

  /// Continues `prompt` by `length` bytes, one step at a time through the layer's states,
  /// sampling from softmax(logits / temperature) with `gen`.
  std::string generate(const std::string& prompt, int64_t length, double temperature,
                       Generator& gen);

  const CharRNNConfig& config() const { return config_; }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::RecurrentLayer> rnn;
  std::shared_ptr<nn::Linear> head;

 private:
  CharRNNConfig config_;
};

/// ||dL/dh_t||, averaged over the batch, for distance d = T-1-t = 0..T-1 from the loss, where L
/// is the cross-entropy of the byte after tokens [B, T] (`next` [B]) predicted from the last
/// step alone: how much of the loss's gradient reaches d steps back.
std::vector<double> gradient_norm_by_distance(CharRNN& model, const Tensor& tokens,
                                              const Tensor& next);

/// Peak bytes saved for backward by the recurrent layer alone over tokens [B, T] (its input,
/// the embedding, taken as a leaf that requires grad), counted with a SavedMemoryTracker.
std::size_t saved_bytes_of_layer(CharRNN& model, const Tensor& tokens);

}  // namespace adjoint::tools
