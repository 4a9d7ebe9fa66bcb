// The recurrent layers against an unrolled loop of their cells written here (one cell per layer
// and direction sharing the layer's parameters, stepped one time step at a time): outputs, final
// states and every gradient, over layers, directions, batch_first, unbatched inputs, initial
// states and dropout between layers; gradients of inputs and states against finite differences
// in float64; PyTorch's parameter names and shapes; errors naming the module, shapes and dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/gradcheck.h"
#include "adjoint/nn.h"
#include "nn/rnn_oracle.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
namespace rnn = adjoint::testing::rnn;

namespace {

enum class Kind { Tanh, Relu, LSTM, GRU };
const char* name_of(Kind k) {
  return k == Kind::Tanh   ? "RNN tanh"
         : k == Kind::Relu ? "RNN relu"
         : k == Kind::LSTM ? "LSTM"
                           : "GRU";
}

std::shared_ptr<nn::RecurrentLayer> make_layer(Kind kind, int64_t in, int64_t hidden,
                                               nn::RecurrentOptions o) {
  if (kind == Kind::Relu) o.nonlinearity = nn::RNNNonlinearity::ReLU;
  if (kind == Kind::LSTM) return std::make_shared<nn::LSTM>(in, hidden, o);
  if (kind == Kind::GRU) return std::make_shared<nn::GRU>(in, hidden, o);
  return std::make_shared<nn::RNN>(in, hidden, o);
}

nn::RecurrentOutput run_layer(Kind kind, nn::RecurrentLayer& layer, const Tensor& x,
                              const Tensor& h0, const Tensor& c0) {
  if (kind == Kind::LSTM) return static_cast<nn::LSTM&>(layer).forward(x, h0, c0);
  if (kind == Kind::GRU) return static_cast<nn::GRU&>(layer).forward(x, h0);
  return static_cast<nn::RNN&>(layer).forward(x, h0);
}

// A cell of `kind` whose parameters are the handles of layer `l`, direction `d`: its gradients
// land in the layer's parameters.
std::shared_ptr<nn::RNNCellBase> cell_of(Kind kind, const nn::RecurrentLayer& layer, int64_t l,
                                         int64_t d) {
  const int64_t in = l == 0 ? layer.input_size() : layer.num_directions() * layer.hidden_size();
  const int64_t hidden = layer.hidden_size();
  std::shared_ptr<nn::RNNCellBase> cell;
  if (kind == Kind::LSTM) {
    cell = std::make_shared<nn::LSTMCell>(in, hidden);
  } else if (kind == Kind::GRU) {
    cell = std::make_shared<nn::GRUCell>(in, hidden);
  } else {
    cell = std::make_shared<nn::RNNCell>(
        in, hidden, true,
        kind == Kind::Relu ? nn::RNNNonlinearity::ReLU : nn::RNNNonlinearity::Tanh);
  }
  const nn::RecurrentWeights& w = layer.weights(l, d);
  cell->weight_ih = w.weight_ih;
  cell->weight_hh = w.weight_hh;
  cell->bias_ih = w.bias_ih;
  cell->bias_hh = w.bias_hh;
  return cell;
}

// The oracle: x sequence-major [T, B, I], states [L * D, B, H] (undefined: zeros); `between`
// maps one layer's output to the next layer's input (dropout).
nn::RecurrentOutput unrolled(Kind kind, const nn::RecurrentLayer& layer, const Tensor& x, Tensor h0,
                             Tensor c0, const std::function<Tensor(const Tensor&)>& between) {
  const int64_t T = x.size(0), B = x.size(1), H = layer.hidden_size();
  const int64_t D = layer.num_directions(), L = layer.num_layers();
  if (!h0.defined()) h0 = zeros({L * D, B, H}, x.dtype());
  if (!c0.defined()) c0 = zeros({L * D, B, H}, x.dtype());
  std::vector<Tensor> h_n, c_n;
  Tensor input = x;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      auto cell = cell_of(kind, layer, l, d);
      Tensor h = h0.select(0, l * D + d), c = c0.select(0, l * D + d);
      std::vector<Tensor> hs(static_cast<std::size_t>(T));
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = d == 1 ? T - 1 - i : i;
        if (kind == Kind::LSTM) {
          nn::LSTMState s = static_cast<nn::LSTMCell&>(*cell).forward(input.select(0, t), {h, c});
          h = s.h;
          c = s.c;
        } else if (kind == Kind::GRU) {
          h = static_cast<nn::GRUCell&>(*cell).forward(input.select(0, t), h);
        } else {
          h = static_cast<nn::RNNCell&>(*cell).forward(input.select(0, t), h);
        }
        hs[static_cast<std::size_t>(t)] = h;
      }
      outs.push_back(stack(hs));
      h_n.push_back(h);
      c_n.push_back(c);
    }
    input = D == 2 ? cat(outs, 2) : outs[0];
    if (l + 1 < L) input = between(input);
  }
  nn::RecurrentOutput out{input, stack(h_n), kind == Kind::LSTM ? stack(c_n) : Tensor()};
  return out;
}

Tensor identity(const Tensor& t) { return t; }

struct Config {
  int64_t layers;
  bool bidirectional, batch_first, initial_states;
};

// Sum of every output against fixed random weights: a scalar whose gradient reaches everything.
Tensor loss_of(const nn::RecurrentOutput& o, Generator& gen) {
  Generator g = gen;  // the same weights for the layer and the oracle
  Tensor loss = (o.output * randn(o.output.shape(), DType::Float64, &g)).sum() +
                (o.h_n * randn(o.h_n.shape(), DType::Float64, &g)).sum();
  if (o.c_n.defined()) loss = loss + (o.c_n * randn(o.c_n.shape(), DType::Float64, &g)).sum();
  return loss;
}

std::vector<Tensor> grads(const nn::Module& m, const Tensor& x) {
  std::vector<Tensor> out{x.grad()};
  for (const Tensor& p : m.parameters()) out.push_back(p.grad());
  return out;
}

}  // namespace

TEST(RecurrentLayers, PyTorchParameterNamesShapesAndInit) {
  Generator gen(1);
  nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true, .gen = &gen});
  const auto params = lstm.named_parameters();
  const std::vector<std::string> names = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  ASSERT_EQ(params.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(params[i].first, names[i]);
  EXPECT_EQ(lstm.get_parameter("weight_ih_l0").shape(), (Shape{16, 3}));
  EXPECT_EQ(lstm.get_parameter("weight_ih_l1_reverse").shape(), (Shape{16, 8}));  // D * H in
  EXPECT_EQ(lstm.get_parameter("weight_hh_l1").shape(), (Shape{16, 4}));
  EXPECT_EQ(lstm.get_parameter("bias_hh_l0_reverse").shape(), (Shape{16}));
  for (const auto& [name, p] : params)
    for (double v : rnn::values(p)) EXPECT_LE(std::abs(v), 0.5) << name;  // 1 / sqrt(4)

  nn::GRU gru(5, 6, {.bias = false});
  EXPECT_EQ(gru.named_parameters().size(), 2u);
  EXPECT_EQ(gru.get_parameter("weight_ih_l0").shape(), (Shape{18, 5}));
  nn::RNN plain(5, 6, {.num_layers = 3});
  EXPECT_EQ(plain.get_parameter("weight_hh_l2").shape(), (Shape{6, 6}));
}

TEST(RecurrentLayers, MatchTheUnrolledLoopOfCellsWithGradients) {
  const Config configs[] = {{1, false, false, false},
                            {2, true, true, true},
                            {3, false, false, true},
                            {2, true, false, false}};
  for (Kind kind : {Kind::Tanh, Kind::Relu, Kind::LSTM, Kind::GRU}) {
    for (const Config& cfg : configs) {
      SCOPED_TRACE(std::string(name_of(kind)) + ", layers " + std::to_string(cfg.layers) +
                   (cfg.bidirectional ? ", bidirectional" : "") +
                   (cfg.batch_first ? ", batch_first" : "") +
                   (cfg.initial_states ? ", initial states" : ""));
      Generator gen(7);
      const int64_t T = 5, B = 3, I = 4, H = 3, D = cfg.bidirectional ? 2 : 1;
      auto layer = make_layer(kind, I, H,
                              {.num_layers = cfg.layers,
                               .batch_first = cfg.batch_first,
                               .bidirectional = cfg.bidirectional,
                               .gen = &gen});
      layer->to(DType::Float64);
      const Tensor x_seq = randn({T, B, I}, DType::Float64, &gen);
      const Tensor x = cfg.batch_first ? x_seq.transpose(0, 1).contiguous() : x_seq;
      Tensor h0, c0;
      if (cfg.initial_states) {
        h0 = randn({cfg.layers * D, B, H}, DType::Float64, &gen);
        if (kind == Kind::LSTM) c0 = randn({cfg.layers * D, B, H}, DType::Float64, &gen);
      }
      const Tensor xl = x.detach().requires_grad_(true);
      const nn::RecurrentOutput got = run_layer(kind, *layer, xl, h0, c0);
      const Tensor xo = x_seq.detach().requires_grad_(true);
      const nn::RecurrentOutput want = unrolled(kind, *layer, xo, h0, c0, identity);
      EXPECT_EQ(got.output.shape(), cfg.batch_first ? (Shape{B, T, D * H}) : (Shape{T, B, D * H}));
      rnn::expect_close(cfg.batch_first ? got.output.transpose(0, 1) : got.output, want.output,
                        1e-12, "output");
      rnn::expect_close(got.h_n, want.h_n, 1e-12, "h_n");
      EXPECT_EQ(got.c_n.defined(), kind == Kind::LSTM);
      if (kind == Kind::LSTM) rnn::expect_close(got.c_n, want.c_n, 1e-12, "c_n");

      // forward(x) alone is the output from zero states
      const Tensor from_zeros =
          cfg.initial_states ? run_layer(kind, *layer, x, Tensor(), Tensor()).output : got.output;
      rnn::expect_close((*layer)(x), from_zeros, 1e-12, "forward(x)");

      // Every gradient: the layer's, then the loop's (into the same parameters).
      nn::RecurrentOutput got_bf = got;
      if (cfg.batch_first) got_bf.output = got.output.transpose(0, 1);
      loss_of(got_bf, gen).backward();
      std::vector<Tensor> g_layer = grads(*layer, xl);
      layer->zero_grad();
      loss_of(want, gen).backward();
      std::vector<Tensor> g_loop = grads(*layer, xo);
      ASSERT_EQ(g_layer.size(), g_loop.size());
      rnn::expect_close(cfg.batch_first ? g_layer[0].transpose(0, 1) : g_layer[0], g_loop[0], 1e-10,
                        "dL/dx");
      for (std::size_t i = 1; i < g_layer.size(); ++i)
        rnn::expect_close(g_layer[i], g_loop[i], 1e-10, "dL/dparameter");
    }
  }
}

TEST(RecurrentLayers, InputAndStateGradientsMatchFiniteDifferences) {
  for (Kind kind : {Kind::Tanh, Kind::LSTM, Kind::GRU}) {
    SCOPED_TRACE(name_of(kind));
    Generator gen(11);
    const int64_t T = 4, B = 2, I = 3, H = 2, L = 2, D = 2;
    auto layer = make_layer(kind, I, H, {.num_layers = L, .bidirectional = true, .gen = &gen});
    layer->to(DType::Float64);
    std::vector<Tensor> in = {randn({T, B, I}, DType::Float64, &gen).requires_grad_(true),
                              randn({L * D, B, H}, DType::Float64, &gen).requires_grad_(true),
                              randn({L * D, B, H}, DType::Float64, &gen).requires_grad_(true)};
    auto f = [&](const std::vector<Tensor>& v) {
      const nn::RecurrentOutput o =
          run_layer(kind, *layer, v[0], v[1], kind == Kind::LSTM ? v[2] : Tensor());
      Tensor all = cat({o.output.reshape({-1}), o.h_n.reshape({-1})});
      return o.c_n.defined() ? cat({all, o.c_n.reshape({-1})}) : all;
    };
    const GradcheckResult r = gradcheck(f, in, {.check_jvp = true});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(RecurrentLayers, ShapesOfBidirectionalMultiLayerBatchFirstAndUnbatched) {
  const int64_t T = 6, B = 2, I = 5, H = 4, L = 3;
  nn::GRU gru(I, H, {.num_layers = L, .batch_first = true, .bidirectional = true});
  const nn::RecurrentOutput o = gru.forward(ones({B, T, I}), Tensor());
  EXPECT_EQ(o.output.shape(), (Shape{B, T, 2 * H}));
  EXPECT_EQ(o.h_n.shape(), (Shape{L * 2, B, H}));
  EXPECT_FALSE(o.c_n.defined());

  nn::LSTM lstm(I, H, {.num_layers = L, .bidirectional = true});
  const nn::RecurrentOutput s = lstm.forward(ones({T, B, I}), Tensor(), Tensor());
  EXPECT_EQ(s.output.shape(), (Shape{T, B, 2 * H}));
  EXPECT_EQ(s.c_n.shape(), (Shape{L * 2, B, H}));
  // The reverse direction's final state is its state after step 0: the output's second half
  // at t = 0, and the forward one's is the first half at t = T - 1.
  const int64_t last = (L - 1) * 2;
  rnn::expect_close(s.h_n.select(0, last + 1), s.output.select(0, 0).narrow(1, H, H), 0,
                    "reverse h_n");
  rnn::expect_close(s.h_n.select(0, last), s.output.select(0, T - 1).narrow(1, 0, H), 0,
                    "forward h_n");

  // Unbatched [T, I]: the batch of one, squeezed, with states [L * D, H].
  const Tensor x = randn({T, I});
  const Tensor h0 = randn({L * 2, H}), c0 = randn({L * 2, H});
  const nn::RecurrentOutput u = lstm.forward(x, h0, c0);
  EXPECT_EQ(u.output.shape(), (Shape{T, 2 * H}));
  EXPECT_EQ(u.h_n.shape(), (Shape{L * 2, H}));
  const nn::RecurrentOutput b = lstm.forward(x.unsqueeze(1), h0.unsqueeze(1), c0.unsqueeze(1));
  rnn::expect_close(u.output, b.output.squeeze(1), 0, "unbatched output");
  rnn::expect_close(u.c_n, b.c_n.squeeze(1), 0, "unbatched c_n");
}

TEST(RecurrentLayers, DropoutBetweenLayersInTrainingOnly) {
  const int64_t T = 4, B = 3, I = 2, H = 5;
  for (Kind kind : {Kind::Tanh, Kind::LSTM, Kind::GRU}) {
    SCOPED_TRACE(name_of(kind));
    Generator gen(3);
    auto layer = make_layer(kind, I, H, {.num_layers = 3, .dropout = 0.4, .gen = &gen});
    layer->to(DType::Float64);
    const Tensor x = randn({T, B, I}, DType::Float64, &gen);
    // Training: the masks the layer draws are the ones dropout draws from a generator in the same
    // state, one after each layer but the last.
    layer->generator().manual_seed(42);
    Generator masks(42);
    const nn::RecurrentOutput got = run_layer(kind, *layer, x, Tensor(), Tensor());
    const nn::RecurrentOutput want =
        unrolled(kind, *layer, x, Tensor(), Tensor(),
                 [&](const Tensor& t) { return dropout(t, 0.4, true, &masks); });
    rnn::expect_close(got.output, want.output, 1e-12, "training output");
    rnn::expect_close(got.h_n, want.h_n, 1e-12, "training h_n");
    const nn::RecurrentOutput plain = unrolled(kind, *layer, x, Tensor(), Tensor(), identity);
    EXPECT_GT(rnn::values((got.output - plain.output).abs().max())[0], 1e-3);
    // Evaluation: no dropout.
    layer->eval();
    rnn::expect_close(run_layer(kind, *layer, x, Tensor(), Tensor()).output, plain.output, 1e-12,
                      "eval output");
  }
  // p = 1: the second layer sees zeros.
  nn::RNN net(I, H, {.num_layers = 2, .dropout = 1.0});
  const Tensor x = randn({T, B, I});
  const Tensor zero_in = zeros({T, B, H});
  const nn::RecurrentOutput o = net.forward(x, Tensor());
  const nn::RecurrentOutput want =
      unrolled(Kind::Tanh, net, x, Tensor(), Tensor(), [&](const Tensor&) { return zero_in; });
  rnn::expect_close(o.output, want.output, 1e-6, "p = 1");
}

TEST(RecurrentLayers, ErrorsNameTheModuleShapesAndDtypes) {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  expect_error(
      [&] {
        lstm.forward(ones({5, 2, 4}), Tensor(), Tensor());
      },
      ErrorKind::Shape, {"nn.LSTM", "input_size 3", "[5, 2, 4]", "float32"});
  expect_error([&] { lstm.forward(ones({5}), Tensor(), Tensor()); }, ErrorKind::Shape,
               {"nn.LSTM", "[seq, batch, input_size]", "[5]"});
  expect_error(
      [&] {
        lstm.forward(ones({5, 2, 3}), ones({1, 2, 4}), ones({1, 2, 4}));
      },
      ErrorKind::Shape, {"nn.LSTM", "h0", "[2, 2, 4]", "[1, 2, 4]"});
  expect_error(
      [&] {
        lstm.forward(ones({5, 2, 3}), ones({2, 2, 4}), Tensor());
      },
      ErrorKind::Value, {"nn.LSTM", "h0 and c0"});
  expect_error(
      [&] {
        lstm.forward(ones({0, 2, 3}), Tensor(), Tensor());
      },
      ErrorKind::Shape, {"nn.LSTM", "empty", "[0, 2, 3]"});
  nn::GRU gru(3, 4, {.batch_first = true});
  expect_error(
      [&] {
        gru.forward(ones({2, 5, 3}, DType::Float64), Tensor());
      },
      ErrorKind::DType, {"nn.GRU", "float64", "float32"});
  expect_error(
      [&] {
        gru.forward(ones({2, 5, 2}), Tensor());
      },
      ErrorKind::Shape, {"nn.GRU", "input_size 3", "[2, 5, 2]"});
  nn::RNN plain(3, 4);
  expect_error(
      [&] {
        plain.forward(ones({5, 2, 3}), ones({1, 2, 4}, DType::Float64));
      },
      ErrorKind::DType, {"nn.RNN", "h0", "float64", "float32"});
  expect_error([&] { nn::RNN(3, 4, {.num_layers = 0}); }, ErrorKind::Value,
               {"nn.RNN", "num_layers"});
  expect_error([&] { nn::LSTM(3, 4, {.nonlinearity = nn::RNNNonlinearity::ReLU}); },
               ErrorKind::Value, {"nn.LSTM", "nonlinearity"});
}

TEST(RecurrentLayers, UnderVmapAndCompileAsInEagerCode) {
  Generator gen(13);
  nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true, .gen = &gen});
  lstm.to(DType::Float64);
  // vmap over a leading dim of several sequence batches: each is the layer run on its own.
  const Tensor xs = randn({3, 5, 2, 3}, DType::Float64, &gen);
  const Tensor batched = vmap([&](const Tensor& x) { return lstm(x); })(xs);
  for (int64_t v = 0; v < 3; ++v)
    rnn::expect_close(batched.select(0, v), lstm(xs.select(0, v)), 1e-12, "vmap");
  // compile: the traced forward replays the eager values, and so do its gradients.
  const CompiledFunction f = compile([&](const std::vector<Tensor>& in) {
    const nn::RecurrentOutput o = lstm.forward(in[0], Tensor(), Tensor());
    return std::vector<Tensor>{o.output.sum() + o.c_n.square().sum()};
  });
  const Tensor x = randn({5, 2, 3}, DType::Float64, &gen);
  const Tensor xc = x.detach().requires_grad_(true), xe = x.detach().requires_grad_(true);
  for (int call = 0; call < 2; ++call) {  // the trace, then a replay
    const Tensor yc = f({xc})[0];
    const nn::RecurrentOutput o = lstm.forward(xe, Tensor(), Tensor());
    const Tensor ye = o.output.sum() + o.c_n.square().sum();
    rnn::expect_close(yc, ye, 1e-12, "compiled value");
    const std::vector<Tensor> gc = autograd::grad({yc}, {xc}), ge = autograd::grad({ye}, {xe});
    rnn::expect_close(gc[0], ge[0], 1e-12, "compiled gradient");
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().graph_breaks, 0);
}
