// matmul, linear and dot promote inside the op (Note [Products promote inside the op] in
// src/ops/linalg.cpp): mixed-dtype operands give what the promoted operands give, bit for bit,
// with each gradient in its input's dtype, in forward mode and under vmap; and the Autocast
// layer sees the caller's dtypes. The oracle is the same product with the casts written out.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "autograd/memory_hooks.h"

using namespace adjoint;

namespace {

constexpr DType kF32 = DType::Float32, kF64 = DType::Float64, kBF16 = DType::BFloat16;

Tensor rnd(const Shape& s, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(s, kF64, &g).to(dtype).requires_grad_(true);
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(kF64).to_vector<double>(),
                            w = want.to(kF64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << what << " at " << i;
}

// f on mixed operands against f on the operands cast to `common` by hand: the value, and the
// gradients of every operand (each in its own dtype).
template <class F>
void expect_promotes(F f, const std::vector<Tensor>& xs, DType common, const std::string& what) {
  const Tensor y = f(xs);
  std::vector<Tensor> cast;
  for (const Tensor& x : xs) cast.push_back(x.to(common));
  const Tensor want = f(cast);
  expect_same(y, want, what + ": value");
  const std::vector<Tensor> got = autograd::grad({y.sum()}, xs);
  const std::vector<Tensor> oracle = autograd::grad({want.sum()}, xs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), xs[i].dtype()) << what << ": gradient " << i;
    expect_same(got[i], oracle[i], what + ": gradient " + std::to_string(i));
  }
}

TEST(ProductPromotion, MixedOperandsGiveThePromotedProductAndGradientsInTheirOwnDtypes) {
  using V = std::vector<Tensor>;
  auto mm = [](const V& x) { return matmul(x[0], x[1]); };
  expect_promotes(mm, {rnd({3, 4}, kF32, 1), rnd({4, 5}, kF64, 2)}, kF64, "matmul 2-d");
  expect_promotes(mm, {rnd({2, 3, 4}, kF64, 3), rnd({4, 5}, kF32, 4)}, kF64, "matmul folded");
  expect_promotes(mm, {rnd({2, 1, 3, 4}, kF32, 5), rnd({5, 4, 2}, kF64, 6)}, kF64,
                  "matmul broadcast batch");
  expect_promotes(mm, {rnd({4}, kBF16, 7), rnd({4, 3}, kF32, 8)}, kF32, "matmul vector");
  expect_promotes(mm, {rnd({4}, kF32, 9), rnd({4}, kF64, 10)}, kF64, "matmul 1-d by 1-d");
  auto lin = [](const V& x) { return linear(x[0], x[1], x[2]); };
  expect_promotes(lin, {rnd({2, 3, 4}, kBF16, 11), rnd({5, 4}, kF32, 12), rnd({5}, kF64, 13)}, kF64,
                  "linear, three dtypes");
  expect_promotes([](const V& x) { return linear(x[0], x[1]); },
                  {rnd({3, 4}, kF64, 14), rnd({5, 4}, kF32, 15)}, kF64, "linear without bias");
  expect_promotes([](const V& x) { return dot(x[0], x[1]); },
                  {rnd({6}, kF32, 16), rnd({6}, kF64, 17)}, kF64, "dot");
}

TEST(ProductPromotion, ForwardModeAndVmapOfMixedOperands) {
  const Tensor a = rnd({3, 4}, kF32, 21).detach(), w = rnd({5, 4}, kF64, 22).detach();
  const Tensor b = rnd({5}, kF32, 23).detach();
  // The tangent of linear in the bias alone is the bias's, in the output's dtype.
  const auto r = jvp([&](const Tensor& bias) { return linear(a, w, bias); }, b, ones({5}, kF32));
  EXPECT_EQ(r.tangents.dtype(), kF64);
  expect_same(r.tangents, ones({3, 5}, kF64), "jvp in the bias");
  const auto ra = jvp([&](const Tensor& x) { return matmul(x, w.t()); }, a, ones({3, 4}, kF32));
  expect_same(ra.tangents, matmul(ones({3, 4}, kF64), w.t()), "jvp of matmul");
  // vmap over a float32 batch against a float64 weight: the loop is the oracle.
  const Tensor xs = rnd({6, 4}, kF32, 24).detach();
  const Tensor batched = vmap([&](const Tensor& x) { return linear(x, w, b); })(xs);
  for (int64_t i = 0; i < 6; ++i)
    expect_same(batched.select(0, i), linear(xs.select(0, i), w, b),
                "vmap row " + std::to_string(i));
}

struct InputDtypes : detail::OpObserver {
  std::vector<std::string> seen;
  void before_forward_op(const char* op) override { seen.push_back(op); }
};

TEST(ProductPromotion, AutocastSeesTheCallersDtypesInItsLayer) {
  // A bfloat16 activation beside float32 parameters: the layer lowers the parameters to
  // bfloat16, so the product runs in bfloat16, bitwise the casts written out (not float32 and
  // back, which promotion before the layer would make of it).
  const Tensor x = rnd({3, 4}, kBF16, 31), w = rnd({5, 4}, kF32, 32), b = rnd({5}, kF32, 33);
  Tensor y, wg;
  {
    Autocast amp(kBF16);
    y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), kBF16);
    wg = autograd::grad({y.to(kF32).sum()}, {w})[0];
  }
  const Tensor want = linear(x, w.to(kBF16), b.to(kBF16));
  expect_same(y, want, "linear under autocast");
  EXPECT_EQ(wg.dtype(), kF32);
  expect_same(wg, autograd::grad({want.to(kF32).sum()}, {w})[0], "the weight's gradient");
  // The casts come from the Autocast layer: below it, the observer sees the two parameter
  // casts and the product, and no cast of the activation.
  InputDtypes ops;
  {
    Autocast amp(kBF16);
    detail::set_op_observer(&ops);
    (void)matmul(x, w.t().detach());
    detail::set_op_observer(nullptr);
  }
  int casts = 0;
  for (const std::string& op : ops.seen) casts += op == "to";
  EXPECT_EQ(casts, 1);  // the float32 weight; the bfloat16 activation stays as it is
  EXPECT_EQ(ops.seen.back(), "matmul");
}

}  // namespace
