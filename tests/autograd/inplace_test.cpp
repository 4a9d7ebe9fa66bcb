// In-place ops and autograd: version counters, the saved-tensor version check and its
// message, the leaf rule (and the NoGradGuard escape hatch for optimizer steps), versions
// shared through views, and differentiating through in-place ops on non-leaves.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

// ---- version counter ----

TEST(Inplace, VersionBumpsOncePerOp) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64);
  EXPECT_EQ(x.version(), 0u);
  x.add_(1);
  EXPECT_EQ(x.version(), 1u);
  expect_values(x, {2, 3});
  x.add_(tensor({1.0, -1.0}, DType::Float64));
  EXPECT_EQ(x.version(), 2u);
  expect_values(x, {3, 2});
  x.mul_(2);
  EXPECT_EQ(x.version(), 3u);
  expect_values(x, {6, 4});
  x.mul_(tensor({0.5, 0.25}, DType::Float64));
  EXPECT_EQ(x.version(), 4u);
  expect_values(x, {3, 1});
  x.sub_(1);
  EXPECT_EQ(x.version(), 5u);
  x.div_(2);
  EXPECT_EQ(x.version(), 6u);
  expect_values(x, {1, 0});
  x.zero_();
  EXPECT_EQ(x.version(), 7u);
  expect_values(x, {0, 0});
  x.fill_(4.5);
  EXPECT_EQ(x.version(), 8u);
  expect_values(x, {4.5, 4.5});
  x.copy_(tensor({7.0, 8.0}, DType::Float64));
  EXPECT_EQ(x.version(), 9u);
  expect_values(x, {7, 8});
  x += 1;
  EXPECT_EQ(x.version(), 10u);
  expect_values(x, {8, 9});
}

TEST(Inplace, OutOfPlaceOpsDoNotBumpVersion) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64);
  Tensor y = x * 2 + x.exp();
  (void)y;
  EXPECT_EQ(x.version(), 0u);
}

TEST(Inplace, CopyBroadcastsAndCasts) {
  Tensor x = zeros({2, 3}, DType::Float64);
  x.copy_(tensor({1.0, 2.0, 3.0}, DType::Float32));
  EXPECT_EQ(x.dtype(), DType::Float64);
  expect_values(x, {1, 2, 3, 1, 2, 3});
  EXPECT_EQ(x.version(), 1u);
}

// ---- modifying a saved tensor ----

TEST(Inplace, ModifyingSavedOutputThrowsAtBackward) {
  Tensor x = tensor({0.1, 0.2, 0.3}, f64_grad());
  Tensor y = x.exp();  // ExpBackward saves y
  y.add_(1);           // allowed now, detected at backward
  std::string msg = error_message([&] { y.sum().backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "ExpBackward")) << msg;
  EXPECT_TRUE(contains(msg, "version")) << msg;
  EXPECT_TRUE(contains(msg, "[3]")) << msg;  // the tensor's shape
  EXPECT_TRUE(contains(msg, "0")) << msg;    // saved at version 0
  EXPECT_TRUE(contains(msg, "version 0")) << msg;
  EXPECT_TRUE(contains(msg, "version 1")) << msg;
  EXPECT_FALSE(x.grad().defined());
}

TEST(Inplace, ModifyingSavedInputThrowsAtBackward) {
  Tensor x = tensor({0.1, 0.2}, f64_grad());
  Tensor a = x * 1;    // non-leaf
  Tensor s = a.sin();  // SinBackward saves a
  a.mul_(2);
  a.mul_(2);  // two in-place ops: now at version 2
  std::string msg = error_message([&] { s.sum().backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "SinBackward")) << msg;
  EXPECT_TRUE(contains(msg, "[2]")) << msg;
  EXPECT_TRUE(contains(msg, "version 0")) << msg;
  EXPECT_TRUE(contains(msg, "version 2")) << msg;
}

TEST(Inplace, ModifyingSavedInputOfMulThroughNoGradThrows) {
  // Even under NoGradGuard, modifying a leaf that a node saved invalidates that node.
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor w = tensor({3.0, 4.0}, f64_grad());
  Tensor y = (x * w).sum();
  {
    NoGradGuard no_grad;
    w.add_(1);
  }
  std::string msg = error_message([&] { y.backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "MulBackward")) << msg;
}

TEST(Inplace, ModifyingBeforeSavingIsFine) {
  // The check compares with the version at save time: y = 2x, then sin(y) saves version 1.
  std::vector<double> xv = {0.3, -0.8};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor y = x * 1;
  y.mul_(2);
  Tensor z = y.sin();
  z.sum().backward();
  // d/dx sin(2x) = 2 cos(2x)
  expect_values(x.grad(), {2 * std::cos(2 * xv[0]), 2 * std::cos(2 * xv[1])});
}

TEST(Inplace, ModifyingUnsavedTensorIsFine) {
  // add saves nothing, so modifying its input afterwards is harmless.
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor a = x * 1;
  Tensor y = a + 5;
  a.mul_(3);
  y.sum().backward();
  expect_values(x.grad(), {1, 1});
}

// ---- leaves ----

TEST(Inplace, InPlaceOnLeafRequiringGradThrows) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  std::string msg = error_message([&] { x.add_(1); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "[add_]")) << msg;
  EXPECT_TRUE(contains(msg, "leaf")) << msg;
  EXPECT_EQ(x.version(), 0u);  // nothing was written
  expect_values(x, {1, 2});
  error_message([&] { x.mul_(2); }, ErrorKind::Autograd);
  error_message([&] { x.zero_(); }, ErrorKind::Autograd);
  error_message([&] { x.fill_(1); }, ErrorKind::Autograd);
  error_message([&] { x.copy_(tensor({5.0, 6.0}, DType::Float64)); }, ErrorKind::Autograd);
  expect_values(x, {1, 2});
}

TEST(Inplace, InPlaceOnLeafAllowedUnderNoGrad) {
  // An SGD step: w -= lr * grad, then a fresh forward and backward.
  Tensor w = tensor({1.0, -2.0}, f64_grad());
  (w * w).sum().backward();  // grad = 2w = [2, -4]
  {
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
    w.grad().zero_();
  }
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
  EXPECT_EQ(w.version(), 1u);
  expect_values(w, {0.8, -1.6});
  (w * w).sum().backward();
  expect_values(w.grad(), {1.6, -3.2});
}

// ---- views share the version counter ----

TEST(Inplace, InPlaceThroughUnsqueezeViewBumpsBase) {
  Tensor base = zeros({2, 3}, DType::Float64);
  Tensor v = base.unsqueeze(0);
  ASSERT_TRUE(v.shares_storage(base));
  v.add_(1);
  EXPECT_EQ(base.version(), 1u);
  EXPECT_EQ(v.version(), 1u);
  expect_values(base, {1, 1, 1, 1, 1, 1});
}

TEST(Inplace, InPlaceThroughTransposeViewBumpsBase) {
  Tensor base = tensor({0.0, 1.0, 2.0, 3.0, 4.0, 5.0}, Shape{2, 3}, DType::Float64);
  Tensor t = base.transpose(0, 1);  // [3, 2], non-contiguous
  ASSERT_TRUE(t.shares_storage(base));
  EXPECT_FALSE(t.is_contiguous());
  // t[j][i] += 10 * (2 j + i), i.e. base[i][j] += 10 * (2 j + i).
  t.add_(tensor({0.0, 10.0, 20.0, 30.0, 40.0, 50.0}, Shape{3, 2}, DType::Float64));
  EXPECT_EQ(base.version(), 1u);
  std::vector<double> want(6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = (i * 3 + j) + 10.0 * (2 * j + i);
  expect_values(base, want);
}

TEST(Inplace, InPlaceThroughReshapeViewBumpsBase) {
  Tensor base = zeros({2, 3}, DType::Float64);
  Tensor flat = base.reshape({6});  // contiguous: a view, not a copy
  ASSERT_TRUE(flat.shares_storage(base));
  flat.fill_(3);
  EXPECT_EQ(base.version(), 1u);
  expect_values(base, {3, 3, 3, 3, 3, 3});
  base.view({3, 2}).mul_(2);
  EXPECT_EQ(flat.version(), 2u);
  expect_values(flat, {6, 6, 6, 6, 6, 6});
}

TEST(Inplace, InPlaceThroughExpandViewBumpsBase) {
  Tensor base = zeros({1, 3}, DType::Float64);
  Tensor e = base.expand({4, 3});
  ASSERT_TRUE(e.shares_storage(base));
  e.fill_(2);  // idempotent, so allowed on an expanded view (as in PyTorch)
  EXPECT_EQ(base.version(), 1u);
  expect_values(base, {2, 2, 2});
}

TEST(Inplace, InPlaceThroughViewIsSeenByNodeThatSavedBase) {
  Tensor x = tensor({0.5, 1.0}, f64_grad());
  Tensor y = x.exp();  // saves y
  {
    NoGradGuard no_grad;
    y.unsqueeze(0).mul_(2);
  }
  std::string msg = error_message([&] { y.sum().backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "ExpBackward")) << msg;
}

// ---- differentiating through in-place ops ----

TEST(Inplace, InPlaceOnNonLeafIsDifferentiable) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64_grad());
  Tensor y = x * 2;
  y.mul_(3);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward");
  expect_values(y, {6, 12, 18});
  y.sum().backward();
  expect_values(x.grad(), {6, 6, 6});
}

TEST(Inplace, ChainOfInPlaceOpsOnNonLeaf) {
  // y = ((x * 1) + x) * 3 - 1, all in place: dy/dx = 6.
  Tensor x = tensor({1.0, -1.0}, f64_grad());
  Tensor y = x * 1;
  y.add_(x);
  y.mul_(3);
  y.sub_(1);
  expect_values(y, {5, -7});
  y.sum().backward();
  expect_values(x.grad(), {6, 6});
}

TEST(Inplace, MulByTensorThatRequiresGrad) {
  std::vector<double> xv = {1.0, 2.0}, wv = {-3.0, 0.5};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor w = tensor(wv, std::nullopt, f64_grad());
  Tensor y = x * 1;
  y.mul_(w);
  y.sum().backward();
  expect_values(x.grad(), wv);  // d(xw)/dx = w
  expect_values(w.grad(), xv);  // d(xw)/dw = x
}

TEST(Inplace, InPlaceIntoLeafThatDoesNotRequireGrad) {
  // A buffer that does not require grad takes on history from the other operand.
  Tensor w = tensor({2.0, 3.0}, f64_grad());
  Tensor buf = tensor({5.0, 7.0}, DType::Float64);
  buf.mul_(w);
  EXPECT_TRUE(buf.requires_grad());
  EXPECT_FALSE(buf.is_leaf());
  expect_values(buf, {10, 21});
  buf.sum().backward();
  expect_values(w.grad(), {5, 7});  // the old buffer values
}

TEST(Inplace, CopyIntoBufferPropagatesGradient) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor buf = zeros({2}, DType::Float64);
  buf.copy_(x * 4);
  EXPECT_TRUE(buf.requires_grad());
  buf.sum().backward();
  expect_values(x.grad(), {4, 4});
}

TEST(Inplace, OverwriteCutsGradientToOldValue) {
  // fill_ replaces the value: nothing flows to what was there before.
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 3;
  y.fill_(1);
  Tensor z = (y * x).sum();  // dz/dx = y = 1, nothing through the old y
  z.backward();
  expect_values(x.grad(), {1, 1});
}

TEST(Inplace, ExpandedTensorsRefuseArithmeticInPlaceAndFillEachLocationOnce) {
  // Found by fuzz_ops: clamp_ on a [1, 2^40] expand wrote one float 2^40 times (a hang). As
  // PyTorch, in-place ops that read the old values refuse a tensor whose elements share
  // memory; fill_ (idempotent) writes each memory location once.
  Tensor base = full({1, 1}, 2.5);
  Tensor big = base.expand({1, 1LL << 40});
  for (const auto& [what, op] : std::vector<std::pair<const char*, std::function<void()>>>{
           {"clamp_", [&] { big.clamp_(0.0, 1.0); }},
           {"add_", [&] { big.add_(1.0); }},
           {"mul_", [&] { big.mul_(full({1}, 2.0)); }},
           {"copy_", [&] { big.copy_(full({1}, 2.0)); }}})
    expect_error(op, ErrorKind::Value, {what, "share one memory location", "clone()"});
  EXPECT_EQ(base.item<float>(), 2.5f);  // nothing was written
  big.fill_(4.0);
  EXPECT_EQ(base.item<float>(), 4.0f);
  // A small expand: the same refusal, and the clone the message suggests works.
  Tensor row = full({3}, 1.0).expand({2, 3});
  expect_error([&] { row.add_(1.0); }, ErrorKind::Value, {"add_"});
  Tensor copy = row.clone();
  copy.add_(1.0);
  EXPECT_EQ(copy.to_vector<float>(), std::vector<float>(6, 2.0f));
}

namespace {
bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}
}  // namespace

// Note [Operands that overlap the written tensor]: an operand sharing memory with the tensor
// being written, other than element for element, is read as it was before the write, with or
// without a graph being recorded. The oracle: the same op on a clone of the operand.
TEST(Inplace, AnOperandOverlappingTheWrittenTensorIsReadBeforeTheWrite) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (bool record : {false, true}) {
      auto fresh = [&] {
        Tensor t = (arange(0, 24, 1, dtype) * 0.5 + 1.0).reshape({4, 6}).contiguous();
        return record ? (t.detach().requires_grad_(true) * 1.0) : t;  // a non-leaf in a graph
      };
      const std::string what = std::string(to_string(dtype)) + (record ? " recorded" : "");
      auto check = [&](const char* name, auto op) {
        Tensor a = fresh(), b = fresh();
        op(a, [](const Tensor& x) { return x; });
        op(b, [](const Tensor& x) { return x.detach().clone(); });
        EXPECT_TRUE(same_values(a.detach(), b.detach())) << name << " " << what;
      };
      check("shifted add_", [](Tensor& a, auto read) {
        Tensor flat = a.view({24});
        flat.slice(0, 1, 24).add_(read(flat.slice(0, 0, 23)));
      });
      check("shifted sub_ with alpha", [](Tensor& a, auto read) {
        Tensor flat = a.view({24});
        flat.slice(0, 0, 23).sub_(read(flat.slice(0, 1, 24)), 2.0);
      });
      check("row broadcast mul_", [](Tensor& a, auto read) { a.mul_(read(a.select(0, 0))); });
      check("shifted copy_", [](Tensor& a, auto read) {
        Tensor flat = a.view({24});
        flat.slice(0, 1, 24).copy_(read(flat.slice(0, 0, 23)));
      });
      check("square transpose div_", [](Tensor& a, auto read) {
        Tensor sq = a.view({24}).slice(0, 0, 16).view({4, 4});
        sq.div_(read(sq.t()));
      });
    }
  }
  // Its own elements in its own layout are read in place, as before.
  Tensor x = arange(1, 7, 1, DType::Float64);
  const Tensor want = x * x;
  x.mul_(x);
  EXPECT_TRUE(same_values(x, want));
}
