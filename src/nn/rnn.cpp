// nn::RNN, nn::LSTM and nn::GRU: PyTorch's parameters, the shape checks (naming the module), and
// the sequence loop: per layer and direction one product for the input projection of all steps,
// then per step one product on h and the gate arithmetic of rnn_gates.h; an LSTM with fused gates
// runs each direction's steps on the one op lstm_sequence (adjoint/rnn_ops.h) instead.
#include "adjoint/nn/rnn.h"

#include <cmath>
#include <utility>

#include "adjoint/error.h"
#include "adjoint/nn/init.h"
#include "adjoint/ops.h"
#include "adjoint/rnn_ops.h"
#include "nn/rnn_gates.h"

namespace adjoint::nn {

namespace {

// Note [Unbinding the steps]
// A step reads its slice of the input projection xp [T, B, G]. Taking the T slices with select
// would be right but slow in backward: each select's VJP scatters its step's gradient into zeros
// of xp's whole shape, and the T results are summed, O(T^2 * B * G) work and memory traffic,
// which for T = 64 costs more than the products. Halving instead (narrow to the two halves, then
// recurse) makes every level of the tree scatter into its parent's size only, so backward costs
// O(T log T): about 2 log2(T) copies of xp. docs/sequence.md has the measurement.
void unbind_into(const Tensor& x, int64_t start, int64_t length, std::vector<Tensor>& out) {
  if (length <= 2) {
    for (int64_t t = 0; t < length; ++t) out[static_cast<std::size_t>(start + t)] = x.select(0, t);
    return;
  }
  const int64_t half = length / 2;
  unbind_into(x.narrow(0, 0, half), start, half, out);
  unbind_into(x.narrow(0, half, length - half), start + half, length - half, out);
}

// The steps of x [T, ...] as T tensors [...] (Note [Unbinding the steps]).
std::vector<Tensor> unbind_steps(const Tensor& x) {
  std::vector<Tensor> out(static_cast<std::size_t>(x.size(0)));
  unbind_into(x, 0, x.size(0), out);
  return out;
}

}  // namespace

RecurrentLayer::RecurrentLayer(const char* type_name, Kind kind, int64_t input_size,
                               int64_t hidden_size, const RecurrentOptions& options)
    : Module(type_name),
      kind_(kind),
      input_size_(input_size),
      hidden_size_(hidden_size),
      options_(options) {
  const std::string op = op_name();
  ADJOINT_CHECK(input_size >= 0 && hidden_size > 0, Value, op,
                "input_size must be non-negative and hidden_size positive, got input_size ",
                input_size, ", hidden_size ", hidden_size);
  ADJOINT_CHECK(options.num_layers > 0, Value, op, "num_layers must be positive, got ",
                options.num_layers);
  ADJOINT_CHECK(options.dropout >= 0 && options.dropout <= 1, Value, op,
                "dropout must be in [0, 1], got ", options.dropout);
  ADJOINT_CHECK(kind == Kind::RNN || options.nonlinearity == RNNNonlinearity::Tanh, Value, op,
                "nonlinearity applies to nn.RNN only");
  options_.gen = nullptr;  // not kept: it may not outlive the module
  const int64_t gates = kind == Kind::LSTM ? 4 : kind == Kind::GRU ? 3 : 1;
  const int64_t dirs = num_directions();
  Generator& g = options.gen ? *options.gen : default_generator();
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : dirs * hidden_size;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      RecurrentWeights w;
      w.weight_ih = register_parameter("weight_ih" + suffix, empty({gates * hidden_size, in}));
      w.weight_hh =
          register_parameter("weight_hh" + suffix, empty({gates * hidden_size, hidden_size}));
      if (options.bias) {
        w.bias_ih = register_parameter("bias_ih" + suffix, empty({gates * hidden_size}));
        w.bias_hh = register_parameter("bias_hh" + suffix, empty({gates * hidden_size}));
      }
      // PyTorch's reset_parameters: every parameter from U(-1/sqrt(H), 1/sqrt(H)).
      for (const Tensor& p : {w.weight_ih, w.weight_hh, w.bias_ih, w.bias_hh})
        if (p.defined()) init::uniform_(p, g, -k, k);
      weights_.push_back(std::move(w));
    }
  }
  // As nn::Dropout: seeded by one draw, and only when there is dropout to do.
  if (options.dropout > 0 && options.num_layers > 1) dropout_gen_.manual_seed(g.next_u64());
}

const RecurrentWeights& RecurrentLayer::weights(int64_t layer, int64_t direction) const {
  ADJOINT_CHECK(
      layer >= 0 && layer < num_layers() && direction >= 0 && direction < num_directions(), Index,
      op_name(), "no layer ", layer, " direction ", direction, " in ", num_layers(), " layers of ",
      num_directions(), " directions");
  return weights_[static_cast<std::size_t>(layer * num_directions() + direction)];
}

Tensor RecurrentLayer::forward(const Tensor& x) { return run(x, Tensor(), Tensor()).output; }

Tensor RecurrentLayer::sequence_major(const Tensor& x) const {
  const std::string op = op_name();
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() == 2 || x.dim() == 3, Shape, op, "expected an input ",
                options_.batch_first ? "[batch, seq, input_size]" : "[seq, batch, input_size]",
                " or unbatched [seq, input_size], got ", describe(x));
  ADJOINT_CHECK(x.shape().back() == input_size_, Shape, op, "input has ", x.shape().back(),
                " features, expected input_size ", input_size_, ": ", describe(x));
  const DType dtype = weights_[0].weight_ih.dtype();
  ADJOINT_CHECK(x.dtype() == dtype, DType, op, "input ", describe(x),
                " does not have the parameters' dtype ", to_string(dtype));
  Tensor seq = x.dim() == 2 ? x.unsqueeze(1) : options_.batch_first ? x.transpose(0, 1) : x;
  ADJOINT_CHECK(seq.size(0) > 0, Shape, op, "the sequence is empty: input ", describe(x));
  return seq;
}

Tensor RecurrentLayer::initial_state(const Tensor& state, const Tensor& x_seq, bool unbatched,
                                     const char* what) const {
  const int64_t n = num_layers() * num_directions(), batch = x_seq.size(1);
  if (!state.defined()) return zeros({n, batch, hidden_size_}, x_seq.dtype());
  const Shape want = unbatched ? Shape{n, hidden_size_} : Shape{n, batch, hidden_size_};
  const std::string op = op_name();
  ADJOINT_CHECK(state.shape() == want, Shape, op, "expected ", what, " of shape ", want,
                " (layers * directions, batch, hidden_size), got ", describe(state));
  ADJOINT_CHECK(state.dtype() == x_seq.dtype(), DType, op, what, " ", describe(state),
                " does not have the input's dtype ", to_string(x_seq.dtype()));
  return unbatched ? state.unsqueeze(1) : state;
}

Tensor RecurrentLayer::run_direction(const RecurrentWeights& w, const Tensor& input, bool reverse,
                                     Tensor& h, Tensor& c) const {
  if (kind_ == Kind::LSTM && options_.fused_gates) {
    // The whole direction on one op: both biases go into the input projection.
    const Tensor bias = w.bias_ih.defined() ? w.bias_ih + w.bias_hh : Tensor();
    const LSTMSequenceOutput s =
        lstm_sequence(linear(input, w.weight_ih, bias), w.weight_hh, h, c, reverse);
    const int64_t last = reverse ? 0 : input.size(0) - 1;
    h = s.h.select(0, last);
    c = s.c.select(0, last);
    return s.h;
  }
  // One product for every step's input projection: [T, B, gates * H].
  const std::vector<Tensor> xp = unbind_steps(linear(input, w.weight_ih, w.bias_ih));
  const auto steps = static_cast<int64_t>(xp.size());
  std::vector<Tensor> hs(xp.size());
  for (int64_t i = 0; i < steps; ++i) {
    const auto t = static_cast<std::size_t>(reverse ? steps - 1 - i : i);
    const Tensor gh = linear(h, w.weight_hh, w.bias_hh);
    switch (kind_) {
      case Kind::RNN:
        h = detail::rnn_gates(xp[t], gh, options_.nonlinearity);
        break;
      case Kind::LSTM: {
        LSTMState s = detail::lstm_gates(xp[t], gh, c);
        h = std::move(s.h);
        c = std::move(s.c);
        break;
      }
      case Kind::GRU:
        h = detail::gru_gates(xp[t], gh, h);
        break;
    }
    hs[t] = h;
  }
  return stack(hs, 0);
}

RecurrentOutput RecurrentLayer::run(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  const bool unbatched = x.defined() && x.dim() == 2;
  const Tensor seq = sequence_major(x);
  const Tensor h_init = initial_state(h0, seq, unbatched, "h0");
  const Tensor c_init = kind_ == Kind::LSTM ? initial_state(c0, seq, unbatched, "c0") : Tensor();
  const int64_t dirs = num_directions();
  std::vector<Tensor> h_n, c_n;
  Tensor input = seq;
  for (int64_t layer = 0; layer < num_layers(); ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t index = layer * dirs + d;
      Tensor h = h_init.select(0, index);
      Tensor c = c_init.defined() ? c_init.select(0, index) : Tensor();
      outputs.push_back(run_direction(weights(layer, d), input, d == 1, h, c));
      h_n.push_back(h);
      if (c.defined()) c_n.push_back(c);
    }
    input = dirs == 2 ? cat(outputs, -1) : outputs[0];
    if (is_training() && options_.dropout > 0 && layer + 1 < num_layers())
      input = dropout(input, options_.dropout, true, &dropout_gen_);
  }
  RecurrentOutput out;
  out.output = unbatched ? input.squeeze(1) : options_.batch_first ? input.transpose(0, 1) : input;
  out.h_n = stack(h_n, 0);
  if (unbatched) out.h_n = out.h_n.squeeze(1);
  if (!c_n.empty()) out.c_n = unbatched ? stack(c_n, 0).squeeze(1) : stack(c_n, 0);
  return out;
}

RNN::RNN(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options)
    : RecurrentLayer("RNN", Kind::RNN, input_size, hidden_size, options) {}

RecurrentOutput RNN::forward(const Tensor& x, const Tensor& h0) { return run(x, h0, Tensor()); }

LSTM::LSTM(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options)
    : RecurrentLayer("LSTM", Kind::LSTM, input_size, hidden_size, options) {}

RecurrentOutput LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  ADJOINT_CHECK(h0.defined() == c0.defined(), Value, op_name(),
                "give both initial states h0 and c0, or neither (zeros)");
  return run(x, h0, c0);
}

GRU::GRU(int64_t input_size, int64_t hidden_size, const RecurrentOptions& options)
    : RecurrentLayer("GRU", Kind::GRU, input_size, hidden_size, options) {}

RecurrentOutput GRU::forward(const Tensor& x, const Tensor& h0) { return run(x, h0, Tensor()); }

}  // namespace adjoint::nn
