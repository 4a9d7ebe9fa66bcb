// The pooling modules (include/adjoint/nn/pooling.h): each forward equals its op with the
// constructor's arguments (PyTorch's defaults: stride = kernel, Flatten from dim 1), none has
// parameters, and they compose in a Sequential with a gradient through all of them.
#include <gtest/gtest.h>

#include <memory>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

using namespace adjoint;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, DType::Float64, &gen);
}

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

}  // namespace

TEST(PoolModules, ForwardsAreTheirOps) {
  const Tensor x = randn_t({2, 3, 7, 6}, 1);
  EXPECT_EQ(values(nn::MaxPool2d({3}, {2}, {1})(x)), values(max_pool2d(x, {3}, {2}, {1})));
  EXPECT_EQ(nn::MaxPool2d({2})(x).shape(), (Shape{2, 3, 3, 3}));  // stride = kernel
  EXPECT_EQ(values(nn::MaxPool2d({2, 3}, {1}, {1}, {2}, true)(x)),
            values(max_pool2d(x, {2, 3}, {1}, {1}, {2}, true)));
  EXPECT_EQ(values(nn::AvgPool2d({3}, {2}, {1}, true, false, 4)(x)),
            values(avg_pool2d(x, {3}, {2}, {1}, true, false, 4)));
  EXPECT_EQ(values(nn::AdaptiveAvgPool2d({3, 2})(x)), values(adaptive_avg_pool2d(x, {3, 2})));
  const std::vector<double> global = values(nn::AdaptiveAvgPool2d({1})(x));
  const std::vector<double> means = values(mean(x, {2, 3}, true));  // summed in another order
  ASSERT_EQ(global.size(), means.size());
  for (std::size_t i = 0; i < means.size(); ++i) EXPECT_NEAR(global[i], means[i], 1e-15) << i;
  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 3 * 7 * 6}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).shape(), (Shape{6, 7, 6}));
  InterpolateOptions o;
  o.scale_factor = {2};
  o.mode = InterpolateMode::Bilinear;
  o.align_corners = false;
  EXPECT_EQ(values(nn::Upsample(o)(x)), values(interpolate(x, o)));
  for (auto m : std::vector<std::shared_ptr<nn::Module>>{
           std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{2}),
           std::make_shared<nn::AvgPool2d>(std::vector<int64_t>{2}),
           std::make_shared<nn::AdaptiveAvgPool2d>(std::vector<int64_t>{1}),
           std::make_shared<nn::Flatten>(), std::make_shared<nn::Upsample>(o)})
    EXPECT_TRUE(m->parameters().empty()) << m->type_name();
}

TEST(PoolModules, SequentialGradient) {
  // pool, flatten and a linear layer: the input gradient against the same ops called directly.
  Generator gen(3);
  auto lin = std::make_shared<nn::Linear>(3 * 2 * 2, 4, true, &gen);
  lin->to(DType::Float64);
  nn::Sequential net({std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{2}),
                      std::make_shared<nn::AdaptiveAvgPool2d>(std::vector<int64_t>{2}),
                      std::make_shared<nn::Flatten>(), lin});
  const Tensor x = randn_t({2, 3, 8, 9}, 4).requires_grad_(true);
  const Tensor g = autograd::grad({net(x).square().sum()}, {x})[0];
  const Tensor direct =
      linear(flatten(adaptive_avg_pool2d(max_pool2d(x, {2}), {2}), 1), lin->weight, lin->bias);
  const Tensor want = autograd::grad({direct.square().sum()}, {x})[0];
  EXPECT_EQ(values(g), values(want));
  EXPECT_EQ(net(x).shape(), (Shape{2, 4}));
}
