// No sample of the op registry breaks a trace (docs/compile.md, "Graph breaks") but those
// listed in `expected_breaks`, each for a reason the docs give: each sample compiles with
// OnGraphBreak::Throw, through its value, its gradient, the second derivative through a
// create_graph gradient, and its JVP. That the compiled results equal eager ones is
// ops_compile_test.cpp's check, over every sample.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::fixed_cotangent;
using adjoint::testing::needing_grad;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

// Samples whose functions do what a graph does not hold, by design of the sample:
// - writes into views ("autograd/as_strided/...", "autograd/copy_slices/..."): an in-place
//   write to memory another traced value shares is refused (Note [In-place ops under compile]);
// - ".../backward_of" and "attention/sdpa/gradient_dropout": the function sets requires_grad_
//   on a tensor it made, which a replay would not do again.
bool expected_break(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const std::string& p) {
    return name.size() >= p.size() && name.compare(name.size() - p.size(), p.size(), p) == 0;
  };
  return starts("autograd/as_strided/") || starts("autograd/copy_slices/") ||
         ends("/backward_of") || name == "attention/sdpa/gradient_dropout";
}

std::vector<OpSample> traceable_samples() {
  std::vector<OpSample> out;
  for (const OpSample& s : adjoint::testing::op_registry())
    if (!expected_break(s.name)) out.push_back(s);
  return out;
}

class CompileNoBreak : public ::testing::TestWithParam<OpSample> {};

TEST_P(CompileNoBreak, TracesWithGraphBreaksThrown) {
  const OpSample& s = GetParam();
  CompileOptions options;
  options.warn = false;
  options.on_graph_break = OnGraphBreak::Throw;
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; }, options);
  for (double scale : {1.0, 1.01}) {  // traced, then replayed
    std::vector<Tensor> xs = sample_leaves(s, scale);
    const Tensor y = compiled(xs)[0];
    const std::vector<Tensor> r = needing_grad(xs);
    if (!is_floating(y.dtype()) || !y.requires_grad()) continue;
    const std::vector<Tensor> g =
        autograd::grad({y}, r, {fixed_cotangent(y)}, true, s.gradgrad, true);
    if (!s.gradgrad) continue;
    Tensor n;
    for (const Tensor& gi : g)
      if (gi.defined() && gi.requires_grad())
        n = n.defined() ? n + gi.square().sum() : gi.square().sum();
    if (n.defined()) autograd::grad({n}, r, {}, false, false, true);
  }
  if (s.jvp) {
    std::vector<Tensor> xs = sample_leaves(s, 1.0);
    for (std::size_t a = 0; a < xs.size(); ++a) {
      if (!xs[a].defined() || !xs[a].requires_grad()) continue;
      jvp(
          [&](const Tensor& t) {
            std::vector<Tensor> ys = xs;
            ys[a] = t;
            return compiled(ys)[0];
          },
          xs[a], ones_like(xs[a]) * 0.5);
      break;
    }
  }
  EXPECT_EQ(compiled.stats().graph_breaks, 0) << s.name;
}

// The list above stays true: each listed sample does break, for its reason.
TEST(CompileNoBreakList, TheListedSamplesBreakForTheirReason) {
  int listed = 0;
  for (const OpSample& s : adjoint::testing::op_registry()) {
    if (!expected_break(s.name)) continue;
    ++listed;
    CompileOptions options;
    options.warn = false;
    options.on_graph_break = OnGraphBreak::Throw;
    CompiledFunction compiled = compile(
        [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; }, options);
    const std::string reason = s.name.rfind("autograd/", 0) == 0
                                   ? "memory another tensor of the function shares"
                                   : "requires_grad_";
    try {
      compiled(sample_leaves(s, 1.0));
      ADD_FAILURE() << s.name << " traced without a break";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos)
          << s.name << ": " << e.what();
    }
  }
  EXPECT_GT(listed, 0);
}

INSTANTIATE_TEST_SUITE_P(Registry, CompileNoBreak, ::testing::ValuesIn(traceable_samples()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

}  // namespace
