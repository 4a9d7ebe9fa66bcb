// The fused Adam/AdamW kernel (src/optim/adam_fused.cpp) against the op-by-op update it
// replaces: bitwise equal param, exp_avg and exp_avg_sq over several steps, for float32 and
// float64, Adam and AdamW, with and without weight decay, both lerp branches, odd sizes (SIMD
// tails, thread chunk boundaries), through optim::Adam itself, and the fallback for strided
// and mixed-dtype tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "optim/adam_fused.h"

using namespace adjoint;
using optim::detail::AdamStep;

namespace {

Tensor scratch(const Tensor& like, int) { return empty(like.shape(), like.dtype()); }

// Values of both signs over several magnitudes, some exact zeros (v = 0 gives denom = eps).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = i % 97 == 3 ? 0.0 : u(rng) * std::pow(10.0, static_cast<int>(rng() % 7) - 4);
  return tensor(v, shape).to(dtype);
}

// The same bytes (NaN-safe, and -0 differs from +0).
void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  Tensor g = got.contiguous(), w = want.contiguous();
  ASSERT_EQ(g.nbytes(), w.nbytes()) << what;
  if (std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0) return;
  std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
  std::size_t first = 0;
  while (first < gv.size() && std::memcmp(&gv[first], &wv[first], sizeof(double)) == 0) ++first;
  ADD_FAILURE() << what << ": differs first at " << first << ": " << gv[first] << " vs "
                << wv[first];
}

struct State {
  Tensor p, m, v;
  State clone() const { return {p.clone(), m.clone(), v.clone()}; }
};

State initial(const Shape& shape, DType dtype) {
  return {random_tensor(shape, dtype, 1), zeros(shape, dtype), zeros(shape, dtype)};
}

std::string describe_case(const AdamStep& s, DType dtype, int64_t n) {
  return std::string(to_string(dtype)) + (s.decoupled ? " AdamW" : " Adam") +
         " wd=" + std::to_string(s.weight_decay) + " beta1=" + std::to_string(s.beta1) +
         " n=" + std::to_string(n) + " step=" + std::to_string(s.step);
}

// `steps` updates of a fused and an op-by-op copy of the same state, compared after each.
void check_fused_matches_ops(AdamStep s, DType dtype, const Shape& shape, int steps = 3) {
  NoGradGuard no_grad;
  State fused = initial(shape, dtype);
  State ops = fused.clone();
  for (int k = 1; k <= steps; ++k) {
    s.step = k;
    const std::string what = describe_case(s, dtype, shape.numel());
    Tensor g = random_tensor(shape, dtype, 100 + k);
    const uint64_t pv = ops.p.version(), mv = ops.m.version(), vv = ops.v.version();
    const uint64_t fpv = fused.p.version(), fmv = fused.m.version(), fvv = fused.v.version();
    ASSERT_TRUE(optim::detail::adam_update_fused(fused.p, g, fused.m, fused.v, s)) << what;
    optim::detail::adam_update_ops(ops.p, g, ops.m, ops.v, s, scratch);
    expect_bitwise(fused.p, ops.p, what + " param");
    expect_bitwise(fused.m, ops.m, what + " exp_avg");
    expect_bitwise(fused.v, ops.v, what + " exp_avg_sq");
    // The same version bumps as the in-place ops.
    EXPECT_EQ(fused.p.version() - fpv, ops.p.version() - pv) << what;
    EXPECT_EQ(fused.m.version() - fmv, ops.m.version() - mv) << what;
    EXPECT_EQ(fused.v.version() - fvv, ops.v.version() - vv) << what;
  }
}

#define SKIP_WITHOUT_FUSED()                                            \
  if (!optim::detail::adam_fused_available())                           \
  GTEST_SKIP() << "this build may contract a * b + c into an FMA: the " \
                  "fused Adam kernel is off and the op-by-op update runs"

class AdamFused : public ::testing::TestWithParam<DType> {};

TEST_P(AdamFused, EveryVariantMatchesTheOpByOpUpdateBitwise) {
  SKIP_WITHOUT_FUSED();
  const DType dtype = GetParam();
  for (bool decoupled : {false, true})
    for (double wd : {0.0, 0.1})
      // 1 - beta1 = 0.1 (< 0.5: m + w * (g - m)) and 0.7 (>= 0.5: g - (g - m) * (1 - w)).
      for (double beta1 : {0.9, 0.3})
        for (int64_t n : {37, 1000003}) {
          AdamStep s{.lr = 0.01,
                     .beta1 = beta1,
                     .beta2 = 0.999,
                     .eps = 1e-8,
                     .weight_decay = wd,
                     .decoupled = decoupled};
          check_fused_matches_ops(s, dtype, Shape{n});
        }
}

TEST_P(AdamFused, OtherHyperParametersAndShapes) {
  SKIP_WITHOUT_FUSED();
  const DType dtype = GetParam();
  // Large lr and eps, beta2 far from 1, weight decay 1 (add_ takes its alpha == 1 branch),
  // beta1 = 0 and 0.5 (w = 1 and w = 0.5, the lerp's boundary), a 0-d, an empty and a 2-d
  // parameter whose size is odd and spans two thread chunks.
  const AdamStep cases[] = {
      {.lr = 0.5, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3, .weight_decay = 1},
      {.lr = 0.5, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3, .weight_decay = 1, .decoupled = true},
      {.lr = 1e-3, .beta1 = 0.0, .beta2 = 0.9, .weight_decay = 0.01, .decoupled = true},
      {.lr = 1e-3, .beta1 = 0.5, .beta2 = 0.99, .weight_decay = 0.01},
  };
  for (const AdamStep& s : cases)
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{513, 259}, Shape{3, 5, 7}})
      check_fused_matches_ops(s, dtype, shape, 5);
}

TEST_P(AdamFused, OptimizerStepMatchesTheOpByOpUpdateBitwise) {
  SKIP_WITHOUT_FUSED();
  // optim::Adam / AdamW end to end (state creation, per-parameter step counts, scratch):
  // parameters of odd sizes against adam_update_ops on copies.
  const DType dtype = GetParam();
  for (bool decoupled : {false, true}) {
    std::vector<Shape> shapes = {Shape{37}, Shape{301, 7}, Shape{1000003}};
    std::vector<Tensor> params;
    std::vector<State> ref;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = random_tensor(shapes[i], dtype, 7 + i);
      ref.push_back({p.clone(), zeros(shapes[i], dtype), zeros(shapes[i], dtype)});
      params.push_back(p.requires_grad_(true));
    }
    const double lr = 3e-3, wd = 0.05;
    std::unique_ptr<optim::Adam> opt;
    if (decoupled) {
      opt =
          std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = lr, .weight_decay = wd});
    } else {
      opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd});
    }
    for (int k = 1; k <= 3; ++k) {
      NoGradGuard no_grad;
      for (std::size_t i = 0; i < params.size(); ++i) {
        Tensor g = random_tensor(shapes[i], dtype, 50 * k + i);
        params[i].set_grad(g);
        AdamStep s{.lr = lr, .weight_decay = wd, .decoupled = decoupled, .step = k};
        optim::detail::adam_update_ops(ref[i].p, g, ref[i].m, ref[i].v, s, scratch);
      }
      opt->step();
      optim::StateDict sd = opt->state_dict();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string what = std::string(decoupled ? "AdamW" : "Adam") + " param " +
                                 std::to_string(i) + " step " + std::to_string(k);
        expect_bitwise(params[i].detach(), ref[i].p, what);
        for (const auto& [key, t] : sd) {
          if (key == "state." + std::to_string(i) + ".exp_avg") expect_bitwise(t, ref[i].m, what);
          if (key == "state." + std::to_string(i) + ".exp_avg_sq")
            expect_bitwise(t, ref[i].v, what);
        }
      }
    }
  }
}

TEST_P(AdamFused, StridedOperandsFallBackToTheOpByOpUpdate) {
  // A transposed parameter, a transposed exp_avg, and an expanded (stride 0) gradient: the fused
  // kernel declines and adam_update gives the op-by-op result.
  NoGradGuard no_grad;
  const DType dtype = GetParam();
  const Shape shape{37, 11};
  const AdamStep s{.lr = 0.01, .weight_decay = 0.1, .decoupled = true};
  auto transposed = [&](uint32_t seed) {
    return random_tensor(Shape{11, 37}, dtype, seed).transpose(0, 1);
  };
  for (int which = 0; which < 3; ++which) {
    State a{random_tensor(shape, dtype, 1), zeros(shape, dtype), zeros(shape, dtype)};
    Tensor g = random_tensor(shape, dtype, 2);
    if (which == 0) a.p = transposed(3);
    if (which == 1) a.m = transposed(4);
    if (which == 2) g = random_tensor(Shape{1, 11}, dtype, 5).expand(shape);
    State b = a.clone();
    for (int k = 1; k <= 3; ++k) {
      AdamStep sk = s;
      sk.step = k;
      EXPECT_FALSE(optim::detail::adam_update_fused(a.p, g, a.m, a.v, sk)) << which;
      EXPECT_FALSE(optim::detail::adam_update(a.p, g, a.m, a.v, sk, scratch)) << which;
      optim::detail::adam_update_ops(b.p, g, b.m, b.v, sk, scratch);
      const std::string what = "case " + std::to_string(which) + " step " + std::to_string(k);
      expect_bitwise(a.p, b.p, what + " param");
      expect_bitwise(a.m, b.m, what + " exp_avg");
      expect_bitwise(a.v, b.v, what + " exp_avg_sq");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamFused, ::testing::Values(DType::Float32, DType::Float64),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(AdamFusedFallback, MixedDtypesAliasingAndGradModeUseTheOpByOpUpdate) {
  const Shape shape{37};
  const AdamStep s{.lr = 0.01, .beta1 = 0.3, .weight_decay = 0.1, .step = 1};
  auto run_both = [&](State a, const Tensor& g, bool grad_mode_on, const std::string& what) {
    State b = a.clone();
    Tensor gb = g.shares_storage(a.p) ? b.p : g;  // keep the aliasing in the reference copy
    {
      NoGradGuard no_grad;
      if (grad_mode_on) {
        EnableGradGuard on;
        EXPECT_FALSE(optim::detail::adam_update_fused(a.p, g, a.m, a.v, s)) << what;
      } else {
        EXPECT_FALSE(optim::detail::adam_update(a.p, g, a.m, a.v, s, scratch)) << what;
        optim::detail::adam_update_ops(b.p, gb, b.m, b.v, s, scratch);
        expect_bitwise(a.p, b.p, what + " param");
        expect_bitwise(a.m, b.m, what + " exp_avg");
        expect_bitwise(a.v, b.v, what + " exp_avg_sq");
      }
    }
  };
  // float32 parameter and gradient with float64 moments (the in-place ops cast).
  State mixed{random_tensor(shape, DType::Float32, 1), zeros(shape, DType::Float64),
              zeros(shape, DType::Float64)};
  run_both(mixed, random_tensor(shape, DType::Float32, 2), false, "float64 moments");
  // float64 gradient for a float32 parameter.
  State f32{random_tensor(shape, DType::Float32, 1), zeros(shape, DType::Float32),
            zeros(shape, DType::Float32)};
  run_both(f32, random_tensor(shape, DType::Float64, 2), false, "float64 grad");
  // A gradient that is the parameter's own memory: the op-by-op update reads the L2 term and
  // the gradient after param changes, which one pass would not.
  State alias = initial(shape, DType::Float64);
  run_both(alias, alias.p, false, "grad aliases param");
  // Grad mode on: the in-place ops would record (or throw), so the kernel declines.
  run_both(initial(shape, DType::Float64), random_tensor(shape, DType::Float64, 2), true,
           "grad mode on");
}

}  // namespace
