// Grad modes and detaching: NoGradGuard, EnableGradGuard, their nesting and thread-locality,
// InferenceMode and inference tensors, detach(), and the rules of requires_grad_.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

// ---- NoGradGuard / EnableGradGuard ----

TEST(Modes, GradEnabledByDefault) { EXPECT_TRUE(is_grad_enabled()); }

TEST(Modes, NoGradRecordsNothing) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y;
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(is_grad_enabled());
    y = x.exp() * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    // The leaf itself still requires grad.
    EXPECT_TRUE(x.requires_grad());
  }
  EXPECT_TRUE(is_grad_enabled());
  expect_values(y, {2 * std::exp(1.0), 2 * std::exp(2.0)});
  // Outside the guard, ops on x record again; y stays history-free.
  EXPECT_TRUE((x * 2).requires_grad());
  EXPECT_FALSE((y * 2).requires_grad());
  EXPECT_THROW(y.sum().backward(), Error);
}

TEST(Modes, EnableGradInsideNoGrad) {
  Tensor x = tensor({3.0}, f64_grad());
  NoGradGuard no_grad;
  Tensor a = x * 2;
  Tensor b, loss;
  {
    EnableGradGuard enable;
    EXPECT_TRUE(is_grad_enabled());
    b = x * x;
    loss = b.sum();
  }
  EXPECT_FALSE(is_grad_enabled());
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(b.requires_grad());
  ASSERT_NE(b.grad_fn(), nullptr);
  // backward itself works under NoGradGuard (it sets its own mode), and restores it.
  loss.backward();
  EXPECT_FALSE(is_grad_enabled());
  expect_values(x.grad(), {6});
}

TEST(Modes, NestingRestoresState) {
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard g1;
    EXPECT_FALSE(is_grad_enabled());
    {
      EnableGradGuard g2;
      EXPECT_TRUE(is_grad_enabled());
      {
        NoGradGuard g3;
        EXPECT_FALSE(is_grad_enabled());
        {
          NoGradGuard g4;
          EXPECT_FALSE(is_grad_enabled());
        }
        EXPECT_FALSE(is_grad_enabled());
      }
      EXPECT_TRUE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
}

TEST(Modes, SetGradEnabled) {
  set_grad_enabled(false);
  EXPECT_FALSE(is_grad_enabled());
  Tensor x = tensor({1.0}, f64_grad());
  EXPECT_FALSE((x * 2).requires_grad());
  set_grad_enabled(true);
  EXPECT_TRUE((x * 2).requires_grad());
}

TEST(Modes, GuardRestoresOnException) {
  try {
    NoGradGuard no_grad;
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(is_grad_enabled());
}

TEST(Modes, GradModeIsThreadLocal) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  NoGradGuard no_grad;
  bool thread_enabled = false, thread_records = false;
  std::thread t([&] {
    thread_enabled = is_grad_enabled();
    thread_records = (x * 2).requires_grad();
  });
  t.join();
  EXPECT_TRUE(thread_enabled);
  EXPECT_TRUE(thread_records);
  EXPECT_FALSE(is_grad_enabled());
  EXPECT_FALSE((x * 2).requires_grad());
}

TEST(Modes, NoGradInAThreadDoesNotLeak) {
  Tensor x = tensor({1.0}, f64_grad());
  std::thread t([&] {
    NoGradGuard no_grad;
    EXPECT_FALSE((x * 2).requires_grad());
  });
  t.join();
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((x * 2).requires_grad());
}

// ---- InferenceMode ----

TEST(Modes, InferenceModeRecordsNothing) {
  Tensor x = tensor({0.5, 1.5}, f64_grad());
  EXPECT_FALSE(is_inference_mode());
  Tensor y;
  {
    InferenceMode inference;
    EXPECT_TRUE(is_inference_mode());
    EXPECT_FALSE(is_grad_enabled());
    y = x.sin() * 3;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_FALSE(is_inference_mode());
  EXPECT_TRUE(is_grad_enabled());
  expect_values(y, {3 * std::sin(0.5), 3 * std::sin(1.5)});
}

TEST(Modes, InferenceModeRestoresNoGradState) {
  NoGradGuard no_grad;
  {
    InferenceMode inference;
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_FALSE(is_grad_enabled());
  EXPECT_FALSE(is_inference_mode());
}

TEST(Modes, InferenceTensorCannotBeSavedForBackward) {
  Tensor w = tensor({1.0, 2.0}, f64_grad());
  Tensor t;
  {
    InferenceMode inference;
    t = tensor({3.0, 4.0}, DType::Float64) * 2;
  }
  // Mul saves both inputs for backward: saving the inference tensor is refused.
  std::string msg = error_message([&] { Tensor y = w * t; }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "inference")) << msg;
  // Ops that do not save it are fine (as in PyTorch).
  Tensor z = (w + t).sum();
  z.backward();
  expect_values(w.grad(), {1, 1});
  // A clone made outside inference mode is a normal tensor.
  Tensor c = t.clone();
  Tensor y = (w * c).sum();
  w.zero_grad();
  y.backward();
  expect_values(w.grad(), {6, 8});
}

TEST(Modes, InferenceModeFactoriesMakeInferenceTensors) {
  Tensor w = tensor({1.0, 2.0}, f64_grad());
  Tensor t;
  {
    InferenceMode inference;
    t = ones({2}, DType::Float64);
  }
  EXPECT_THROW(w.sin() * t, Error);  // mul saves t
  // Used in no recorded op, an inference tensor behaves like any other.
  expect_values(t * 2, {2, 2});
}

// ---- detach ----

TEST(Modes, DetachSharesStorageAndCutsTheGraph) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 3;
  Tensor d = y.detach();
  EXPECT_TRUE(d.shares_storage(y));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_TRUE(d.is_leaf());
  expect_values(d, {3, 6});
  // y keeps its history.
  EXPECT_TRUE(y.requires_grad());
  // Nothing flows through the detached branch: d/dx sum(y + d * x) = 1*3 + d = [6, 9].
  (y + d * x).sum().backward();
  expect_values(x.grad(), {6, 9});
}

TEST(Modes, DetachedInPlaceWriteIsSeenByTheOriginal) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x.exp();
  uint64_t v = y.version();
  y.detach().mul_(2);  // same storage, same version counter
  EXPECT_EQ(y.version(), v + 1);
  expect_values(y, {2 * std::exp(1.0), 2 * std::exp(2.0)});
  // ExpBackward saved y: the modification is detected.
  std::string msg = error_message([&] { y.sum().backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "ExpBackward")) << msg;
}

TEST(Modes, DetachInPlace) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 2;
  y.detach_();
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE(y.is_leaf());
}

// ---- requires_grad_ rules ----

TEST(Modes, RequiresGradFalseOnLeaf) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_FALSE((x * 2).requires_grad());
  x.requires_grad_(true);
  EXPECT_TRUE((x * 2).requires_grad());
}

TEST(Modes, RequiresGradOnIntegerTensorThrows) {
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3});
  std::string msg = error_message([&] { i.requires_grad_(); }, ErrorKind::DType);
  EXPECT_TRUE(contains(msg, "int64")) << msg;
  EXPECT_FALSE(i.requires_grad());
  error_message([&] { zeros({2}, TensorOptions(DType::Int64).requires_grad(true)); },
                ErrorKind::DType);
  Tensor b = tensor(std::vector<bool>{true, false});
  error_message([&] { b.requires_grad_(); }, ErrorKind::DType);
  // Turning it off is always allowed.
  i.requires_grad_(false);
  EXPECT_FALSE(i.requires_grad());
}

TEST(Modes, RequiresGradFalseOnNonLeafThrows) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 2;
  std::string msg = error_message([&] { y.requires_grad_(false); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "detach")) << msg;
  EXPECT_TRUE(y.requires_grad());
  y.requires_grad_(true);  // a no-op on a non-leaf, as in PyTorch
  EXPECT_TRUE(y.requires_grad());
}

TEST(Modes, IntegerOpResultsDoNotRequireGrad) {
  // Comparisons give bool tensors that never require grad.
  Tensor x = tensor({1.0, -2.0}, f64_grad());
  Tensor m = x.gt(tensor({0.0, 0.0}, DType::Float64));
  EXPECT_EQ(m.dtype(), DType::Bool);
  EXPECT_FALSE(m.requires_grad());
  EXPECT_EQ(m.grad_fn(), nullptr);
}
