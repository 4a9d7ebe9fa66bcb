// The registry-driven gradcheck: for every sample in adjoint::testing::op_registry() (filled by
// the samples_*.cpp files in this folder), the VJP and the JVP against central finite
// differences, the identity <u, J v> computed by forward and by reverse mode, and double
// backward. Test names are the sample names with '/' (and anything else) turned into '_'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>

#include "support/registry.h"

namespace adjoint::testing {
// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const OpSample& s, std::ostream* os) { *os << s.name; }
}  // namespace adjoint::testing

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;

std::string test_name(const std::string& sample_name) {
  std::string n = sample_name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

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

// <u, J v> by forward mode (JVP with tangents v, dotted with u) equals <J^T u, v> by reverse
// mode (VJP with cotangent u, dotted with v), for random u and v.
TEST_P(OpGradcheck, ForwardAndReverseModeAgree) {
  const OpSample& s = GetParam();
  if (!s.jvp) GTEST_SKIP() << s.name << " does not check its JVP";
  Generator gen(seed_of(s.name));
  std::vector<std::size_t> checked;
  std::vector<Tensor> tangents(s.inputs.size());
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    if (!s.inputs[i].defined() || !s.inputs[i].requires_grad()) continue;
    checked.push_back(i);
    tangents[i] = randn(s.inputs[i].shape(), DType::Float64, &gen);
  }
  Tensor y = s.fn(s.inputs);
  Tensor u = randn(y.shape(), DType::Float64, &gen);

  double forward = 0;
  {
    DualLevel level;
    std::vector<Tensor> duals = s.inputs;
    for (std::size_t i : checked) duals[i] = make_dual(s.inputs[i], tangents[i]);
    forward = inner(s.fn(duals).tangent(), u);
  }

  double reverse = 0;
  if (y.requires_grad() && y.numel() > 0 && !checked.empty()) {
    std::vector<Tensor> wrt;
    for (std::size_t i : checked) wrt.push_back(s.inputs[i]);
    std::vector<Tensor> g = autograd::grad({y}, wrt, {u}, std::nullopt, false, true);
    for (std::size_t j = 0; j < checked.size(); ++j) reverse += inner(g[j], tangents[checked[j]]);
  }
  EXPECT_NEAR(forward, reverse, s.atol + s.rtol * std::abs(reverse))
      << s.name << ": <u, J v> by forward mode " << forward << " vs by reverse mode " << reverse;
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
                           return test_name(info.param.name);
                         });
// The suite still builds and passes while no samples are registered.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpGradcheck);

// Sample names must be unique, also once made into test names, and read "family/op/case".
TEST(OpRegistry, NamesAreUniqueAndWellFormed) {
  std::set<std::string> names, test_names;
  for (const OpSample& s : adjoint::testing::op_registry()) {
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate sample name " << s.name;
    EXPECT_TRUE(test_names.insert(test_name(s.name)).second)
        << "sample name " << s.name << " collides with another once made a test name";
    EXPECT_GE(std::count(s.name.begin(), s.name.end(), '/'), 2)
        << "sample name " << s.name << " should read family/op/case";
    EXPECT_TRUE(static_cast<bool>(s.fn)) << s.name << " has no function";
  }
}

}  // namespace
