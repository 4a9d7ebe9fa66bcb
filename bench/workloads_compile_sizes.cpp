// compile-new-size (adjoint only): what a new batch size costs gpt-tiny's compiled loss
// (model as in gpt-tiny: vocab 256, context 128, d 256, 4 heads, 4 layers). One compiled
// function traces each new size; another, with the batch dynamic (CompileOptions::dynamic),
// traces 16 and 12, probes more sizes (a check between them and one far out), and builds the
// graph of every later size from the fitted formulas. Each "step" is one new size (4 to 4 + steps),
// the first call at it on both functions, alternating; also reported: a replay at a known size and
// an eager call. ms_per_step is the built first call. Checks: both first calls give eager's loss.
#include <cmath>
#include <cstdio>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

constexpr int64_t kVocab = 256, kCtx = 128, kDModel = 256, kHeads = 4, kLayers = 4;

void compile_new_size(const Opts& o, Json& j) {
  adjoint::Generator gen(0);
  adjoint::nn::GPT model(adjoint::nn::GPTConfig{kVocab, kCtx, kDModel, kHeads, kLayers, 0.0}, &gen);
  auto loss = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{model.loss(in[0], in[1])};
  };
  adjoint::CompileOptions dynamic;
  dynamic.dynamic = {{0, 0}, {1, 0}};
  const adjoint::CompiledFunction traced = adjoint::compile(loss);
  const adjoint::CompiledFunction built = adjoint::compile(loss, dynamic);
  auto batch = [&](int64_t n) {
    const Tensor tokens = adjoint::randint(0, kVocab, {n, kCtx + 1}, &gen);
    return std::vector<Tensor>{tokens.slice(1, 0, kCtx).contiguous(),
                               tokens.slice(1, 1, kCtx + 1).contiguous()};
  };
  auto timed = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return ms(t0, Clock::now());
  };
  auto call = [](const adjoint::CompiledFunction& f, const std::vector<Tensor>& in) {
    return f(in)[0].item<double>();
  };
  Samples fitting;
  for (int64_t n : {16, 12}) {  // the two traces, then the probes (inside the second call)
    const std::vector<Tensor> in = batch(n);
    fitting.add(timed([&] { call(built, in); }));
  }
  Samples first_traced, first_built, replay, eager;
  double worst = 0;
  for (int64_t n = 4; n < 4 + o.steps; ++n) {
    const std::vector<Tensor> in = batch(n);
    const double want = loss(in)[0].item<double>();
    double got_traced = NAN, got_built = NAN;
    first_traced.add(timed([&] { got_traced = call(traced, in); }));
    first_built.add(timed([&] { got_built = call(built, in); }));
    worst = std::max({worst, std::abs(got_traced - want), std::abs(got_built - want)});
    replay.add(timed([&] { call(built, in); }));
    eager.add(timed([&] { loss(in)[0].item<double>(); }));
  }
  common_fields(j, o, first_built);
  j.num("first_call_traced_ms", first_traced.median());
  j.num("first_call_built_ms", first_built.median());
  j.num("replay_ms", replay.median());
  j.num("eager_ms", eager.median());
  j.num("two_traces_and_probes_ms", fitting.v[0] + fitting.v[1]);
  j.num("max_loss_difference", worst);
  const adjoint::CompileStats st = built.stats();
  j.integer("traces", st.traces);
  j.integer("probes", st.probes);
  j.integer("instantiations", st.instantiations);
}

}  // namespace

static RegisterWorkload register_compile_new_size{"compile-new-size", compile_new_size, 8};

}  // namespace bench
