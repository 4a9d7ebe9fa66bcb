// CharRNN: the byte-level recurrent language model of adjoint-sequence, its sampling, and the
// measurements of the vanishing-gradient story (see char_rnn.h).
#include "char_rnn.h"

#include <algorithm>
#include <cmath>

namespace adjoint::tools {

CharRNN::CharRNN(const CharRNNConfig& config, Generator& gen) : Module("CharRNN"), config_(config) {
  embed = register_module("embed", std::make_shared<nn::Embedding>(256, config.embed, &gen));
  const nn::RecurrentOptions options{.num_layers = config.layers, .batch_first = true, .gen = &gen};
  if (config.cell == CharCell::LSTM) {
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(config.embed, config.hidden, options));
    NoGradGuard no_grad;
    for (int64_t l = 0; l < config.layers; ++l)  // gates i, f, g, o: f is the second block
      rnn->weights(l, 0).bias_hh.narrow(0, config.hidden, config.hidden).add_(config.forget_bias);
  } else {
    rnn = register_module("rnn", std::make_shared<nn::RNN>(config.embed, config.hidden, options));
  }
  head = register_module("head", std::make_shared<nn::Linear>(config.hidden, 256, true, &gen));
}

Tensor CharRNN::forward(const Tensor& tokens) { return (*head)((*rnn)((*embed)(tokens))); }

Tensor CharRNN::loss(const Tensor& inputs, const Tensor& targets) {
  const Tensor logits = forward(inputs);
  return cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1}));
}

std::vector<Tensor> CharRNN::hidden_states(const Tensor& tokens, Tensor& last_logits) {
  const Tensor x = (*embed)(tokens);  // [B, T, E]
  const int64_t batch = x.size(0), steps = x.size(1), hidden = config_.hidden;
  std::vector<Tensor> inputs;
  for (int64_t t = 0; t < steps; ++t) inputs.push_back(x.select(1, t));
  for (int64_t l = 0; l < config_.layers; ++l) {
    const nn::RecurrentWeights& w = rnn->weights(l, 0);
    const int64_t in = l == 0 ? config_.embed : hidden;
    // A cell holding the layer's parameter handles: the same arithmetic, one step at a time.
    std::unique_ptr<nn::RNNCellBase> cell;
    if (config_.cell == CharCell::LSTM)
      cell = std::make_unique<nn::LSTMCell>(in, hidden);
    else
      cell = std::make_unique<nn::RNNCell>(in, hidden);
    cell->weight_ih = w.weight_ih;
    cell->weight_hh = w.weight_hh;
    cell->bias_ih = w.bias_ih;
    cell->bias_hh = w.bias_hh;
    Tensor h = zeros({batch, hidden}, x.dtype()), c = h;
    for (int64_t t = 0; t < steps; ++t) {
      if (config_.cell == CharCell::LSTM) {
        nn::LSTMState s = static_cast<nn::LSTMCell&>(*cell).forward(inputs[t], {h, c});
        h = s.h;
        c = s.c;
      } else {
        h = static_cast<nn::RNNCell&>(*cell).forward(inputs[t], h);
      }
      inputs[t] = h;
    }
  }
  last_logits = (*head)(inputs.back());
  return inputs;
}

std::string CharRNN::generate(const std::string& prompt, int64_t length, double temperature,
                              Generator& gen) {
  InferenceMode inference;
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  std::vector<int64_t> ids(text.begin(), text.end());
  for (int64_t& id : ids) id = static_cast<unsigned char>(id);
  Tensor h, c;                             // the layer's states, carried from call to call
  auto step = [&](const Tensor& tokens) {  // [1, n] -> logits of the last position [256]
    const Tensor x = (*embed)(tokens);
    nn::RecurrentOutput o = config_.cell == CharCell::LSTM
                                ? static_cast<nn::LSTM&>(*rnn).forward(x, h, c)
                                : static_cast<nn::RNN&>(*rnn).forward(x, h);
    h = o.h_n;
    c = o.c_n;
    return (*head)(o.output.select(1, o.output.size(1) - 1)).reshape({-1});
  };
  Tensor logits = step(tensor(ids, Shape{1, static_cast<int64_t>(ids.size())}));
  std::string out;
  for (int64_t n = 0; n < length; ++n) {
    const std::vector<double> z = logits.to(DType::Float64).to_vector<double>();
    const double peak = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (std::size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp((z[i] - peak) / temperature);
    double u = gen.next_double() * sum;
    std::size_t pick = 0;
    while (pick + 1 < p.size() && u >= p[pick]) u -= p[pick++];
    out += static_cast<char>(pick);
    logits = step(tensor(std::vector<int64_t>{static_cast<int64_t>(pick)}, Shape{1, 1}));
  }
  return out;
}

std::vector<double> gradient_norm_by_distance(CharRNN& model, const Tensor& tokens,
                                              const Tensor& next) {
  Tensor logits;
  const std::vector<Tensor> hs = model.hidden_states(tokens, logits);
  const Tensor loss = cross_entropy(logits, next);
  const std::vector<Tensor> grads = autograd::grad({loss}, hs);
  const auto steps = static_cast<int64_t>(hs.size());
  std::vector<double> by_distance(hs.size());
  for (int64_t t = 0; t < steps; ++t) {
    // per sequence ||dL/dh_t||, then the batch mean
    const Tensor norms = sqrt(sum(square(grads[static_cast<std::size_t>(t)]), {1}));
    by_distance[static_cast<std::size_t>(steps - 1 - t)] = mean(norms).item<double>();
  }
  return by_distance;
}

std::size_t saved_bytes_of_layer(CharRNN& model, const Tensor& tokens) {
  Tensor x;
  {
    NoGradGuard no_grad;
    x = (*model.embed)(tokens);
  }
  x.requires_grad_(true);
  SavedMemoryTracker tracker;
  reset_peak_saved_memory_stats();
  Tensor out = (*model.rnn)(x);
  const std::size_t peak = saved_memory_stats().peak_bytes;
  out = Tensor();  // frees the graph
  return peak;
}

}  // namespace adjoint::tools
