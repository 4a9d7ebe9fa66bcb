// The registry-driven compile check: for every sample in adjoint::testing::op_registry(), the
// compiled function equals the eager one: its values, its gradients through the compiled
// backward (on the first call, which traces, and on a second call with other values, which
// replays), its gradients with create_graph and the second derivative through them, and its
// JVP (compile under jvp). Without fusion, bit for bit (no other pass reassociates
// arithmetic); with fusion, within a few ulps (a sum folded into a fused loop adds in another
// order). A sample whose trace breaks runs eagerly and must still agree; the breaks are listed
// at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <string>

#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::fixed_cotangent;
using adjoint::testing::needing_grad;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

// Relative tolerance of the comparisons: 0 is bit for bit.
thread_local double tolerance = 0;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  adjoint::testing::expect_same_values(got, want, tolerance, what);
}

std::mutex breaks_mutex;
std::set<std::string>& breaks() {
  static std::set<std::string> b;
  return b;
}

void check_sample(const OpSample& s, bool fuse);

class OpCompile : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpCompile, EqualsEager) {
  tolerance = 0;
  check_sample(GetParam(), false);
  tolerance = 1e-12;  // float64 samples; a few ulps of the sums fusion reorders
  check_sample(GetParam(), true);
  tolerance = 0;
}

void check_sample(const OpSample& s, bool fuse) {
  CompileOptions options;
  options.warn = false;
  options.fuse_pointwise = fuse;
  auto list_fn = [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; };
  CompiledFunction compiled = compile(list_fn, options);

  for (double scale : {1.0, 1.01}) {
    const std::string what = s.name + (scale == 1.0 ? " (first call, traced)" : " (replayed)");
    std::vector<Tensor> xe = sample_leaves(s, scale), xc = sample_leaves(s, scale);
    Tensor ye = s.fn(xe);
    Tensor yc = compiled(xc)[0];
    expect_same(yc, ye, what + ": value");
    if (!is_floating(ye.dtype()) || !ye.requires_grad()) continue;
    const std::vector<Tensor> re = needing_grad(xe), rc = needing_grad(xc);
    const std::vector<Tensor> ge =
        autograd::grad({ye}, re, {fixed_cotangent(ye)}, true, false, true);
    const std::vector<Tensor> gc =
        autograd::grad({yc}, rc, {fixed_cotangent(yc)}, true, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i)
      expect_same(gc[i], ge[i], what + ": gradient " + std::to_string(i));
    if (scale != 1.0 || !s.gradgrad) continue;
    // create_graph: gradients with a graph, and the gradient of their squared norm.
    auto second = [&](const Tensor& y, const std::vector<Tensor>& r) {
      const std::vector<Tensor> g = autograd::grad({y}, r, {fixed_cotangent(y)}, true, true, true);
      Tensor n;
      for (const Tensor& gi : g)
        if (gi.defined() && gi.requires_grad())
          n = n.defined() ? n + (gi * gi).sum() : (gi * gi).sum();
      if (!n.defined()) return std::vector<Tensor>{};
      return autograd::grad({n}, r, {}, false, false, true);
    };
    const std::vector<Tensor> he = second(ye, re), hc = second(yc, rc);
    ASSERT_EQ(hc.size(), he.size()) << what;
    for (std::size_t i = 0; i < he.size(); ++i)
      expect_same(hc[i], he[i], what + ": second derivative " + std::to_string(i));
  }

  if (s.jvp) {
    // compile under jvp: the graph runs op by op through the stack, which pushes tangents.
    std::vector<Tensor> xs = sample_leaves(s, 1.0);
    int a = -1;
    for (std::size_t i = 0; i < xs.size() && a < 0; ++i)
      if (xs[i].defined() && xs[i].requires_grad()) a = static_cast<int>(i);
    if (a >= 0) {
      auto along = [&](const auto& f) {
        return [&, f](const Tensor& t) {
          std::vector<Tensor> ys = xs;
          ys[static_cast<std::size_t>(a)] = t;
          return f(ys);
        };
      };
      const Tensor dir = ones_like(xs[static_cast<std::size_t>(a)]) * 0.5;
      auto eager = jvp(along([&](const std::vector<Tensor>& ys) { return s.fn(ys); }),
                       xs[static_cast<std::size_t>(a)], dir);
      auto comp = jvp(along([&](const std::vector<Tensor>& ys) { return compiled(ys)[0]; }),
                      xs[static_cast<std::size_t>(a)], dir);
      expect_same(comp.outputs, eager.outputs, s.name + " under jvp: value");
      expect_same(comp.tangents, eager.tangents, s.name + " under jvp: tangent");
    }
  }

  const CompileStats st = compiled.stats();
  if (st.graph_breaks > 0) {
    std::lock_guard<std::mutex> lock(breaks_mutex);
    breaks().insert(s.name + ": " + compiled.dump());
  } else {
    EXPECT_LE(st.traces, 2) << s.name;  // grad mode on, then the jvp's stand-ins
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpCompile, ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

// After every test: which samples could not be traced, and why.
class ListGraphBreaks : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& b : breaks()) std::cout << "graph break: " << b;
    std::cout << breaks().size() << " of " << adjoint::testing::op_registry().size()
              << " samples ran eagerly\n";
  }
};
const auto* const list_breaks = ::testing::AddGlobalTestEnvironment(new ListGraphBreaks);

}  // namespace
