// The registry-driven check of compile's dynamic sizes (docs/compile.md, "Dynamic sizes"): for
// every sample, dim 0 of the inputs that share input 0's leading size is made dynamic, and the
// compiled function is called at that size, at the size plus one (the two traces, then the
// probe), and at two sizes more, whose graphs are built from the fitted formulas. At every
// size the compiled values and gradients equal eager ones bit for bit (fusion off: no pass
// reassociates). A sample whose graph the formulas do not fit traces each size, and must agree
// all the same; the count of samples that took new sizes without tracing is printed.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::fixed_cotangent;
using adjoint::testing::needing_grad;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

std::atomic<int> built_samples{0}, dynamic_samples{0};

/// xs with their dynamic dims resized to n: row i is row i % (old size), so indices stay valid.
std::vector<Tensor> resized(const std::vector<Tensor>& xs, const std::vector<DynamicDim>& dims,
                            int64_t n) {
  std::vector<Tensor> out = xs;
  std::vector<int64_t> rows(static_cast<std::size_t>(n));
  for (const DynamicDim& d : dims) {
    Tensor& x = out[static_cast<std::size_t>(d.input)];
    for (int64_t r = 0; r < n; ++r) rows[static_cast<std::size_t>(r)] = r % x.size(0);
    Tensor y;
    {
      NoGradGuard no_grad;
      y = index_select(x, 0, tensor(rows)).contiguous().detach();
    }
    if (x.requires_grad()) y.requires_grad_(true);
    x = y;
  }
  return out;
}

class OpCompileDynamic : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpCompileDynamic, EqualsEagerAtEverySize) {
  const OpSample& s = GetParam();
  const std::vector<Tensor>& in = s.inputs;
  if (in.empty() || !in[0].defined() || in[0].dim() == 0 || in[0].size(0) < 2)
    GTEST_SKIP() << "input 0 has no leading dim of 2 or more";
  const int64_t n0 = in[0].size(0);
  std::vector<DynamicDim> dims;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && in[i].dim() > 0 && in[i].size(0) == n0)
      dims.push_back({static_cast<int>(i), 0});

  CompileOptions options;
  options.warn = false;
  options.fuse_pointwise = false;
  options.dynamic = dims;
  auto list_fn = [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; };
  CompiledFunction compiled = compile(list_fn, options);
  for (int64_t n : {n0, n0 + 1, n0 + 2, n0 + 4}) {
    const std::string what = s.name + " at size " + std::to_string(n);
    std::vector<Tensor> xe = resized(sample_leaves(s, 1.0), dims, n);
    std::vector<Tensor> xc = resized(sample_leaves(s, 1.0), dims, n);
    Tensor ye;
    try {
      ye = s.fn(xe);
    } catch (const Error&) {
      // The sample's own sizes do not take this one (a fixed shape): compile throws too.
      EXPECT_THROW(compiled(xc), Error) << what;
      return;
    }
    Tensor yc = compiled(xc)[0];
    adjoint::testing::expect_same_values(yc, ye, 0, what + ": value");
    if (!is_floating(ye.dtype()) || !ye.requires_grad()) continue;
    const std::vector<Tensor> re = needing_grad(xe), rc = needing_grad(xc);
    const std::vector<Tensor> ge =
        autograd::grad({ye}, re, {fixed_cotangent(ye)}, false, false, true);
    const std::vector<Tensor> gc =
        autograd::grad({yc}, rc, {fixed_cotangent(yc)}, false, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i)
      adjoint::testing::expect_same_values(gc[i], ge[i], 0,
                                           what + ": gradient " + std::to_string(i));
  }
  ++dynamic_samples;
  if (compiled.stats().instantiations > 0) ++built_samples;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpCompileDynamic,
                         ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

class CountBuilt : public ::testing::Environment {
 public:
  void TearDown() override {
    std::cout << built_samples << " of " << dynamic_samples
              << " samples that take other sizes took the new ones without a trace\n";
  }
};
const auto* const count_built = ::testing::AddGlobalTestEnvironment(new CountBuilt);

}  // namespace
