// Per-example gradients of a tiny GPT with vmap: each example's gradient of its own loss with
// respect to every parameter, in one batched pass, against the loop of one backward per
// example. The parameters are the module's own tensors, captured by the function; the
// gradient inside vmap is taken with autograd::grad, as torch.func users do with
// functional_call, and each comes back with the batch in front.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

namespace adjoint {
namespace {

constexpr nn::GPTConfig kTiny{/*vocab=*/11, /*context=*/5,  /*d_model=*/8, /*heads=*/2,
                              /*layers=*/2, /*dropout=*/0.0};
constexpr int64_t kBatch = 4, kT = 5;

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  return (a - b).abs().max().item<double>();
}

TEST(VmapGpt, PerExampleGradientsEqualTheLoop) {
  Generator gen(7);
  nn::GPT model(kTiny, &gen);
  model.to(DType::Float64);
  const std::vector<Tensor> params = model.parameters();
  const Tensor tokens = randint(0, kTiny.vocab, {kBatch, kT + 1}, &gen);
  const Tensor idx = tokens.slice(1, 0, kT), targets = tokens.slice(1, 1, kT + 1);

  auto example_grads = [&](const Tensor& i, const Tensor& t) {
    const Tensor loss = model.loss(i.unsqueeze(0), t.unsqueeze(0));
    return autograd::grad({loss}, params);
  };
  const std::vector<Tensor> batched = vmap(example_grads)(idx, targets);
  ASSERT_EQ(batched.size(), params.size());
  for (int64_t b = 0; b < kBatch; ++b) {
    const std::vector<Tensor> one = example_grads(idx.select(0, b), targets.select(0, b));
    for (std::size_t p = 0; p < params.size(); ++p) {
      ASSERT_EQ(batched[p].size(0), kBatch);
      EXPECT_LT(max_diff(batched[p].select(0, b), one[p]), 1e-12)
          << model.named_parameters()[p].first << ", example " << b;
    }
  }
  // The batch mean of the per-example gradients is the gradient of the mean loss.
  const std::vector<Tensor> whole = autograd::grad({model.loss(idx, targets)}, params);
  for (std::size_t p = 0; p < params.size(); ++p)
    EXPECT_LT(max_diff(batched[p].mean({0}), whole[p]), 1e-12) << model.named_parameters()[p].first;
}

}  // namespace
}  // namespace adjoint
