// The product recorder on the kernel table (src/backend/product_recorder.h), which the
// benchmark's gemm bound reads: every product and convolution a forward and backward call is
// seen once, with its operands; with the recorder off, nothing is recorded, not even the
// recorded calls run again (as the gemm bound runs them).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/product_recorder.h"
#include "support/expect.h"

namespace {

using namespace adjoint;

struct Recorded : kernels::ProductRecorder {
  void record(const char* kind, std::initializer_list<const Tensor*> operands, const std::string&,
              std::function<void()> again) override {
    ++count[kind];
    shapes.emplace_back();
    for (const Tensor* t : operands) shapes.back().push_back(t->defined() ? t->shape() : Shape{});
    runs.push_back(std::move(again));
  }
  std::map<std::string, int> count;
  std::vector<std::vector<Shape>> shapes;
  std::vector<std::function<void()>> runs;
};

struct Scope {
  explicit Scope(kernels::ProductRecorder* r) { kernels::tls_product_recorder = r; }
  ~Scope() { kernels::tls_product_recorder = nullptr; }
};

TEST(ProductRecorder, SeesEveryProductOfAForwardAndBackward) {
  Generator g(1);
  const Tensor x = randn({4, 3}, DType::Float64, &g);  // needs no gradient
  const Tensor w1 = randn({5, 3}, DType::Float64, &g).requires_grad_(true);
  const Tensor w2 = randn({2, 5}, DType::Float64, &g).requires_grad_(true);
  Recorded r;
  {
    Scope on(&r);
    linear(linear(x, w1), w2).sum().backward();
  }
  // Forward: two linear layers. Backward: the second layer's input gradient and weight
  // gradient, the first layer's weight gradient only (x needs none): 5 products.
  int total = 0;
  for (const auto& [kind, n] : r.count) total += n;
  EXPECT_EQ(total, 5);
  EXPECT_EQ(r.count["linear"], 2);
  EXPECT_EQ(r.shapes[0], (std::vector<Shape>{{4, 3}, {5, 3}, {}}));
  // Off, nothing is recorded, not even the recorded calls run again.
  const std::size_t recorded = r.runs.size();
  (void)linear(x, w1.detach());
  for (const auto& run : r.runs) run();
  EXPECT_EQ(r.runs.size(), recorded);
}

TEST(ProductRecorder, SeesTheThreeConvolutionKernels) {
  Generator g(2);
  const Tensor x = randn({2, 3, 8, 8}, DType::Float32, &g).requires_grad_(true);
  const Tensor w = randn({4, 3, 3, 3}, DType::Float32, &g).requires_grad_(true);
  Recorded r;
  {
    Scope on(&r);
    conv2d(x, w, {}, 1, 1).sum().backward();
  }
  EXPECT_EQ(r.count["conv_forward"], 1);
  EXPECT_EQ(r.count["conv_backward_data"], 1);
  EXPECT_EQ(r.count["conv_backward_weight"], 1);
}

}  // namespace
