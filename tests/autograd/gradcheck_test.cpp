// Tests of gradcheck and gradgradcheck themselves: they pass correct derivatives, catch a wrong
// VJP, a wrong JVP (only when check_jvp) and a wrong double backward, report the worst element,
// accept empty inputs and outputs, and reject float32 inputs.
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor leaf(std::initializer_list<double> v, const Shape& s) {
  return tensor(v, s, DType::Float64).requires_grad_(true);
}

// x^3 with a switchable mistake: in the VJP at one element, in the JVP, or a first derivative
// computed from a detached x (right values, but no second derivative).
enum class Bug { None, VjpAtElement2, Jvp, DetachedVjp };

template <Bug kBug>
struct Cube : Function<Cube<kBug>> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    ctx.saved_data["x"] = x.detach();
    return x * x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    Tensor x = ctx.get_saved()[0];
    if (kBug == Bug::DetachedVjp) x = x.detach();
    Tensor d = x * x * 3;
    if (kBug == Bug::VjpAtElement2) d = d + tensor({0, 0, 1, 0}, x.shape(), DType::Float64);
    return {g[0] * d};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    Tensor x = std::any_cast<Tensor>(ctx.saved_data["x"]);
    return {t[0] * x * x * (kBug == Bug::Jvp ? 2 : 3)};
  }
};

TEST(Gradcheck, PassesCorrectDerivatives) {
  Tensor x = leaf({0.3, -1.2, 0.7, 2.0}, {2, 2});
  Tensor y = leaf({1.5, -0.4}, {2});
  TensorFn f = [](const std::vector<Tensor>& in) { return sin(in[0]) * in[1] + in[0].square(); };
  GradcheckOptions o;
  o.check_jvp = true;
  EXPECT_TRUE(gradcheck(f, {x, y}, o).ok);
  EXPECT_TRUE(gradgradcheck(f, {x, y}).ok);
  TensorFn cube = [](const std::vector<Tensor>& in) { return Cube<Bug::None>::apply(in[0]); };
  EXPECT_TRUE(gradcheck(cube, {x}, o).ok);
  EXPECT_TRUE(gradgradcheck(cube, {x}).ok);
}

TEST(Gradcheck, ReportsTheWorstElementOfAWrongVjp) {
  Tensor c = leaf({5.0}, {});
  Tensor x = leaf({0.3, -1.2, 0.7, 2.0}, {2, 2});
  TensorFn f = [](const std::vector<Tensor>& in) {
    return Cube<Bug::VjpAtElement2>::apply(in[1]) * in[0];
  };
  GradcheckResult r = gradcheck(f, {c, x});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.input, 1);
  EXPECT_EQ(r.index, 2);
  EXPECT_NEAR(r.numeric, 5 * 3 * 0.7 * 0.7, 1e-6);
  EXPECT_NEAR(r.analytic, 5 * (3 * 0.7 * 0.7 + 1), 1e-9);
  EXPECT_NE(r.message.find("gradcheck failed for input 1 at element 2"), std::string::npos)
      << r.message;
}

TEST(Gradcheck, ChecksTheJvpOnlyWhenAsked) {
  Tensor x = leaf({0.3, -1.2, 0.7, 2.0}, {4});
  TensorFn f = [](const std::vector<Tensor>& in) { return Cube<Bug::Jvp>::apply(in[0]); };
  EXPECT_TRUE(gradcheck(f, {x}).ok);
  GradcheckOptions o;
  o.check_jvp = true;
  GradcheckResult r = gradcheck(f, {x}, o);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.input, 0);
  EXPECT_NE(r.message.find("JVP"), std::string::npos) << r.message;
}

TEST(Gradcheck, GradgradcheckCatchesAMissingSecondDerivative) {
  Tensor x = leaf({0.3, -1.2, 0.7, 2.0}, {4});
  TensorFn f = [](const std::vector<Tensor>& in) { return Cube<Bug::DetachedVjp>::apply(in[0]); };
  EXPECT_TRUE(gradcheck(f, {x}).ok);
  GradcheckResult r = gradgradcheck(f, {x});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.message.find("gradgradcheck"), std::string::npos) << r.message;
}

TEST(Gradcheck, EmptyInputsAndOutputsAreTriviallyOk) {
  TensorFn f = [](const std::vector<Tensor>& in) { return exp(in[0]) + in[1]; };
  Tensor empty = zeros({0, 3}, DType::Float64).requires_grad_(true);
  Tensor row = leaf({1, 2, 3}, {3});
  EXPECT_TRUE(gradcheck(f, {empty, row}).ok);
  EXPECT_TRUE(gradgradcheck(f, {empty, row}).ok);
}

TEST(Gradcheck, ConstantInputsAndOutputsWithoutHistory) {
  Tensor x = leaf({0.3, -1.2}, {2});
  Tensor k = tensor({2.0, 3.0}, DType::Float64);  // does not require grad: not checked
  TensorFn f = [](const std::vector<Tensor>& in) { return in[0] * in[1]; };
  EXPECT_TRUE(gradcheck(f, {x, k}).ok);
  EXPECT_TRUE(gradgradcheck(f, {x, k}).ok);
  TensorFn constant = [](const std::vector<Tensor>&) { return ones({2}, DType::Float64); };
  EXPECT_TRUE(gradcheck(constant, {x}).ok);
}

TEST(Gradcheck, RejectsFloat32Inputs) {
  Tensor x = tensor({1.0, 2.0}, DType::Float32).requires_grad_(true);
  TensorFn f = [](const std::vector<Tensor>& in) { return exp(in[0]); };
  try {
    gradcheck(f, {x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "gradcheck");
    EXPECT_EQ(e.kind(), ErrorKind::DType);
  }
}

}  // namespace
