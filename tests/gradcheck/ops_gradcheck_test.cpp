// The registry-driven gradcheck: for every sample in adjoint::testing::op_registry() (filled by
// the samples_*.cpp files in this folder), the VJP and the JVP against central finite
// differences, the identity <u, J v> through the jvp and vjp transforms, double backward, and
// Hessian-vector products forward over reverse against reverse over reverse. Test names are the
// sample names with '/' (and anything else) turned into '_'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>

#include "support/registry.h"

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;

GradcheckOptions options_for(const OpSample& s, bool check_jvp = false) {
  GradcheckOptions o;
  o.atol = s.atol;
  o.rtol = s.rtol;
  o.check_jvp = check_jvp;
  return o;
}

// A seed from the sample's name (FNV-1a), so each sample draws its own reproducible u and v.
uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// <a, b> over all elements; an undefined tensor counts as zeros.
double inner(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return 0;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double s = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) s += x[i] * y[i];
  return s;
}

class OpGradcheck : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpGradcheck, VjpMatchesFiniteDifferences) {
  const OpSample& s = GetParam();
  GradcheckResult r = gradcheck(s.fn, s.inputs, options_for(s));
  EXPECT_TRUE(r.ok) << s.name << ": " << r.message;
}

TEST_P(OpGradcheck, JvpMatchesFiniteDifferences) {
  const OpSample& s = GetParam();
  if (!s.jvp) GTEST_SKIP() << s.name << " does not check its JVP";
  GradcheckResult r = gradcheck(s.fn, s.inputs, options_for(s, /*check_jvp=*/true));
  EXPECT_TRUE(r.ok) << s.name << ": " << r.message;
}

// The sample as a function of its checked (requires-grad) inputs only, the others held fixed;
// `checked` lists their positions. The checked inputs are passed detached, as a user of the
// transforms would.
struct CheckedFunction {
  std::vector<std::size_t> checked;
  std::vector<Tensor> primals;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

CheckedFunction checked_function(const OpSample& s) {
  CheckedFunction c;
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    if (!s.inputs[i].defined() || !s.inputs[i].requires_grad()) continue;
    c.checked.push_back(i);
    c.primals.push_back(s.inputs[i].detach());
  }
  c.fn = [&s, checked = c.checked](const std::vector<Tensor>& xs) {
    std::vector<Tensor> all = s.inputs;
    for (std::size_t j = 0; j < checked.size(); ++j) all[checked[j]] = xs[j];
    return s.fn(all);
  };
  return c;
}

// <u, J v> through the jvp transform (tangents v, dotted with u) equals <J^T u, v> through the
// vjp transform (cotangent u, dotted with v), for random u and v.
TEST_P(OpGradcheck, JvpAndVjpTransformsAgree) {
  const OpSample& s = GetParam();
  if (!s.jvp) GTEST_SKIP() << s.name << " does not check its JVP";
  CheckedFunction c = checked_function(s);
  if (c.checked.empty()) GTEST_SKIP() << s.name << " has no differentiable input";
  Generator gen(seed_of(s.name));
  std::vector<Tensor> tangents;
  for (const Tensor& x : c.primals) tangents.push_back(randn(x.shape(), DType::Float64, &gen));

  auto [y, ty] = jvp(c.fn, c.primals, tangents);
  Tensor u = randn(y.shape(), DType::Float64, &gen);
  const double forward = inner(ty, u);

  std::vector<Tensor> g = vjp(c.fn, c.primals).pullback(u);
  double reverse = 0;
  for (std::size_t j = 0; j < g.size(); ++j) reverse += inner(g[j], tangents[j]);
  EXPECT_NEAR(forward, reverse, s.atol + s.rtol * std::abs(reverse))
      << s.name << ": <u, J v> by jvp " << forward << " vs by vjp " << reverse;
}

// Second order, both ways: for s(x) = <u, f(x)>, the Hessian-vector product forward over
// reverse (the JVP rules of every VJP, under nested dual levels) equals reverse over reverse
// (double backward).
TEST_P(OpGradcheck, HvpModesAgree) {
  const OpSample& s = GetParam();
  if (!s.jvp || !s.gradgrad) GTEST_SKIP() << s.name << " does not check second order";
  CheckedFunction c = checked_function(s);
  if (c.checked.empty()) GTEST_SKIP() << s.name << " has no differentiable input";
  Generator gen(seed_of(s.name) + 1);
  Tensor u = randn(c.fn(c.primals).shape(), DType::Float64, &gen);
  auto scalar = [&](const std::vector<Tensor>& xs) { return (c.fn(xs) * u).sum(); };
  std::vector<Tensor> v;
  for (const Tensor& x : c.primals) v.push_back(randn(x.shape(), DType::Float64, &gen));

  std::vector<Tensor> fwd = hvp(scalar, c.primals, v, HvpMode::ForwardOverReverse);
  std::vector<Tensor> rev = hvp(scalar, c.primals, v, HvpMode::ReverseOverReverse);
  ASSERT_EQ(fwd.size(), rev.size());
  for (std::size_t j = 0; j < fwd.size(); ++j) {
    std::vector<double> a = fwd[j].to_vector<double>(), b = rev[j].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], s.atol + s.rtol * std::abs(b[k]))
          << s.name << ": H v element " << k << " of input " << c.checked[j];
  }
}

TEST_P(OpGradcheck, GradGradMatchesFiniteDifferences) {
  const OpSample& s = GetParam();
  if (!s.gradgrad) GTEST_SKIP() << s.name << " does not check double backward";
  GradcheckResult r = gradgradcheck(s.fn, s.inputs, options_for(s));
  EXPECT_TRUE(r.ok) << s.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpGradcheck,
                         ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });
// The suite still builds and passes while no samples are registered.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpGradcheck);

// Sample names must be unique, also once made into test names, and read "family/op/case".
TEST(OpRegistry, NamesAreUniqueAndWellFormed) {
  std::set<std::string> names, test_names;
  for (const OpSample& s : adjoint::testing::op_registry()) {
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate sample name " << s.name;
    EXPECT_TRUE(test_names.insert(adjoint::testing::sample_test_name(s.name)).second)
        << "sample name " << s.name << " collides with another once made a test name";
    EXPECT_GE(std::count(s.name.begin(), s.name.end(), '/'), 2)
        << "sample name " << s.name << " should read family/op/case";
    EXPECT_TRUE(static_cast<bool>(s.fn)) << s.name << " has no function";
  }
}

}  // namespace
