// The registry-driven vmap check: for every sample in adjoint::testing::op_registry(), vmap of
// the sample's function over a batch of three examples equals the loop over them, stacked,
// with the batch in front of every input, at the end of every input, and in front of the first
// input only (the others shared). The same for the per-example gradient (vmap(grad)) and the
// per-example JVP (vmap(jvp)) of the first floating input. The examples differ: the k-th scales
// floating inputs by 1 + 0.01 k (the samples stay 0.1 away from kinks and domain edges).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>

#include "support/registry.h"

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;

constexpr int64_t kBatch = 3;

// Example k of input x (a detached copy, floating inputs scaled).
Tensor example(const Tensor& x, int64_t k) {
  if (!x.defined()) return x;
  Tensor d = x.detach();
  return is_floating(d.dtype()) ? d * (1 + 0.01 * static_cast<double>(k)) : d.clone();
}

// Inputs batched at `dim` (an undefined input stays undefined and unbatched).
Tensor batched(const Tensor& x, int64_t dim) {
  std::vector<Tensor> xs;
  for (int64_t k = 0; k < kBatch; ++k) xs.push_back(example(x, k));
  return stack(xs, dim < 0 ? x.dim() + 1 + dim : dim);
}

double max_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  if (a.numel() == 0) return 0;
  Tensor d = (a.detach().to(DType::Float64) - b.detach().to(DType::Float64)).abs();
  // NaN in the same places on both sides counts as equal.
  Tensor both_nan = logical_and(ne(a, a), ne(b, b));
  return where(both_nan, zeros_like(d), d).max().item<double>();
}

enum class Pattern { AllFront, AllLast, FirstOnly };

struct Case {
  std::vector<Tensor> args;
  std::vector<BatchDim> in_dims;
};

Case make_case(const OpSample& s, Pattern p) {
  Case c;
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    const Tensor& x = s.inputs[i];
    const bool batch = x.defined() && (p != Pattern::FirstOnly || i == 0);
    if (!batch) {
      c.args.push_back(x.defined() ? x.detach() : x);
      c.in_dims.push_back(no_batch);
      continue;
    }
    const int64_t dim = p == Pattern::AllLast ? -1 : 0;
    c.args.push_back(batched(x, dim));
    c.in_dims.push_back(dim);
  }
  return c;
}

// f on example k of the case's arguments.
template <class F>
Tensor on_example(const F& f, const Case& c, int64_t k) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.args.size(); ++i)
    xs.push_back(c.in_dims[i] ? c.args[i].select(*c.in_dims[i], k).contiguous() : c.args[i]);
  return f(xs);
}

template <class F>
void expect_matches_loop(const F& f, const Case& c, const std::string& what, double tol) {
  // Random samples seed their own generator in every call, so the loop gives every example
  // the same draws: Randomness::Same is what it computes.
  VmapOptions options;
  options.randomness = Randomness::Same;
  Tensor got = vmap(f, c.in_dims, {0}, options)(c.args);
  std::vector<Tensor> want;
  for (int64_t k = 0; k < kBatch; ++k) want.push_back(on_example(f, c, k));
  const double d = max_diff(got, stack(want, 0));
  EXPECT_LE(d, tol) << what;
}

// The first floating input that the pattern batches (or any, for FirstOnly's shared ones).
int first_floating(const Case& c) {
  for (std::size_t i = 0; i < c.args.size(); ++i)
    if (c.args[i].defined() && is_floating(c.args[i].dtype())) return static_cast<int>(i);
  return -1;
}

class OpVmap : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpVmap, EqualsTheLoopOverExamples) {
  const OpSample& s = GetParam();
  for (Pattern p : {Pattern::AllFront, Pattern::AllLast, Pattern::FirstOnly}) {
    const Case c = make_case(s, p);
    const std::string what = s.name + (p == Pattern::AllFront  ? " (batch in front)"
                                       : p == Pattern::AllLast ? " (batch last)"
                                                               : " (first input batched)");
    auto f = [&](const std::vector<Tensor>& xs) { return s.fn(xs); };
    expect_matches_loop(f, c, what, 1e-10);

    const int a = first_floating(c);
    if (a < 0) continue;
    // Per-example gradient of sum(f) and per-example JVP along a fixed direction.
    auto g = [&](const std::vector<Tensor>& xs) {
      return grad([&](const std::vector<Tensor>& ys) { return s.fn(ys).to(DType::Float64).sum(); },
                  a)(xs);
    };
    expect_matches_loop(g, c, what + " under grad", 1e-9);
    if (!s.jvp) continue;
    auto j = [&](const std::vector<Tensor>& xs) {
      auto along_a = [&](const Tensor& y) {
        std::vector<Tensor> ys = xs;
        ys[a] = y;
        return s.fn(ys);
      };
      return jvp(along_a, xs[a], ones_like(xs[a]) * 0.5).tangents;
    };
    expect_matches_loop(j, c, what + " under jvp", 1e-9);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpVmap, ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

// An empty registry would make the check above vacuous.
TEST(OpVmapRegistry, IsNotEmpty) { EXPECT_GT(adjoint::testing::op_registry().size(), 100u); }

}  // namespace
