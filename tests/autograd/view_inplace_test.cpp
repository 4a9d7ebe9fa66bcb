// Views and in-place ops (Note [Views and in-place ops] in src/autograd/view_tracking.h): a view
// sees in-place changes of its base, and an in-place op on a view while recording changes its
// base's history. Oracles: hand-derived gradients, and central finite differences of the same
// in-place program in float64 (first and second order).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

using Program = std::function<Tensor(const Tensor&)>;  // scalar output

// d f / d x by central differences, f run without recording.
std::vector<double> numeric_grad(const Program& f, const Tensor& x, double h = 1e-6) {
  std::vector<double> base = x.to_vector<double>(), g(base.size());
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < base.size(); ++i) {
    std::vector<double> p = base, m = base;
    p[i] += h;
    m[i] -= h;
    g[i] = (f(tensor(p, x.shape(), DType::Float64)).item<double>() -
            f(tensor(m, x.shape(), DType::Float64)).item<double>()) /
           (2 * h);
  }
  return g;
}

std::vector<double> autograd_grad(const Program& f, const std::vector<double>& at,
                                  const Shape& shape) {
  Tensor x = tensor(at, shape, f64_grad());
  f(x).backward();
  return x.grad().to_vector<double>();
}

void expect_grad_matches_differences(const Program& f, const std::vector<double>& at,
                                     const Shape& shape) {
  const Tensor x = tensor(at, shape, DType::Float64);
  std::vector<double> want = numeric_grad(f, x);
  expect_values(tensor(autograd_grad(f, at, shape), shape, DType::Float64), want, 1e-6);
}

}  // namespace

TEST(ViewInplace, ViewSeesInPlaceChangeOfItsBase) {
  // The audit's reproducer: PyTorch gives [18, 36, 0, 0] (v = 3 x[:2], d sum(v^2) = 18 x).
  Tensor x = tensor({1., 2, 3, 4}, f64_grad());
  Tensor a = x * 1;
  Tensor v = a.slice(0, 0, 2);
  a.mul_(3.0);
  (v * v).sum().backward();
  expect_values(x.grad(), {18, 36, 0, 0});
  expect_values(v, {3, 6});
}

TEST(ViewInplace, CopyIntoAViewOfABufferThatNeedsNoGrad) {
  // buf.slice(0, 0, 2).copy_(x): buf now depends on x (it threw NotImplemented before).
  Tensor x = tensor({5., 7}, f64_grad());
  Tensor w = tensor({2., 3, 4, 5}, DType::Float64);
  Tensor buf = zeros({4}, DType::Float64);
  buf.slice(0, 0, 2).copy_(x);
  EXPECT_TRUE(buf.requires_grad());
  expect_values(buf, {5, 7, 0, 0});
  (buf * w).sum().backward();
  expect_values(x.grad(), {2, 3});
}

TEST(ViewInplace, InPlaceOnAViewChangesTheBasesGradient) {
  Tensor x = tensor({1., 2, 3, 4}, f64_grad());
  Tensor a = x * 2;
  a.slice(0, 1, 3).mul_(10.0);
  a.sum().backward();
  expect_values(x.grad(), {2, 20, 20, 2});
}

TEST(ViewInplace, FillOfAViewCutsItsWindowOff) {
  Tensor x = tensor({1., 2, 3, 4}, f64_grad());
  Tensor a = x * 1;
  a.slice(0, 0, 2).fill_(0.5);
  (a * a).sum().backward();
  expect_values(a, {0.5, 0.5, 3, 4});
  expect_values(x.grad(), {0, 0, 6, 8});
}

TEST(ViewInplace, SiblingViewSeesTheWrite) {
  Tensor x = tensor({1., 2, 3, 4}, f64_grad());
  Tensor a = x * 1;
  Tensor v1 = a.slice(0, 0, 2), v2 = a.slice(0, 1, 3);
  v1.mul_(2.0);
  (v2 * v2).sum().backward();  // v2 = [2 x1, x2]: d = [0, 8 x1, 2 x2, 0]
  expect_values(x.grad(), {0, 16, 6, 0});
}

TEST(ViewInplace, ViewsOfViewsAndPermutedWindowsMatchFiniteDifferences) {
  const Program f = [](const Tensor& x) {
    Tensor a = sin(x) * 1.5;                           // [2, 3]
    Tensor t = a.t();                                  // [3, 2], a permuted view
    t.select(0, 1).mul_(x.select(1, 0));               // a[:, 1] *= x[:, 0]
    t.slice(0, 2, 3).add_(exp(a.slice(1, 0, 1).t()));  // a[:, 2] += exp(a[:, 0])
    Tensor r = a.reshape({6});
    r.slice(0, 0, 6, 2).sub_(r.slice(0, 1, 6, 2) * 0.25);  // strided views of the reshape
    return (a * a * x).sum();
  };
  expect_grad_matches_differences(f, {0.3, -1.2, 0.8, 1.1, 0.4, -0.7}, {2, 3});
}

TEST(ViewInplace, SecondDerivativeThroughAnInPlaceViewWrite) {
  // f(x) = sum(a^3) with a = x^2 and a[:2] *= x[:2]; its gradient's derivative by differences.
  const Program f = [](const Tensor& x) {
    Tensor a = x * x;
    a.slice(0, 0, 2).mul_(x.slice(0, 0, 2));
    return (a * a * a).sum();
  };
  const std::vector<double> at{0.7, -0.4, 1.3};
  const Program grad_dot = [&](const Tensor& x) {
    Tensor xr = x.detach().requires_grad_(true);
    EnableGradGuard grad_on;
    Tensor g = autograd::grad({f(xr)}, {xr}, {}, true, /*create_graph=*/true)[0];
    return (g * tensor({1., 2, 3}, DType::Float64)).sum();
  };
  Tensor x = tensor(at, Shape{3}, f64_grad());
  Tensor g = autograd::grad({f(x)}, {x}, {}, true, true)[0];
  (g * tensor({1., 2, 3}, DType::Float64)).sum().backward();
  expect_values(x.grad(), numeric_grad(grad_dot, tensor(at, Shape{3}, DType::Float64)), 1e-5);
}

TEST(ViewInplace, InPlaceOnABaseWhoseViewWasSavedIsStillAVersionError) {
  Tensor x = tensor({1., 2, 3}, f64_grad());
  Tensor a = x * 1;
  Tensor y = (a.slice(0, 0, 2) * a.slice(0, 0, 2)).sum();  // saves the views
  a.add_(1.0);
  expect_error([&] { y.backward(); }, ErrorKind::Autograd, {"modified by an in-place operation"});
}

TEST(ViewInplace, ViewOfALeafThatRequiresGradIsRefused) {
  Tensor w = tensor({1., 2, 3}, f64_grad());
  expect_error([&] { w.slice(0, 0, 2).mul_(2.0); }, ErrorKind::Autograd,
               {"[mul_]", "view", "leaf tensor that requires grad", "[3] (float64)"});
}

TEST(ViewInplace, ExpandedViewIsRefused) {
  // Refused recording or not, as in PyTorch (tests/autograd/inplace_test.cpp has the rest).
  Tensor x = tensor({1., 2}, f64_grad());
  Tensor a = (x * 1).reshape({2, 1});
  Tensor e = a.expand({2, 3});
  expect_error([&] { e.add_(1.0); }, ErrorKind::Value, {"[add_]", "share one memory location"});
}

TEST(ViewInplace, ViewTakenInNoGradModeIsRefusedWithGradOn) {
  Tensor x = tensor({1., 2, 3}, f64_grad());
  Tensor a = x * 1;
  Tensor v;
  {
    NoGradGuard no_grad;
    v = a.slice(0, 0, 2);
  }
  expect_error([&] { v.mul_(2.0); }, ErrorKind::Autograd, {"[mul_]", "no-grad mode"});
  {
    NoGradGuard no_grad;  // allowed without recording, as in PyTorch
    v.mul_(2.0);
  }
  expect_values(a, {2, 4, 3});
}

TEST(ViewInplace, OptimizerStyleUpdatesOfViewsWithoutRecordingStillWork) {
  Tensor w = tensor({1., 2, 3, 4}, f64_grad());
  {
    NoGradGuard no_grad;
    w.slice(0, 1, 3).mul_(10.0);
  }
  expect_values(w, {1, 20, 30, 4});
  (w * w).sum().backward();
  expect_values(w.grad(), {2, 40, 60, 8});
}

TEST(ViewInplace, SelfMultiplyDoesNotLeakTheGraph) {
  // a.mul_(a) once saved `a` in the node that became a's own grad_fn: a reference cycle.
  Tensor x = tensor({0.5, -1.0}, f64_grad());
  std::weak_ptr<Node> node;
  {
    Tensor a = sin(x);
    a.mul_(a);
    node = a.grad_fn();
    ASSERT_FALSE(node.expired());
    a.sum().backward();  // d sin^2 = 2 sin cos
  }
  EXPECT_TRUE(node.expired());
  expect_values(x.grad(), {2 * std::sin(0.5) * std::cos(0.5), 2 * std::sin(-1.0) * std::cos(-1.0)});
}

TEST(ViewInplace, InplaceOnATensorAnotherNodeSavedDoesNotLeak) {
  // y.add_(z) where z's node saved y: y's new history reaches that node, which held y.
  // Backward through it is a version error (as in PyTorch); the graph must still be freed.
  Tensor x = tensor({0.5, -1.0}, f64_grad());
  std::weak_ptr<Node> saver, modified;
  {
    Tensor y = x * 2;
    Tensor z = y * y;
    saver = z.grad_fn();
    y.add_(z);
    modified = y.grad_fn();
    expect_error([&] { y.sum().backward(); }, ErrorKind::Autograd,
                 {"MulBackward", "modified by an in-place operation"});
  }
  EXPECT_TRUE(saver.expired());
  EXPECT_TRUE(modified.expired());
}

TEST(ViewInplace, InplaceOnABaseWhoseViewANodeSavedDoesNotLeak) {
  // The saving node holds a view of b, and the view holds b as its base.
  Tensor x = tensor({0.5, -1.0, 2.0, 3.0}, f64_grad());
  std::weak_ptr<Node> saver, modified;
  {
    Tensor b = x * 1;
    Tensor v = b.slice(0, 0, 2);
    Tensor z = (v * v).sum();
    saver = z.grad_fn();
    b.add_(z);
    modified = b.grad_fn();
    EXPECT_THROW(b.sum().backward(), Error);
  }
  EXPECT_TRUE(saver.expired());
  EXPECT_TRUE(modified.expired());
}

TEST(ViewInplace, InplaceThroughAViewOnATensorANodeSavedDoesNotLeak) {
  // In place on a view: the base's new history is CopySlices over a graph that saved the base.
  Tensor x = tensor({0.5, -1.0, 2.0, 3.0}, f64_grad());
  std::weak_ptr<Node> saver, modified;
  {
    Tensor b = x * 1;
    Tensor z = (b * b).sum();
    saver = z.grad_fn();
    b.slice(0, 1, 3).add_(z);
    modified = b.grad_fn();
    EXPECT_THROW(b.sum().backward(), Error);
  }
  EXPECT_TRUE(saver.expired());
  EXPECT_TRUE(modified.expired());
}

TEST(ViewInplace, AViewMadeALeafThatRequiresGradIsItsViewsBase) {
  // requires_grad_() on a view of a tensor that needs no grad makes a leaf of its own: its
  // views must not be modified in place while recording (as for any leaf that requires grad),
  // and in place on the old base does not give the leaf a history (which would reach its own
  // AccumulateGrad, a reference cycle). Found by fuzz_ops as a leak.
  std::weak_ptr<TensorImpl> leaf_impl;
  {
    Tensor base = tensor({1.0, 2.0, 3.0, 4.0}, DType::Float64);
    Tensor leaf = base.reshape({2, 2}).transpose(0, 1);
    leaf.requires_grad_();
    leaf_impl = leaf.impl_ptr();
    expect_error([&] { leaf.narrow(-1, 0, 1).clamp_(2.0, 3.0); }, ErrorKind::Autograd,
                 {"clamp_", "leaf tensor that requires grad"});
    // base's new history reaches AccumulateGrad(leaf); the leaf sees the new values and
    // stays a leaf
    base.add_((leaf * 2.0).reshape({-1}));
    EXPECT_TRUE(leaf.is_leaf());
    expect_values(leaf.detach().contiguous().reshape({-1}), {3, 7, 8, 12});
    (leaf * leaf).sum().backward();
    expect_values(leaf.grad().contiguous().reshape({-1}), {6, 14, 16, 24});
  }
  EXPECT_TRUE(leaf_impl.expired());
}

TEST(ViewInplace, InplaceUpdatesInALoopKeepValidSavesAndFreeTheGraph) {
  // h = h + w * h written in place, with the product taken of a clone (so nothing stale is
  // saved): every save stays valid, backward works, and afterwards the whole graph is freed.
  // Oracle: h_k = h_0 * (1 + w)^k, so dh_k/dw = k h_0 (1 + w)^(k-1).
  Tensor w = tensor({0.1, -0.2}, f64_grad());
  const Tensor h0 = tensor({1.5, 2.0}, DType::Float64);
  std::weak_ptr<Node> first;
  constexpr int k = 5;
  {
    Tensor h = h0 * 1;
    first = h.grad_fn();
    for (int i = 0; i < k; ++i) h.add_(w * h.clone());
    h.sum().backward();
  }
  EXPECT_TRUE(first.expired());
  const auto wv = w.to_vector<double>(), hv = h0.to_vector<double>();
  expect_values(w.grad(),
                {k * hv[0] * std::pow(1 + wv[0], k - 1), k * hv[1] * std::pow(1 + wv[1], k - 1)});
}

TEST(ViewInplace, ACycleThroughAnotherTensorsStaleSaveIsFreed) {
  // Found by fuzz_ops as a leak. z = pow(y, v) saves v, a view of y. An in-place op through a
  // view of v then gives y a history whose node saves w. An in-place op on w from z then closes
  // w -> (w's node) -> z's node -> v -> y -> (y's node) -> w. The walk from w's new history
  // reaches z's node, but the save of w that closes the cycle lies past z's stale save of v:
  // every stale save met in the walk must be cut, not only the modified tensor's.
  Tensor x = tensor({0.5, -1.0, 2.0, 1.5}, f64_grad()).reshape({2, 2});
  std::vector<std::weak_ptr<Node>> nodes;
  {
    Tensor y = x * 2.0;
    Tensor v = y.transpose(0, 1);
    Tensor z = pow(y, v);
    Tensor w = full({2, 2}, 3.0, DType::Float64);
    v.transpose(0, 1).div_(w);  // y gets a node that saves w; z's save of v goes stale
    w.transpose(0, 1).div_(z);  // w gets a history through z's node
    for (const Tensor& t : {y, v, z, w}) nodes.push_back(t.grad_fn());
    for (const auto& n : nodes) ASSERT_FALSE(n.expired());
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) EXPECT_TRUE(nodes[i].expired()) << "node " << i;
}

// A view expanded to 2^40 elements of a base written in place (found by the ops fuzzer): its
// history is regenerated from an index map of one entry per element, more than any memory.
// That is an OutOfMemory error naming the op, not a std::bad_alloc escaping the library.
TEST(ViewInplace, AHugeExpandedViewOfABaseWrittenInPlaceIsOutOfMemory) {
  Tensor leaf = full({1, 1}, 0.5).to(DType::Float64).requires_grad_();
  Tensor base = leaf * 1.0;
  Tensor huge = base.expand({1, int64_t{1} << 40});
  base.clamp_(0.0, 5.0);
  expect_error([&] { (void)tanh(huge); }, ErrorKind::OutOfMemory,
               {"out of memory", "[1, 1099511627776]"});
  // A view of ordinary size regenerates its history as before: y = 3 tanh(3 leaf), so
  // dy/dleaf = 9 (1 - tanh^2(1.5)).
  Tensor small = base.expand({1, 3});
  base.mul_(3.0);
  Tensor y = tanh(small).sum();
  y.backward();
  EXPECT_NEAR(leaf.grad().item<double>(), 9 * (1 - std::pow(std::tanh(1.5), 2)), 1e-12);
}
