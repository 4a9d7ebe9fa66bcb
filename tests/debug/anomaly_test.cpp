// Anomaly mode: NaNs and infinities made on purpose are reported at the node (or op) that made
// them, with the line of this file that called its forward op (this test is built with line
// tables, -g1) and the module it ran in. The oracle for each site is __LINE__ at the call.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "autograd/anomaly.h"

using namespace adjoint;

namespace {

// The message of the adjoint::Error `f` throws (a failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an adjoint::Error";
  return "";
}

std::string site(int line) { return "tests/debug/anomaly_test.cpp:" + std::to_string(line); }

#define EXPECT_HAS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "no '" << (part) << "' in: " << (message)

// 0/0 in backward: a custom function whose gradient divides zero by zero.
struct ZeroOverZero : Function<ZeroOverZero> {
  static std::string name() { return "ZeroOverZero"; }
  static Tensor forward(FunctionCtx&, const Tensor& x) { return x * 2.0; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) {
    return {g[0] * 0.0 / zeros_like(g[0])};
  }
};

struct Sqrt : nn::Module {
  static constexpr int kLine = __LINE__ + 2;  // the line of sqrt's call below
  Sqrt() : Module("Sqrt") {}
  Tensor forward(const Tensor& x) override { return sqrt(x); }
};

}  // namespace

TEST(Anomaly, OffByDefaultAndNestableAndPerThread) {
  EXPECT_FALSE(is_anomaly_enabled());
  Tensor x = ones({3}).requires_grad_(true);
  EXPECT_EQ((x * 2.0).grad_fn()->creation_site(), nullptr);  // nothing recorded when off
  {
    DetectAnomaly on;
    EXPECT_TRUE(is_anomaly_enabled());
    EXPECT_NE((x * 2.0).grad_fn()->creation_site(), nullptr);
    {
      DetectAnomaly off(false);
      EXPECT_FALSE(is_anomaly_enabled());
      EXPECT_EQ((x * 2.0).grad_fn()->creation_site(), nullptr);
    }
    EXPECT_TRUE(is_anomaly_enabled());
    bool other_thread = true;
    std::thread([&] { other_thread = is_anomaly_enabled(); }).join();
    EXPECT_FALSE(other_thread);
  }
  EXPECT_FALSE(is_anomaly_enabled());
}

TEST(Anomaly, FiniteGradientsAreTheSameWithAndWithoutIt) {
  Generator gen(3);
  Tensor w = randn({4, 3}, DType::Float64, &gen).requires_grad_(true);
  Tensor x = randn({5, 4}, DType::Float64, &gen);
  auto loss = [&] { return tanh(matmul(x, w)).square().sum(); };
  loss().backward();
  const std::vector<double> plain = w.grad().to_vector<double>();
  w.zero_grad();
  {
    DetectAnomaly on;
    loss().backward();
  }
  EXPECT_EQ(w.grad().to_vector<double>(), plain);
}

TEST(Anomaly, ZeroOverZeroInACustomBackwardNamesTheNodeAndTheLine) {
  Tensor x = ones({4}).requires_grad_(true);
  DetectAnomaly on;
  const int line = __LINE__ + 1;
  Tensor y = ZeroOverZero::apply(x);
  const std::string m = error_of([&] { y.sum().backward(); });
  EXPECT_HAS(m, "[backward]");
  EXPECT_HAS(m, "ZeroOverZero");
  EXPECT_HAS(m, "input 0");
  EXPECT_HAS(m, "4 nan of 4 elements ([4], float32)");
  EXPECT_HAS(m, site(line));
}

TEST(Anomaly, LogOfANegativeIsCaughtInBackwardWhereTheNaNMeetsAGradient) {
  // log(-1) is NaN in forward; backward's first NaN is the gradient of w in y * w, which is
  // y * g: MulBackward's input 1 (PyTorch reports the same node).
  Tensor x = tensor({1.0, -1.0, 2.0}).requires_grad_(true);
  Tensor w = ones({3}).requires_grad_(true);
  DetectAnomaly on;
  Tensor y = log(x);
  const int line = __LINE__ + 1;
  Tensor z = y * w;
  const std::string m = error_of([&] { z.sum().backward(); });
  EXPECT_HAS(m, "MulBackward returned a gradient for its input 1 with 1 nan of 3 elements");
  EXPECT_HAS(m, "`mul` called at " + site(line));
}

TEST(Anomaly, CheckForwardCatchesTheOpThatMadeTheNaN) {
  Tensor x = tensor({1.0, -1.0, 2.0}).requires_grad_(true);
  DetectAnomaly on(true, {.check_nan = true, .check_forward = true});
  const int line = __LINE__ + 1;
  const std::string m = error_of([&] { log(x); });
  EXPECT_HAS(m, "[log]");
  EXPECT_HAS(m, "1 nan of 3 elements");
  EXPECT_HAS(m, "`log` called at " + site(line));
  // A NaN passed on from an input is not this op's doing.
  Tensor nan_in = tensor({NAN, 1.0});
  EXPECT_NO_THROW(nan_in * 2.0);
  // Infinity is not a NaN: log(0) = -inf is allowed in forward.
  EXPECT_NO_THROW(log(zeros({2})));
}

TEST(Anomaly, AnFp16OverflowUnderLossScalingIsReportedAtTheMultiply) {
  // 200 * 200 = 40000 fits float16 (max 65504); with the loss scaled by 1024 the gradient of
  // x * x is 2 * 1024 * 200 = 409600, which does not.
  Tensor x = full({2}, 200.0, DType::Float16).requires_grad_(true);
  DetectAnomaly on;
  const int line = __LINE__ + 1;
  Tensor y = x * x;
  Tensor loss = y.sum() * 1024.0;
  const std::string m = error_of([&] { loss.backward(); });
  EXPECT_HAS(m, "MulBackward");
  EXPECT_HAS(m, "infinite of 2 elements ([2], float16)");
  EXPECT_HAS(m, site(line));
}

TEST(Anomaly, TheCreationSiteNamesTheModulePath) {
  nn::Sequential root;
  auto blocks = root.push_back(std::make_shared<nn::Sequential>());
  blocks->push_back(std::make_shared<nn::Linear>(3, 3));
  blocks->push_back(std::make_shared<Sqrt>());
  EXPECT_EQ(blocks->children()[1]->path(), "0.1");
  DetectAnomaly on;
  // sqrt of a linear map of zeros: sqrt(0)'s gradient is infinite
  Tensor x = zeros({2, 3});
  for (Tensor p : root.parameters()) p.detach().zero_();
  Tensor out = root(x);
  const std::string m = error_of([&] { out.sum().backward(); });
  EXPECT_HAS(m, "SqrtBackward");
  EXPECT_HAS(m, "infinite");
  // the first frame outside adjoint is the layer's forward, in this file
  EXPECT_HAS(m, "`sqrt` called at " + site(Sqrt::kLine));
  EXPECT_HAS(m, "in module 0.1");
}

TEST(Anomaly, EngineErrorsNameTheCreationSiteOrSayHowToGetIt) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_(true);
  {  // off: the hint
    Tensor y = (x * x).sum();
    y.backward();
    const std::string m = error_of([&] { y.backward(); });
    EXPECT_HAS(m, "a second time");
    EXPECT_HAS(m, "turn on anomaly mode (adjoint::DetectAnomaly)");
  }
  DetectAnomaly on;
  {  // backward twice
    const int line = __LINE__ + 1;
    Tensor y = (x * x).sum();
    y.backward();
    const std::string m = error_of([&] { y.backward(); });
    EXPECT_HAS(m, "a second time");
    EXPECT_HAS(m, site(line));
  }
  {  // a saved tensor modified in place
    Tensor a = x * 1.0;
    const int line = __LINE__ + 1;
    Tensor y = exp(a);  // saves its output
    y.add_(1.0);
    const std::string m = error_of([&] { y.sum().backward(); });
    EXPECT_HAS(m, "modified by an in-place operation");
    EXPECT_HAS(m, "`exp` called at " + site(line));
  }
}

TEST(Anomaly, ItsChecksAreNotOpsOfTheProgram) {
  // The checks read tensors without recording, profiling or entering a checkpoint's op log: a
  // region run under check_forward recomputes in a backward without anomaly mode, and a
  // profiler sees only the program's ops. Oracle: d/dx sum(exp(x) * x) = exp(x) * (1 + x).
  // float32, so that reading it as float64 would be an op (a cast)
  Tensor x = tensor({0.5, -1.5}).requires_grad_(true);
  Tensor out;
  std::vector<ProfileEvent> events;
  {
    DetectAnomaly on(true, {.check_nan = true, .check_forward = true});
    Profiler prof;
    out = checkpoint(
        [](const std::vector<Tensor>& xs) { return std::vector<Tensor>{exp(xs[0]) * xs[0]}; },
        std::vector<Tensor>{x})[0];
    prof.stop();
    events = prof.events();
  }
  for (const ProfileEvent& e : events) EXPECT_TRUE(e.name == "exp" || e.name == "mul") << e.name;
  out.sum().backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  EXPECT_NEAR(g[0], std::exp(0.5) * 1.5, 1e-6);
  EXPECT_NEAR(g[1], std::exp(-1.5) * -0.5, 1e-6);
}
