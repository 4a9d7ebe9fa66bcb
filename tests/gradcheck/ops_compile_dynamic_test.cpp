// The registry-driven check of compile's dynamic sizes (docs/compile.md, "Dynamic sizes"): for
// every sample, dim 0 of the inputs that share input 0's leading size is made dynamic (one
// symbol), and in a second pass also dim 1 of those that share input 0's second size (a second
// symbol). The compiled function is called at the sample's sizes, at other sizes (the two
// traces, then the probes), and at two sizes more, whose graphs are built from the fitted
// formulas. At every size the compiled values and gradients equal eager ones bit for bit
// (fusion off: no pass reassociates). A sample whose graph the formulas do not fit traces each
// size, and must agree all the same; the count of samples that took new sizes without tracing
// is printed.
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

std::atomic<int> built_samples[2], dynamic_samples[2];

/// xs with their dynamic dims resized to `sizes` (by symbol): row i is row i % (old size), so
/// indices stay valid.
std::vector<Tensor> resized(const std::vector<Tensor>& xs, const std::vector<DynamicDim>& dims,
                            const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out = xs;
  for (const DynamicDim& d : dims) {
    Tensor& x = out[static_cast<std::size_t>(d.input)];
    std::vector<int64_t> rows(static_cast<std::size_t>(sizes[static_cast<std::size_t>(d.symbol)]));
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r) % x.size(d.dim);
    Tensor y;
    {
      NoGradGuard no_grad;
      y = index_select(x, d.dim, tensor(rows)).contiguous().detach();
    }
    if (x.requires_grad()) y.requires_grad_(true);
    x = y;
  }
  return out;
}

/// Dim `dim` of the inputs whose size there is input 0's, as symbol `symbol`.
void add_dims(const std::vector<Tensor>& in, int64_t dim, int symbol,
              std::vector<DynamicDim>& dims) {
  const int64_t n = in[0].size(dim);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && in[i].dim() > dim && in[i].size(dim) == n)
      dims.push_back({static_cast<int>(i), dim, symbol});
}

void check_sample(const OpSample& s, int symbols) {
  const std::vector<Tensor>& in = s.inputs;
  std::vector<DynamicDim> dims;
  add_dims(in, 0, 0, dims);
  std::vector<std::vector<int64_t>> calls;
  const int64_t n = in[0].size(0);
  if (symbols == 1) {
    calls = {{n}, {n + 1}, {n + 2}, {n + 4}};
  } else {
    add_dims(in, 1, 1, dims);
    const int64_t m = in[0].size(1);
    calls = {{n, m}, {n + 1, m + 2}, {n + 2, m + 1}, {n + 3, m + 3}};
  }
  CompileOptions options;
  options.warn = false;
  options.fuse_pointwise = false;
  options.dynamic = dims;
  auto list_fn = [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; };
  CompiledFunction compiled = compile(list_fn, options);
  for (const std::vector<int64_t>& sizes : calls) {
    std::string what = s.name + " at sizes";
    for (int64_t k : sizes) what.append(" ").append(std::to_string(k));
    std::vector<Tensor> xe = resized(sample_leaves(s, 1.0), dims, sizes);
    std::vector<Tensor> xc = resized(sample_leaves(s, 1.0), dims, sizes);
    Tensor ye;
    try {
      ye = s.fn(xe);
    } catch (const Error&) {
      // The sample's own sizes do not take these (a fixed shape): compile throws too.
      EXPECT_THROW(compiled(xc), Error) << what;
      return;
    }
    const std::vector<Tensor> re = needing_grad(xe), rc = needing_grad(xc);
    auto eager_grad = [&] {
      return autograd::grad({ye}, re, {fixed_cotangent(ye)}, false, false, true);
    };
    Tensor yc;
    try {
      yc = compiled(xc)[0];
    } catch (const Error&) {
      // Repeated rows and columns make some inputs singular (qr's R with an exactly zero
      // diagonal on OpenBLAS's Haswell and Zen kernels). compile traces the backward with the
      // forward, so the backward's error comes at the call; eager's backward must throw it.
      ASSERT_TRUE(is_floating(ye.dtype()) && ye.requires_grad()) << what;
      EXPECT_THROW(eager_grad(), Error) << what;
      continue;
    }
    adjoint::testing::expect_same_values(yc, ye, 0, what + ": value");
    if (!is_floating(ye.dtype()) || !ye.requires_grad()) continue;
    const std::vector<Tensor> ge = eager_grad();
    const std::vector<Tensor> gc =
        autograd::grad({yc}, rc, {fixed_cotangent(yc)}, false, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i)
      adjoint::testing::expect_same_values(gc[i], ge[i], 0,
                                           what + ": gradient " + std::to_string(i));
  }
  ++dynamic_samples[symbols - 1];
  if (compiled.stats().instantiations > 0) ++built_samples[symbols - 1];
}

class OpCompileDynamic : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpCompileDynamic, OneSymbolEqualsEagerAtEverySize) {
  const std::vector<Tensor>& in = GetParam().inputs;
  if (in.empty() || !in[0].defined() || in[0].dim() == 0 || in[0].size(0) < 2)
    GTEST_SKIP() << "input 0 has no leading dim of 2 or more";
  check_sample(GetParam(), 1);
}

TEST_P(OpCompileDynamic, TwoSymbolsEqualEagerAtEverySize) {
  const std::vector<Tensor>& in = GetParam().inputs;
  if (in.empty() || !in[0].defined() || in[0].dim() < 2 || in[0].size(0) < 2 || in[0].size(1) < 2)
    GTEST_SKIP() << "input 0 has no two leading dims of 2 or more";
  check_sample(GetParam(), 2);
}

INSTANTIATE_TEST_SUITE_P(Registry, OpCompileDynamic,
                         ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

class CountBuilt : public ::testing::Environment {
 public:
  void TearDown() override {
    for (int k = 0; k < 2; ++k)
      std::cout << built_samples[k] << " of " << dynamic_samples[k] << " samples with " << k + 1
                << " dynamic symbol" << (k ? "s" : "") << " took the last sizes without a trace\n";
  }
};
const auto* const count_built = ::testing::AddGlobalTestEnvironment(new CountBuilt);

}  // namespace
