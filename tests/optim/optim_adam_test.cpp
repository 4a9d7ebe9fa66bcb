// optim::Adam and optim::AdamW against the bias-corrected Adam formulas recomputed here in
// plain doubles: plain steps, L2 and decoupled weight decay, both lerp branches (beta1 above and
// below 0.5), per-parameter step counts for skipped parameters, float32, and bad values.
#include <gtest/gtest.h>

#include "optim/optim_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::optim_test;
using adjoint::testing::expect_error;

namespace {

// Adam as written in the paper plus PyTorch's placement of eps and weight decay.
struct AdamReference {
  optim::AdamOptions o;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& p, const std::vector<double>& g_in) {
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0);
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = g_in[i];
      if (decoupled) {
        p[i] *= 1 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * p[i];
      }
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
  }
};

template <class Opt, class Options>
void check_against_reference(const Options& options, bool decoupled, int steps = 3) {
  std::vector<double> ref = {0.5, -1.25, 2.0, 0.75, -0.1, 3.0};
  Tensor p = param(ref, Shape{3, 2});
  Opt opt({p}, options);
  AdamReference r{opt.options(), decoupled, {}, {}};
  for (int s = 0; s < steps; ++s) {
    std::vector<double> g = test_grad(ref);
    set_grad(p, g);
    opt.step();
    r.step(ref, g);
    expect_near(p, ref, 1e-12);
  }
}

}  // namespace

TEST(Adam, StepsMatchTheFormula) {
  check_against_reference<optim::Adam>(optim::AdamOptions{.lr = 0.01}, false);
  check_against_reference<optim::Adam>(
      optim::AdamOptions{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3}, false, 4);
}

TEST(Adam, SmallBeta1UsesTheOtherLerpBranch) {
  // 1 - beta1 >= 0.5: torch's lerp computes grad - (grad - m) * beta1; same value.
  check_against_reference<optim::Adam>(optim::AdamOptions{.lr = 0.05, .beta1 = 0.3}, false);
  check_against_reference<optim::Adam>(optim::AdamOptions{.lr = 0.05, .beta1 = 0.0}, false);
}

TEST(Adam, L2WeightDecayIsAddedToTheGradient) {
  check_against_reference<optim::Adam>(optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1}, false);
}

TEST(AdamW, DecoupledWeightDecay) {
  check_against_reference<optim::AdamW>(optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1}, true);
  check_against_reference<optim::AdamW>(optim::AdamWOptions{.lr = 0.02}, true);  // default 0.01
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 0.01);                           // as PyTorch
  EXPECT_EQ(optim::AdamOptions{}.weight_decay, 0.0);
}

TEST(Adam, FirstStepMovesEveryCoordinateByAboutLr) {
  // After bias correction the first update is lr * g / (|g| + eps).
  Tensor p = param({0.0, 0.0, 0.0});
  optim::Adam opt({p}, {.lr = 0.1, .eps = 0});
  set_grad(p, {3.0, -0.001, 250.0});
  opt.step();
  expect_near(p, {-0.1, 0.1, -0.1}, 1e-15);
}

TEST(Adam, EachParameterCountsItsOwnSteps) {
  // b has no gradient on the first step, so its bias correction starts at t = 1 on the second.
  std::vector<double> ra = {1.0, 2.0}, rb = {-1.0, 0.5};
  Tensor a = param(ra), b = param(rb);
  optim::Adam opt({a, b}, {.lr = 0.1});
  AdamReference refa{opt.options(), false, {}, {}}, refb{opt.options(), false, {}, {}};
  std::vector<double> ga = test_grad(ra);
  set_grad(a, ga);
  opt.step();
  refa.step(ra, ga);
  expect_near(a, ra, 1e-12);
  expect_near(b, rb, 0);
  ga = test_grad(ra);
  std::vector<double> gb = test_grad(rb);
  set_grad(a, ga);
  set_grad(b, gb);
  opt.step();
  refa.step(ra, ga);
  refb.step(rb, gb);
  expect_near(a, ra, 1e-12);
  expect_near(b, rb, 1e-12);
  for (const auto& [name, t] : opt.state_dict()) {
    if (name == "state.0.step") {
      EXPECT_EQ(t.item<int64_t>(), 2);
    }
    if (name == "state.1.step") {
      EXPECT_EQ(t.item<int64_t>(), 1);
    }
  }
  EXPECT_EQ(opt.step_count(), 2);
}

TEST(Adam, Float32ParametersFollowTheDoubleFormula) {
  std::vector<double> ref = {0.5, -1.25, 2.0};
  Tensor p = tensor(ref, std::nullopt, DType::Float32).requires_grad_(true);
  optim::Adam opt({p}, {.lr = 0.01});
  AdamReference r{opt.options(), false, {}, {}};
  for (int s = 0; s < 3; ++s) {
    std::vector<double> g = test_grad(p.to_vector<double>());
    set_grad(p, g);
    opt.step();
    r.step(ref, g);
  }
  EXPECT_EQ(p.dtype(), DType::Float32);
  expect_near(p, ref, 1e-6);
}

TEST(Adam, LeavesTheGradientAlone) {
  Tensor p = param({1.0, -1.0});
  optim::Adam opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(p, {0.25, 0.5});
  opt.step();
  expect_near(p.grad(), {0.25, 0.5}, 0);
}

TEST(Adam, BadHyperParametersNameTheOptimizer) {
  Tensor p = param({1.0});
  expect_error([&] { optim::Adam({p}, {.beta1 = 0.9, .beta2 = 1.5}); }, ErrorKind::Value,
               {"[optim.Adam] betas must be in [0, 1): got (0.9, 1.5)"});
  expect_error([&] { optim::Adam({p}, {.beta1 = -0.1}); }, ErrorKind::Value,
               {"[optim.Adam]", "betas", "(-0.1, 0.999)"});
  expect_error([&] { optim::Adam({p}, {.beta1 = 1.0}); }, ErrorKind::Value,
               {"[optim.Adam]", "betas"});
  expect_error([&] { optim::Adam({p}, {.beta2 = NAN}); }, ErrorKind::Value,
               {"[optim.Adam]", "betas"});
  expect_error([&] { optim::Adam({p}, {.lr = -1e-3}); }, ErrorKind::Value,
               {"[optim.Adam]", "learning rate", "-0.001"});
  expect_error([&] { optim::Adam({p}, {.eps = -1e-8}); }, ErrorKind::Value,
               {"[optim.Adam]", "eps"});
  expect_error([&] { optim::Adam({p}, {.weight_decay = -0.1}); }, ErrorKind::Value,
               {"[optim.Adam]", "weight_decay"});
  expect_error([&] { optim::AdamW({p}, {.beta2 = 2}); }, ErrorKind::Value,
               {"[optim.AdamW]", "betas"});
  expect_error([&] { optim::AdamW({}, {}); }, ErrorKind::Value, {"[optim.AdamW]", "empty"});
}
