// Whole training steps inside compile (Note [Training steps under compile] in
// src/compile/trace.cpp): zero_grad, the loss, backward() and the optimizer's step traced into
// one graph. The oracle is the same step run eagerly on an identical model: parameters,
// gradients and losses must agree bit for bit at every step.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/export.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "adjoint/profiler.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::contains;
using adjoint::testing::expect_error;
using adjoint::testing::expect_same;

CompileOptions strict() {
  CompileOptions o;
  o.on_graph_break = OnGraphBreak::Throw;
  return o;
}

/// Two identical small MLPs (one to run eagerly, one compiled) and a batch of data.
struct Twins {
  explicit Twins(DType dtype = DType::Float32) {
    Generator ge(3), gc(3);
    eager = std::make_shared<nn::Sequential>();
    compiled = std::make_shared<nn::Sequential>();
    for (auto* m : {eager.get(), compiled.get()}) {
      Generator& g = m == eager.get() ? ge : gc;
      m->push_back(std::make_shared<nn::Linear>(6, 16, true, &g));
      m->push_back(std::make_shared<nn::Tanh>());
      m->push_back(std::make_shared<nn::Linear>(16, 3, true, &g));
      m->to(dtype);
    }
  }
  std::shared_ptr<nn::Sequential> eager, compiled;
};

Tensor batch(const Shape& shape, uint64_t seed, DType dtype = DType::Float32) {
  Generator g(seed);
  return randn(shape, dtype, &g);
}

/// expect_same where a NaN equals a NaN: a step the GradScaler skipped leaves its non-finite
/// gradients in .grad, in eager code as in compiled.
void expect_same_or_both_nan(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t k = 0; k < g.size(); ++k)
    if (!(std::isnan(g[k]) && std::isnan(w[k]))) ASSERT_EQ(g[k], w[k]) << "element " << k;
}

void expect_params_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                        const std::string& when) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(when + ", parameter " + std::to_string(i));
    expect_same(got[i].detach(), want[i].detach());
    ASSERT_EQ(got[i].grad().defined(), want[i].grad().defined());
    if (want[i].grad().defined()) expect_same_or_both_nan(got[i].grad(), want[i].grad());
  }
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

/// 20 steps of zero_grad, loss, backward, step, eager beside compiled; the learning rate
/// changes every 5 steps (a schedule the compiled step must see).
void run_twenty_steps(const MakeOptimizer& make, const std::string& name) {
  SCOPED_TRACE(name);
  Twins t;
  std::unique_ptr<optim::Optimizer> opt_e = make(t.eager->parameters());
  std::unique_ptr<optim::Optimizer> opt_c = make(t.compiled->parameters());
  auto step = [](nn::Sequential& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mse_loss(model.forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{step(*t.compiled, *opt_c, in[0], in[1])};
      },
      strict());
  for (int i = 0; i < 20; ++i) {
    if (i % 5 == 4) {
      opt_e->set_lr(opt_e->lr() * 0.5);
      opt_c->set_lr(opt_c->lr() * 0.5);
    }
    const Tensor x = batch({8, 6}, 100 + i), y = batch({8, 3}, 200 + i);
    const Tensor le = step(*t.eager, *opt_e, x, y);
    const Tensor lc = compiled({x, y})[0];
    EXPECT_FALSE(lc.requires_grad());  // the step's backward used its graph up
    expect_same(lc, le.detach());
    expect_params_same(t.compiled->parameters(), t.eager->parameters(),
                       "step " + std::to_string(i));
  }
  EXPECT_EQ(opt_c->step_count(), 20);
  EXPECT_EQ(compiled.stats().traces, 1);
  EXPECT_EQ(compiled.stats().replays, 20);
  EXPECT_TRUE(contains(compiled.dump(), "[effect]"));
}

TEST(CompileTrainingStep, SgdAdamAndAdamWMatchEagerBitwiseOverTwentySteps) {
  run_twenty_steps(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.1});
      },
      "SGD");
  run_twenty_steps(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(
            std::move(p),
            optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
      },
      "SGD with momentum and dampening");
  run_twenty_steps(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(
            std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      },
      "SGD with Nesterov momentum");
  run_twenty_steps(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p),
                                             optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2});
      },
      "Adam");
  run_twenty_steps(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p),
                                              optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
      },
      "AdamW");
}

// The step under bf16 autocast (its casts and 16-bit ops traced and fused with the rest) and
// on a batch that is a strided view: still the eager step, bit for bit.
TEST(CompileTrainingStep, AnAutocastStepOnAStridedBatchMatchesEagerBitwise) {
  Twins t;
  optim::AdamW opt_e(t.eager->parameters(), {.lr = 1e-2}),
      opt_c(t.compiled->parameters(), {.lr = 1e-2});
  auto step = [](nn::Sequential& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      Autocast amp(DType::BFloat16);
      loss = mse_loss(model.forward(x), y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{step(*t.compiled, opt_c, in[0], in[1])};
      },
      strict());
  for (int i = 0; i < 10; ++i) {
    const Tensor x = batch({6, 8}, 500 + i).t(), y = batch({8, 3}, 600 + i);  // x: [8, 6], strided
    const Tensor le = step(*t.eager, opt_e, x, y);
    const Tensor lc = compiled({x, y})[0];
    expect_same(lc, le.detach());
    expect_params_same(t.compiled->parameters(), t.eager->parameters(),
                       "step " + std::to_string(i));
  }
  EXPECT_EQ(compiled.stats().traces, 1);
}

// A GPT whose embedding is tied to its head (two gradients into one parameter), dropout on,
// AdamW: the whole step compiled against eager code.
TEST(CompileTrainingStep, GptStepsWithTiedWeightsAndDropoutMatchEagerBitwise) {
  const nn::GPTConfig config{32, 16, 32, 2, 2, 0.1};
  Generator ge(5), gc(5);
  nn::GPT eager(config, &ge), model(config, &gc);
  optim::AdamW opt_e(eager.parameters(), {.lr = 1e-2}), opt_c(model.parameters(), {.lr = 1e-2});
  auto step = [](nn::GPT& m, optim::Optimizer& opt, const Tensor& in, const Tensor& target) {
    opt.zero_grad();
    Tensor loss = m.loss(in, target);
    loss.backward();
    opt.step();
    return loss;
  };
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{step(model, opt_c, in[0], in[1])};
      },
      strict());
  Generator data(9);
  for (int i = 0; i < 20; ++i) {
    const Tensor tokens = randint(0, 32, {3, 17}, &data);
    const Tensor in = tokens.slice(1, 0, 16), target = tokens.slice(1, 1, 17);
    const Tensor le = step(eager, opt_e, in, target);
    const Tensor lc = compiled({in, target})[0];
    expect_same(lc, le.detach());
    expect_params_same(model.parameters(), eager.parameters(), "step " + std::to_string(i));
  }
  EXPECT_EQ(compiled.stats().traces, 1);
}

// backward() in a compiled function whose caller zeroes the gradients outside: the .grad it
// leaves equals eager's; a call that finds a gradient there (accumulation) traces again, and
// since its values come from outside the graph, that signature runs eagerly, still right.
TEST(CompileTrainingStep, BackwardInsideFillsGradAndAccumulationFallsBackToEager) {
  Twins t(DType::Float64);
  CompileOptions o;
  o.warn = false;
  CompiledFunction fwd_bwd = compile(
      [&](const std::vector<Tensor>& in) {
        Tensor loss = mse_loss(t.compiled->forward(in[0]), in[1]);
        loss.backward();
        return std::vector<Tensor>{loss};
      },
      o);
  auto eager = [&](const Tensor& x, const Tensor& y) {
    mse_loss(t.eager->forward(x), y).backward();
  };
  for (int i = 0; i < 3; ++i) {
    const Tensor x = batch({5, 6}, 10 + i, DType::Float64),
                 y = batch({5, 3}, 20 + i, DType::Float64);
    t.eager->zero_grad();
    t.compiled->zero_grad();
    eager(x, y);
    fwd_bwd({x, y});
    expect_params_same(t.compiled->parameters(), t.eager->parameters(), "zeroed outside");
  }
  EXPECT_EQ(fwd_bwd.stats().traces, 1);
  EXPECT_EQ(fwd_bwd.stats().replays, 3);
  for (int i = 0; i < 2; ++i) {  // no zero_grad: gradients add up
    const Tensor x = batch({5, 6}, 30 + i, DType::Float64),
                 y = batch({5, 3}, 40 + i, DType::Float64);
    eager(x, y);
    fwd_bwd({x, y});
    expect_params_same(t.compiled->parameters(), t.eager->parameters(), "accumulated");
  }
  EXPECT_EQ(fwd_bwd.stats().guard_failures, 1);
  EXPECT_EQ(fwd_bwd.stats().graph_breaks, 1);
  EXPECT_TRUE(contains(fwd_bwd.dump(), "that it did not compute"));
}

// zero_grad(set_to_none=false) inside: zeros where a gradient was, then backward adds to them.
TEST(CompileTrainingStep, ZeroGradInPlaceInsideMatchesEager) {
  Twins t(DType::Float64);
  optim::SGD opt_e(t.eager->parameters(), {.lr = 0.1}),
      opt_c(t.compiled->parameters(), {.lr = 0.1});
  CompiledFunction c = compile(
      [&](const std::vector<Tensor>& in) {
        opt_c.zero_grad(/*set_to_none=*/false);
        mse_loss(t.compiled->forward(in[0]), in[1]).backward();
        opt_c.step();
        return std::vector<Tensor>{};
      },
      strict());
  for (int i = 0; i < 4; ++i) {
    const Tensor x = batch({5, 6}, 50 + i, DType::Float64),
                 y = batch({5, 3}, 60 + i, DType::Float64);
    opt_e.zero_grad(false);
    mse_loss(t.eager->forward(x), y).backward();
    opt_e.step();
    c({x, y});
    expect_params_same(t.compiled->parameters(), t.eager->parameters(),
                       "step " + std::to_string(i));
  }
  // The first call found no gradients, the second found them: two graphs, then replays.
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().replays, 4);
}

TEST(CompileTrainingStep, WhatAStepCannotHoldIsANamedGraphBreak) {
  Twins t(DType::Float64);
  optim::SGD opt(t.compiled->parameters(), {.lr = 0.1});
  const Tensor x = batch({5, 6}, 1, DType::Float64), y = batch({5, 3}, 2, DType::Float64);
  const std::vector<Tensor> before = t.compiled->parameters();
  std::vector<Tensor> saved;
  for (const Tensor& p : before) saved.push_back(p.detach().clone());
  auto loss_of = [&](const std::vector<Tensor>& in) {
    return mse_loss(t.compiled->forward(in[0]), in[1]);
  };
  // Reading a parameter after the step: the trace would see it unchanged.
  CompiledFunction reads_after = compile(
      [&](const std::vector<Tensor>& in) {
        opt.zero_grad();
        loss_of(in).backward();
        opt.step();
        return std::vector<Tensor>{t.compiled->parameters()[0] * 1.0};
      },
      strict());
  expect_error(
      [&] {
        reads_after({x, y});
      },
      ErrorKind::NotImplemented, {"optim.SGD.step", "changed earlier in the function"});
  CompiledFunction second_order = compile(
      [&](const std::vector<Tensor>& in) {
        loss_of(in).backward(Tensor(), false, /*create_graph=*/true);
        return std::vector<Tensor>{};
      },
      strict());
  expect_error([&] { second_order({x, y}); }, ErrorKind::NotImplemented, {"create_graph"});
  HookHandle hook = t.compiled->parameters()[1].register_hook([](const Tensor& g) { return g; });
  CompiledFunction hooked = compile(
      [&](const std::vector<Tensor>& in) {
        loss_of(in).backward();
        return std::vector<Tensor>{};
      },
      strict());
  expect_error([&] { hooked({x, y}); }, ErrorKind::NotImplemented, {"gradient hook"});
  hook.remove();
  // A GradScaler's unscale_ on its own reads its Inf/NaN check into C++ (step() unscales).
  optim::GradScaler scaler;
  CompiledFunction unscaled = compile(
      [&](const std::vector<Tensor>& in) {
        opt.zero_grad();
        scaler.scale(loss_of(in)).backward();
        scaler.unscale_(opt);
        return std::vector<Tensor>{};
      },
      strict());
  expect_error([&] { unscaled({x, y}); }, ErrorKind::NotImplemented, {"GradScaler.unscale_"});
  // The refused traces changed nothing: no step, no gradient.
  for (std::size_t i = 0; i < before.size(); ++i) {
    expect_same(before[i].detach(), saved[i]);
    EXPECT_FALSE(before[i].grad().defined());
  }
  EXPECT_EQ(opt.step_count(), 0);
}

// A loss-scaled step (scale, backward, the scaler's step and update) with batches that
// overflow: the compiled steps skip the same steps, back off and grow the scale as eager ones.
TEST(CompileTrainingStep, AGradScalerStepSkipsAndRescalesAsEager) {
  Twins t;
  optim::SGD opt_e(t.eager->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_c(t.compiled->parameters(), {.lr = 0.05, .momentum = 0.9});
  const optim::GradScalerOptions o{.init_scale = 1024.0, .growth_interval = 3};
  optim::GradScaler scaler_e(o), scaler_c(o);
  auto step = [](nn::Sequential& model, optim::Optimizer& opt, optim::GradScaler& scaler,
                 const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mse_loss(model.forward(x), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{step(*t.compiled, opt_c, scaler_c, in[0], in[1])};
      },
      strict());
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const Tensor x = batch({8, 6}, 300 + i);
    Tensor y = batch({8, 3}, 400 + i);
    if (i == 6 || i == 13) y = y * 3e37;  // its scaled gradients overflow float32
    const Tensor le = step(*t.eager, opt_e, scaler_e, x, y);
    const Tensor lc = compiled({x, y})[0];
    expect_same(lc, le.detach());
    expect_params_same(t.compiled->parameters(), t.eager->parameters(), "after the step");
    EXPECT_EQ(scaler_c.get_scale(), scaler_e.get_scale());
    EXPECT_EQ(scaler_c.growth_tracker(), scaler_e.growth_tracker());
  }
  EXPECT_EQ(compiled.stats().traces, 1);
  EXPECT_EQ(opt_c.step_count(), opt_e.step_count());
  EXPECT_EQ(opt_e.step_count(), 18);  // the two overflowing steps were skipped
}

TEST(CompileTrainingStep, AStepIsNotExportedAndOutlivingItsOptimizerIsAnError) {
  Twins t(DType::Float64);
  auto opt = std::make_unique<optim::SGD>(t.compiled->parameters(), optim::SGDOptions{.lr = 0.1});
  CompiledFunction c = compile(
      [&](const std::vector<Tensor>& in) {
        opt->zero_grad();
        Tensor loss = mse_loss(t.compiled->forward(in[0]), in[1]);
        loss.backward();
        opt->step();
        return std::vector<Tensor>{loss};
      },
      strict());
  const Tensor x = batch({5, 6}, 1, DType::Float64), y = batch({5, 3}, 2, DType::Float64);
  c({x, y});
  expect_error([&] { export_function(c, ::testing::TempDir() + "/step.adjoint"); },
               ErrorKind::NotImplemented, {"export", "optimizer"});
  // The profiler sees the step as one event, of a replay and of eager code alike.
  auto steps_seen = [&](const std::function<void()>& run) {
    Profiler profile;
    run();
    profile.stop();
    int seen = 0;
    for (const ProfileEvent& e : profile.events()) seen += e.name == "optim.SGD.step";
    return seen;
  };
  EXPECT_EQ(steps_seen([&] { c({x, y}); }), 1);
  EXPECT_EQ(steps_seen([&] {
              opt->zero_grad();
              mse_loss(t.compiled->forward(x), y).backward();
              opt->step();
            }),
            1);
  opt.reset();
  expect_error([&] { c({x, y}); }, ErrorKind::Value, {"optim.SGD", "destroyed"});
}

}  // namespace
