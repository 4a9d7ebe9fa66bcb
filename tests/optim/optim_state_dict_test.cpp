// Optimizer state dicts: the names, dtypes and shapes of the entries, snapshots, a round trip
// into a fresh optimizer that then continues bit-identically, restored hyper-parameters, and
// loads that must fail without changing anything.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>

#include "optim/optim_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::optim_test;
using adjoint::testing::expect_error;

namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<Tensor> make_params() {
  return {param({0.5, -1.0, 2.0, 0.25}, Shape{2, 2}), param({1.5}), param({-0.5, 0.75})};
}

std::vector<Tensor> copies(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Gradients from the current values; parameter 2 gets none on odd steps, so per-parameter
// state differs from the global step count.
void feed(const std::vector<Tensor>& ps, int step) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i == 2 && step % 2 == 1) {
      ps[i].zero_grad();
      continue;
    }
    set_grad(ps[i], test_grad(ps[i].to_vector<double>()));
  }
}

std::map<std::string, Tensor> by_name(const optim::StateDict& sd) {
  std::map<std::string, Tensor> m;
  for (const auto& [k, v] : sd) m[k] = v;
  return m;
}

void check_round_trip(const MakeOpt& make) {
  std::vector<Tensor> pa = make_params();
  auto a = make(pa);
  for (int s = 0; s < 3; ++s) {
    feed(pa, s);
    a->step();
  }
  const optim::StateDict sd = a->state_dict();
  std::vector<Tensor> pb = copies(pa);
  auto b = make(pb);
  b->set_lr(99);  // overwritten by the load
  b->load_state_dict(sd);
  EXPECT_EQ(b->step_count(), 3);
  EXPECT_EQ(b->lr(), a->lr());
  for (int s = 3; s < 7; ++s) {
    feed(pa, s);
    feed(pb, s);
    a->step();
    b->step();
  }
  for (std::size_t i = 0; i < pa.size(); ++i) expect_identical(pb[i], pa[i]);
  auto sa = by_name(a->state_dict()), sb = by_name(b->state_dict());
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [k, v] : sa) {
    ASSERT_TRUE(sb.count(k)) << k;
    expect_identical(sb[k], v);
  }
}

}  // namespace

TEST(StateDict, SGDEntries) {
  std::vector<Tensor> ps = make_params();
  optim::SGD opt(ps, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  feed(ps, 1);  // parameter 2 has no gradient
  opt.step();
  auto sd = by_name(opt.state_dict());
  ASSERT_TRUE(sd.count("step"));
  EXPECT_EQ(sd["step"].dtype(), DType::Int64);
  EXPECT_EQ(sd["step"].dim(), 0);
  EXPECT_EQ(sd["step"].item<int64_t>(), 1);
  EXPECT_EQ(sd["hparams.lr"].dtype(), DType::Float64);
  EXPECT_EQ(sd["hparams.lr"].item<double>(), 0.1);
  EXPECT_EQ(sd["hparams.momentum"].item<double>(), 0.9);
  EXPECT_EQ(sd["hparams.dampening"].item<double>(), 0.0);
  EXPECT_EQ(sd["hparams.weight_decay"].item<double>(), 0.0);
  EXPECT_EQ(sd["hparams.nesterov"].dtype(), DType::Bool);
  EXPECT_TRUE(sd["hparams.nesterov"].item<bool>());
  EXPECT_EQ(sd["state.0.momentum_buffer"].shape(), (Shape{2, 2}));
  EXPECT_TRUE(sd.count("state.1.momentum_buffer"));
  EXPECT_FALSE(sd.count("state.2.momentum_buffer"));
  EXPECT_EQ(sd.size(), 8u);
}

TEST(StateDict, AdamEntries) {
  std::vector<Tensor> ps = make_params();
  optim::AdamW opt(ps, {.lr = 0.01, .beta1 = 0.8, .weight_decay = 0.1});
  feed(ps, 0);
  opt.step();
  auto sd = by_name(opt.state_dict());
  for (const char* k : {"beta1", "beta2", "eps", "weight_decay"})
    EXPECT_EQ(sd["hparams." + std::string(k)].dtype(), DType::Float64) << k;
  EXPECT_EQ(sd["hparams.beta1"].item<double>(), 0.8);
  EXPECT_TRUE(sd["hparams.decoupled_weight_decay"].item<bool>());
  for (int i = 0; i < 3; ++i) {
    const std::string pre = "state." + std::to_string(i) + ".";
    EXPECT_EQ(sd[pre + "step"].item<int64_t>(), 1);
    EXPECT_EQ(sd[pre + "exp_avg"].shape(), ps[i].shape());
    EXPECT_EQ(sd[pre + "exp_avg_sq"].dtype(), DType::Float64);
  }
}

TEST(StateDict, IsASnapshot) {
  std::vector<Tensor> ps = make_params();
  optim::Adam opt(ps, {});
  feed(ps, 0);
  opt.step();
  optim::StateDict sd = opt.state_dict();
  const std::vector<double> m = by_name(sd)["state.0.exp_avg"].to_vector<double>();
  feed(ps, 0);
  opt.step();
  EXPECT_EQ(by_name(sd)["state.0.exp_avg"].to_vector<double>(), m);
  EXPECT_EQ(by_name(sd)["step"].item<int64_t>(), 1);
}

TEST(StateDict, RoundTripContinuesBitIdentically) {
  check_round_trip([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.05});
  });
  check_round_trip([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(
        std::move(p),
        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01});
  });
  check_round_trip([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p),
                                         optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  });
  check_round_trip([](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.01});
  });
}

TEST(StateDict, RestoresHyperParameters) {
  std::vector<Tensor> ps = make_params();
  optim::Adam a(ps, {.lr = 0.003, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.2});
  optim::Adam b(copies(ps), {});
  b.load_state_dict(a.state_dict());
  const optim::AdamOptions o = b.options();
  EXPECT_EQ(o.lr, 0.003);
  EXPECT_EQ(o.beta1, 0.5);
  EXPECT_EQ(o.beta2, 0.9);
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.weight_decay, 0.2);
}

TEST(StateDict, BadLoadsChangeNothing) {
  std::vector<Tensor> ps = make_params();
  optim::Adam adam(ps, {.lr = 0.01});
  feed(ps, 0);
  adam.step();
  const optim::StateDict good = adam.state_dict();

  std::vector<Tensor> qs = copies(ps);
  optim::Adam target(qs, {.lr = 0.5});
  auto unchanged = [&] {
    EXPECT_EQ(target.lr(), 0.5);
    EXPECT_EQ(target.step_count(), 0);
    EXPECT_EQ(target.state_dict().size(), 7u);  // step, 6 hparams, no per-parameter state
  };

  // Another optimizer's state dict.
  optim::SGD sgd(copies(ps), {.lr = 0.1, .momentum = 0.9});
  expect_error([&] { target.load_state_dict(sgd.state_dict()); }, ErrorKind::Value,
               {"[optim.Adam]", "load_state_dict", "hparams.beta1", "missing"});
  unchanged();
  // Adam into AdamW.
  optim::AdamW adamw(copies(ps), {});
  expect_error([&] { adamw.load_state_dict(good); }, ErrorKind::Value,
               {"[optim.AdamW]", "optim.Adam"});
  // An unknown key.
  optim::StateDict extra = good;
  extra.emplace_back("state.7.exp_avg", zeros({1}, DType::Float64));
  expect_error([&] { target.load_state_dict(extra); }, ErrorKind::Value,
               {"[optim.Adam]", "'state.7.exp_avg'", "not an entry"});
  unchanged();
  // A state of the wrong shape (parameters in another order).
  optim::Adam reordered({qs[1], qs[0], qs[2]}, {});
  expect_error([&] { reordered.load_state_dict(good); }, ErrorKind::Value,
               {"[optim.Adam]", "state.0.exp_avg", "[2, 2]", "[1]"});
  // Wrong dtypes and duplicates.
  optim::StateDict bad = good;
  for (auto& [k, v] : bad)
    if (k == "step") v = scalar_tensor(1.0, DType::Float64);
  expect_error([&] { target.load_state_dict(bad); }, ErrorKind::Value,
               {"[optim.Adam]", "'step'", "int64"});
  bad = good;
  bad.push_back(good[0]);
  expect_error([&] { target.load_state_dict(bad); }, ErrorKind::Value,
               {"[optim.Adam]", "'step'", "twice"});
  // Bad hyper-parameter values.
  bad = good;
  for (auto& [k, v] : bad)
    if (k == "hparams.beta2") v = scalar_tensor(1.5, DType::Float64);
  expect_error([&] { target.load_state_dict(bad); }, ErrorKind::Value,
               {"[optim.Adam]", "betas", "1.5"});
  // Missing moments.
  bad.clear();
  for (const auto& [k, v] : good)
    if (k != "state.1.exp_avg_sq") bad.emplace_back(k, v);
  expect_error([&] { target.load_state_dict(bad); }, ErrorKind::Value,
               {"[optim.Adam]", "state.1.", "missing"});
  unchanged();
  target.load_state_dict(good);
  EXPECT_EQ(target.step_count(), 1);
}
