// The `lstm` workload of ../shared/bench/README.md: a training step of a character LSTM language
// model (Embedding(256, 128), a 2-layer nn::LSTM with hidden 512, batch_first, Linear(512, 256),
// cross-entropy, AdamW) on [32, 64] tokens, each layer's whole time loop on the fused op
// lstm_sequence.
// `lstm-unfused` runs the same layer with the gates as a composite of ops (fused_gates off), and
// `lstm-select` the same model with the time steps
// taken by one select each from the input projection, the naive loop that Note [Unbinding the
// steps] in src/nn/rnn.cpp replaces (its backward sums T full-size scatters): the measurement
// behind that choice.
#include <cmath>
#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "checkpoint_modes.h"
#include "gemm_bound.h"
#include "optimizer_step.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;
namespace nn = adjoint::nn;

constexpr int64_t kVocab = 256, kEmbed = 128, kHidden = 512, kLayers = 2, kBatch = 32, kSeq = 64;

// One LSTM layer over x [T, B, in] with a select per step (the naive unbinding).
Tensor lstm_layer_select(const nn::RecurrentWeights& w, const Tensor& x) {
  const Tensor xp = adjoint::linear(x, w.weight_ih, w.bias_ih);
  Tensor h = adjoint::zeros({x.size(1), kHidden}), c = adjoint::zeros({x.size(1), kHidden});
  std::vector<Tensor> hs;
  for (int64_t t = 0; t < x.size(0); ++t) {
    const Tensor g = xp.select(0, t) + adjoint::linear(h, w.weight_hh, w.bias_hh);
    const std::vector<Tensor> gates = adjoint::chunk(g, 4, -1);
    c = adjoint::sigmoid(gates[1]) * c + adjoint::sigmoid(gates[0]) * adjoint::tanh(gates[2]);
    h = adjoint::sigmoid(gates[3]) * adjoint::tanh(c);
    hs.push_back(h);
  }
  return adjoint::stack(hs, 0);
}

enum class Impl { Fused, Unfused, Select };

void run(const Opts& o, Json& j, Impl impl) {
  const bool select_steps = impl == Impl::Select;
  adjoint::Generator gen(0);
  auto embed = std::make_shared<nn::Embedding>(kVocab, kEmbed, &gen);
  auto lstm = std::make_shared<nn::LSTM>(kEmbed, kHidden,
                                         nn::RecurrentOptions{.num_layers = kLayers,
                                                              .batch_first = true,
                                                              .fused_gates = impl == Impl::Fused,
                                                              .gen = &gen});
  auto head = std::make_shared<nn::Linear>(kHidden, kVocab, true, &gen);
  std::vector<Tensor> params = embed->parameters();
  for (const auto* m : {static_cast<nn::Module*>(lstm.get()), static_cast<nn::Module*>(head.get())})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  const Tensor tokens = adjoint::randint(0, kVocab, {kBatch, kSeq + 1}, &gen);
  const Tensor inputs = tokens.slice(1, 0, kSeq), targets = tokens.slice(1, 1, kSeq + 1);
  adjoint::optim::AdamW opt(
      params, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});

  auto forward_loss = [&] {
    Tensor h;
    if (select_steps) {
      h = (*embed)(inputs).transpose(0, 1);  // [T, B, E]
      for (int64_t l = 0; l < kLayers; ++l) h = lstm_layer_select(lstm->weights(l, 0), h);
      h = h.transpose(0, 1);
    } else {
      h = (*lstm)((*embed)(inputs));  // [B, T, H]
    }
    const Tensor logits = (*head)(h);
    return adjoint::cross_entropy(logits.reshape({kBatch * kSeq, kVocab}), targets.reshape({-1}));
  };

  StepTimes times;
  auto run_step = [&](int s, bool timed) {
    optimizer_step(
        o, opt, [&](int) { return forward_loss(); }, s, timed, times);
  };
  for (int s = 0; s < o.warmup + o.steps; ++s) run_step(s, s >= o.warmup);
  const double saved_peak = saved_peak_bytes([&] {
    std::optional<adjoint::Autocast> amp;
    autocast_forward(amp, o);
    forward_loss();
  });
  if (o.verbose) {  // where one step's time goes, per op, to stderr
    adjoint::Profiler prof;
    forward_loss().backward();
    prof.stop();
    std::fprintf(stderr, "%s\n", prof.table(25).c_str());
  }
  const double tokens_per_step = static_cast<double>(kBatch * kSeq);
  // 6 B·T (Σ_l 4h (in_l + h) + h V): the weight matrices' multiply-adds, forward and backward.
  const double per_token =
      4.0 * kHidden * (kEmbed + kHidden) + 4.0 * kHidden * (2 * kHidden) + 1.0 * kHidden * kVocab;
  const double flops = 6.0 * tokens_per_step * per_token;
  int64_t n_params = 0;
  for (const Tensor& p : params) n_params += p.numel();
  common_fields(j, o, times.total);
  report_gemm_bound(j, times.total.median(), [&] { run_step(1, false); });
  j.str("precision", o.precision);
  j.str("lstm_impl", select_steps ? "ops: per-step select of the input projection"
                     : impl == Impl::Fused
                         ? "nn::LSTM: one input product per layer, then the time loop on one "
                           "op (lstm_sequence)"
                         : "nn::LSTM: one input product per layer, halving unbind, "
                           "per step linear(h) + chunked gates (ops)");
  j.num("fwd_ms", times.fwd.median());
  j.num("bwd_ms", times.bwd.median());
  j.num("opt_ms", times.step.median());
  j.num("tokens_per_s", tokens_per_step / (times.total.median() * 1e-3));
  j.integer("params", n_params);
  j.num("flops_per_step", flops);
  j.num("gflops", flops / (times.total.median() * 1e6));
  j.num("first_loss", times.first_loss);
  j.num("loss", times.last_loss.item<double>());
  j.integer("peak_saved_bytes", static_cast<long long>(saved_peak));
}

void lstm(const Opts& o, Json& j) { run(o, j, Impl::Fused); }
void lstm_unfused(const Opts& o, Json& j) { run(o, j, Impl::Unfused); }
void lstm_select(const Opts& o, Json& j) { run(o, j, Impl::Select); }

static RegisterWorkload register_lstm{"lstm", lstm, 20};
static RegisterWorkload register_lstm_unfused{"lstm-unfused", lstm_unfused, 20};
static RegisterWorkload register_lstm_select{"lstm-select", lstm_select, 20};

}  // namespace
}  // namespace bench
