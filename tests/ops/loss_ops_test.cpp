// mse_loss, binary_cross_entropy_with_logits and nll_loss as single ops (Note [Elementwise
// losses are ops] in src/ops/elementwise_losses.cpp): autocast converts their inputs in its
// layer, observers and compile see one op per loss, 16-bit inputs are computed in float32 and
// rounded once, and integer targets and mixed dtypes promote. The oracles are the losses
// written out with elementwise ops in float64, and the same op on inputs converted by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "adjoint/adjoint.h"
#include "autograd/memory_hooks.h"
#include "support/expect.h"

namespace adjoint {
namespace {

constexpr DType kBF16 = DType::BFloat16, kF32 = DType::Float32, kF64 = DType::Float64;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(kF64).to_vector<double>();
  const std::vector<double> w = want.to(kF64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << what << ", element " << i;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return abs(a.to(kF64) - b.to(kF64)).max().item<double>();
}

struct OpCounts : detail::OpObserver {
  std::multiset<std::string> seen;
  void before_forward_op(const char* op) override { seen.insert(op); }
};

// The three losses on one batch: logits x [4, 5], a target of x's shape, class indices.
struct Batch {
  Tensor x, t, classes;
  explicit Batch(DType dtype) {
    Generator g(11);
    x = randn({4, 5}, kF32, &g).to(dtype);
    t = rand({4, 5}, kF32, &g).to(dtype);
    classes = tensor(std::vector<int64_t>{0, 4, -100, 2});
  }
};

TEST(LossOps, AutocastRunsThemInFloat32InItsLayer) {
  const Batch low(kBF16);
  const Tensor log_probs = log_softmax(low.x, 1);  // bfloat16, made outside autocast
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor mse, bce, nll;
    {
      Autocast amp(kBF16);
      mse = mse_loss(low.x, low.t, r);
      bce = binary_cross_entropy_with_logits(low.x, low.t, r);
      nll = nll_loss(log_probs, low.classes, r);
    }
    // The oracle: the conversions written out, without autocast.
    const Tensor x32 = low.x.to(kF32), t32 = low.t.to(kF32);
    expect_same(mse, mse_loss(x32, t32, r), "mse_loss");
    expect_same(bce, binary_cross_entropy_with_logits(x32, t32, r), "bce_with_logits");
    expect_same(nll, nll_loss(log_probs.to(kF32), low.classes, r), "nll_loss");
  }
}

TEST(LossOps, EachLossIsOneOpForObserversAndCompile) {
  const Batch b(kF64);
  OpCounts counts;
  detail::set_op_observer(&counts);
  (void)mse_loss(b.x, b.t);
  (void)binary_cross_entropy_with_logits(b.x, b.t);
  (void)nll_loss(b.x, b.classes);
  detail::set_op_observer(nullptr);
  EXPECT_EQ(counts.seen, (std::multiset<std::string>{"mse_loss", "binary_cross_entropy_with_logits",
                                                     "nll_loss"}));

  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mse_loss(in[0], in[1]) +
                               binary_cross_entropy_with_logits(in[0], in[1], Reduction::Sum)};
  };
  auto compiled = compile(f);
  const Tensor x = b.x.clone().requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = compiled({x, b.t})[0];
    const Tensor want = f({x, b.t})[0];
    EXPECT_EQ(max_diff(got, want), 0) << "call " << call;
    EXPECT_EQ(max_diff(autograd::grad({got}, {x})[0], autograd::grad({want}, {x})[0]), 0);
  }
  const std::string graph = compiled.dump(false);
  EXPECT_NE(graph.find("= mse_loss("), std::string::npos) << graph;
  EXPECT_NE(graph.find("= binary_cross_entropy_with_logits("), std::string::npos) << graph;
}

TEST(LossOps, SixteenBitInputsAreComputedInFloat32AndRoundedOnce) {
  const Batch low(kBF16);
  const Tensor x32 = low.x.to(kF32), t32 = low.t.to(kF32);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    expect_same(mse_loss(low.x, low.t, r), mse_loss(x32, t32, r).to(kBF16), "mse_loss");
    expect_same(binary_cross_entropy_with_logits(low.x, low.t, r),
                binary_cross_entropy_with_logits(x32, t32, r).to(kBF16), "bce_with_logits");
    expect_same(nll_loss(low.x, low.classes, r), nll_loss(x32, low.classes, r).to(kBF16),
                "nll_loss");
  }
}

TEST(LossOps, ValuesAndGradientsMatchTheLossesWrittenOut) {
  const Batch b(kF64);
  const Tensor x = b.x.clone().requires_grad_(true), t = b.t.clone().requires_grad_(true);
  // mse: mean((x - t)^2); bce: mean(max(x, 0) - x t + log(1 + exp(-|x|)))
  const Tensor mse_oracle = ((x - t) * (x - t)).mean();
  const Tensor bce_oracle = (clamp(x, 0.0, std::nullopt) - x * t + log(exp(-abs(x)) + 1.0)).mean();
  for (auto [got, want] : {std::pair{mse_loss(x, t), mse_oracle},
                           std::pair{binary_cross_entropy_with_logits(x, t), bce_oracle}}) {
    EXPECT_LT(max_diff(got, want), 1e-14);
    const auto g = autograd::grad({got}, {x, t}, {}, true, true);
    const auto w = autograd::grad({want}, {x, t}, {}, true, true);
    EXPECT_LT(max_diff(g[0], w[0]), 1e-14);
    EXPECT_LT(max_diff(g[1], w[1]), 1e-14);
    // Second order through the rules: d/dx of sum(dloss/dx).
    EXPECT_LT(max_diff(autograd::grad({g[0].sum()}, {x})[0], autograd::grad({w[0].sum()}, {x})[0]),
              1e-13);
  }
}

TEST(LossOps, IntegerTargetsAndMixedDtypesPromote) {
  const Batch b(kF64);
  const Tensor ints = tensor(std::vector<int64_t>{0, 1, 1, 0, 1}).expand({4, 5}).contiguous();
  expect_same(mse_loss(b.x, ints), mse_loss(b.x, ints.to(kF64)), "mse_loss, int64 target");
  expect_same(binary_cross_entropy_with_logits(b.x, ints),
              binary_cross_entropy_with_logits(b.x, ints.to(kF64)), "bce, int64 target");

  // float32 input, float64 target: the loss in float64, the input's gradient in float32.
  const Tensor x32 = b.x.to(kF32).requires_grad_(true);
  const Tensor loss = mse_loss(x32, b.t);
  EXPECT_EQ(loss.dtype(), kF64);
  const Tensor g = autograd::grad({loss}, {x32})[0];
  EXPECT_EQ(g.dtype(), kF32);
  const Tensor x64 = x32.detach().to(kF64).requires_grad_(true);
  expect_same(g, autograd::grad({mse_loss(x64, b.t)}, {x64})[0].to(kF32), "float32 gradient");
}

TEST(LossOps, NllIgnoresRowsWhoseLogProbabilitiesAreInfinite) {
  // Row 2 is ignored and its class 0 (where the kernel reads it) is -inf: the loss stays finite.
  Tensor lp = log_softmax(randn({4, 5}, kF64), 1);
  lp = where(ne(arange(20).reshape({4, 5}), 10), lp, -std::numeric_limits<double>::infinity());
  const Tensor classes = tensor(std::vector<int64_t>{0, 4, -100, 2});
  const std::vector<double> v = lp.to_vector<double>();
  const double want = -(v[0] + v[9] + v[17]) / 3;
  EXPECT_NEAR(nll_loss(lp, classes).item<double>(), want, 1e-15);
  // Every row ignored: 0 / 0, as PyTorch.
  EXPECT_TRUE(std::isnan(nll_loss(lp, full({4}, -100, DType::Int64)).item<double>()));
}

TEST(LossOps, EmptyInputsReduceAsPyTorch) {
  const Tensor x = randn({0, 3}, kF64).requires_grad_(true), t = randn({0, 3}, kF64);
  const Tensor none_classes = tensor(std::vector<int64_t>{});
  for (const Tensor& loss :
       {mse_loss(x, t), binary_cross_entropy_with_logits(x, t), nll_loss(x, none_classes)}) {
    EXPECT_TRUE(std::isnan(loss.item<double>()));  // Mean of nothing: 0 / 0
    const Tensor g = autograd::grad({loss}, {x})[0];
    EXPECT_EQ(g.shape(), x.shape());
  }
  EXPECT_EQ(mse_loss(x, t, Reduction::Sum).item<double>(), 0);
  EXPECT_EQ(nll_loss(x, none_classes, Reduction::Sum).item<double>(), 0);
  EXPECT_EQ(binary_cross_entropy_with_logits(x, t, Reduction::None).shape(), x.shape());
}

TEST(LossOps, BadShapesNameTheLoss) {
  const Tensor x = randn({3, 4});
  adjoint::testing::expect_error(
      [&] {
        (void)mse_loss(x, randn({4, 3}));
      },
      ErrorKind::Shape, {"mse_loss", "[3, 4]", "[4, 3]", "float32"});
  adjoint::testing::expect_error([&] { (void)binary_cross_entropy_with_logits(x, randn({3})); },
                                 ErrorKind::Shape,
                                 {"binary_cross_entropy_with_logits", "[3, 4]", "[3]"});
}

}  // namespace
}  // namespace adjoint
