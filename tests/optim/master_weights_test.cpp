// Pure bfloat16 training with float32 master weights (Optimizer::keep_master_weights): the
// oracle is the same optimizer on float32 parameters fed the same gradients, whose parameters
// the master copies must equal bit for bit, with the bfloat16 parameters their rounding.
// Without master weights, updates below bfloat16's rounding step are lost.
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "support/expect.h"

using namespace adjoint;

namespace {

constexpr DType kBF16 = DType::BFloat16, kF32 = DType::Float32;

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  std::vector<double> w = want.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << "element " << i;
}

// Gradient k, exactly representable in bfloat16 so that both runs see the same values.
Tensor grad_at(int k, const Shape& shape) {
  return (sin(arange(0.0, 6.0).reshape(shape) + k) * 0.25).to(kBF16);
}

template <class Opt, class Options>
void run_both(const Options& options, int steps) {
  Generator g(5);
  const Tensor init = randn({2, 3}, kF32, &g).to(kBF16).to(kF32);  // bf16-representable start
  Tensor p16 = init.to(kBF16).requires_grad_();
  Tensor p32 = init.clone().requires_grad_();
  Opt opt16({p16}, options), opt32({p32}, options);
  opt16.keep_master_weights();
  for (int k = 0; k < steps; ++k) {
    p16.set_grad(grad_at(k, {2, 3}));
    p32.set_grad(grad_at(k, {2, 3}).to(kF32));
    opt16.step();
    opt32.step();
    ASSERT_EQ(p16.dtype(), kBF16);
    expect_same(opt16.master_weight(0), p32);
    expect_same(p16, p32.detach().to(kBF16));
  }
}

TEST(MasterWeights, AdamWOnBFloat16MatchesFloat32BitForBit) {
  run_both<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1}, 12);
}

TEST(MasterWeights, SGDWithMomentumOnBFloat16MatchesFloat32BitForBit) {
  run_both<optim::SGD>(optim::SGDOptions{.lr = 1e-3, .momentum = 0.9}, 12);
}

TEST(MasterWeights, SmallUpdatesAccumulateInsteadOfVanishing) {
  // 1 + 1e-4 rounds back to 1 in bfloat16 (its step at 1 is 2^-7): without a master copy ten
  // such updates change nothing; with one they add up to 1e-3, and the parameter moves once
  // the master has moved by half a step.
  for (bool master : {false, true}) {
    Tensor p = ones({4}, kBF16).requires_grad_();
    optim::SGD opt({p}, {.lr = 1e-4});
    if (master) opt.keep_master_weights();
    for (int k = 0; k < 50; ++k) {
      p.set_grad(full({4}, -1.0, kBF16));
      opt.step();
    }
    const double got = p.to(DType::Float64).to_vector<double>()[0];
    if (master) {
      EXPECT_NEAR(opt.master_weight(0).to(DType::Float64).to_vector<double>()[0], 1.005, 1e-6);
      EXPECT_EQ(got, 1.0078125);  // 1.005 rounded to bfloat16: 1 + 2^-7
    } else {
      EXPECT_EQ(got, 1.0) << "bfloat16 alone keeps none of the 1e-4 updates";
    }
  }
}

TEST(MasterWeights, StateDictHoldsTheMasterAndResumesExactly) {
  Tensor p = full({3}, 0.5, kBF16).requires_grad_();
  optim::Adam opt({p}, {.lr = 1e-3});
  opt.keep_master_weights();
  for (int k = 0; k < 3; ++k) {
    p.set_grad(grad_at(k, {2, 3}).reshape({6}).narrow(0, 0, 3));
    opt.step();
  }
  const optim::StateDict state = opt.state_dict();
  bool has_master = false;
  for (const auto& [key, t] : state)
    if (key == "state.0.master") has_master = t.dtype() == kF32;
  EXPECT_TRUE(has_master);

  Tensor q = p.detach().clone().requires_grad_();
  optim::Adam resumed({q}, {.lr = 1e-3});
  resumed.keep_master_weights();
  resumed.load_state_dict(state);
  for (int k = 3; k < 6; ++k) {
    const Tensor gk = grad_at(k, {2, 3}).reshape({6}).narrow(0, 0, 3);
    p.set_grad(gk);
    q.set_grad(gk.clone());
    opt.step();
    resumed.step();
  }
  expect_same(q, p);
  expect_same(resumed.master_weight(0), opt.master_weight(0));
  // Without master weights, the master entry is an unexpected key, named.
  Tensor r = p.detach().clone().requires_grad_();
  optim::Adam plain({r}, {.lr = 1e-3});
  adjoint::testing::expect_error([&] { plain.load_state_dict(state); }, ErrorKind::Value,
                                 {"optim.Adam", "state.0"});
}

}  // namespace
