// The registry-driven check of transforms over compiled functions: for every sample in
// adjoint::testing::op_registry(), vmap, jacrev, jacfwd, hessian and vmap(grad) of compile(f),
// and compile(vmap(f)) and compile(jacrev(f)), equal the same transforms of f itself (the
// eager transform is the oracle). vmap runs a batch of three
// examples with the batch in front of every input; the Jacobians are taken along the first
// input that requires grad; the Hessian of the float64 sum of f's output, where the sample has
// second derivatives. When the eager transform throws, the compiled one must throw too.
//
// These are the combinations a replay meets through the engine (jacrev's batched cotangents
// reach the compiled backward node) and through the dispatch stack (vmap and jvp replay the
// graph op by op), which ops_compile_test.cpp does not cover.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>

#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

constexpr int64_t kBatch = 3;
// Relative tolerance: fusion reorders a few float64 sums.
constexpr double kTolerance = 1e-10;

// The result of a transform, or the message of the Error it threw.
struct Outcome {
  std::optional<Tensor> value;
  std::string error;
};

Outcome run(const std::function<Tensor()>& f) {
  try {
    return {f(), ""};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  }
}

void expect_same_outcome(const Outcome& got, const Outcome& want, const std::string& what) {
  if (!want.value) {
    // A generator made inside f from C++ values makes the compiled function's draws constants
    // of the trace (docs/compile.md), which vmap may batch; eager code draws under vmap, which
    // refuses by default (the dropout samples under jacfwd).
    if (want.error.find("random values would be ambiguous") != std::string::npos) return;
    EXPECT_FALSE(got.value) << what << ": eager threw (" << want.error
                            << ") but the compiled function did not";
    return;
  }
  ASSERT_TRUE(got.value) << what << ": the compiled function threw: " << got.error;
  adjoint::testing::expect_same_values(*got.value, *want.value, kTolerance, what);
}

// Example k of x: floating inputs scaled by 1 + 0.01 k, so that the examples differ.
Tensor example(const Tensor& x, int64_t k) {
  if (!x.defined()) return x;
  Tensor d = x.detach();
  return is_floating(d.dtype()) ? d * (1 + 0.01 * static_cast<double>(k)) : d.clone();
}

int first_needing_grad(const std::vector<Tensor>& xs) {
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].defined() && xs[i].requires_grad() && is_floating(xs[i].dtype()))
      return static_cast<int>(i);
  return -1;
}

class OpCompileTransforms : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpCompileTransforms, EqualTheEagerTransforms) {
  const OpSample& s = GetParam();
  CompileOptions options;
  options.warn = false;
  CompiledFunction compiled = compile(
      [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; }, options);
  auto eager_fn = [&](const std::vector<Tensor>& xs) { return s.fn(xs); };
  auto compiled_fn = [&](const std::vector<Tensor>& xs) { return compiled(xs)[0]; };

  // vmap of the compiled function: every input batched in front.
  {
    std::vector<Tensor> args;
    std::vector<BatchDim> dims;
    for (const Tensor& x : s.inputs) {
      if (!x.defined()) {
        args.push_back(x);
        dims.push_back(no_batch);
        continue;
      }
      std::vector<Tensor> xs;
      for (int64_t k = 0; k < kBatch; ++k) xs.push_back(example(x, k));
      args.push_back(stack(xs, 0));
      dims.push_back(0);
    }
    VmapOptions vo;
    vo.randomness = Randomness::Same;
    const Outcome want = run([&] { return vmap(eager_fn, dims, {0}, vo)(args); });
    const Outcome got = run([&] { return vmap(compiled_fn, dims, {0}, vo)(args); });
    expect_same_outcome(got, want, s.name + ": vmap(compile(f))");
    // compile of the batched function: the trace records the rules' physical ops.
    CompiledFunction batched = compile(
        [&](const std::vector<Tensor>& xs) {
          return std::vector<Tensor>{vmap(eager_fn, dims, {0}, vo)(xs)};
        },
        options);
    expect_same_outcome(run([&] { return batched(args)[0]; }), want, s.name + ": compile(vmap(f))");
  }

  const std::vector<Tensor> xs = sample_leaves(s, 1.0);
  const int a = first_needing_grad(xs);
  if (a < 0) return;
  auto along = [&](const auto& f) {
    return [&xs, a, f](const Tensor& t) {
      std::vector<Tensor> ys = xs;
      ys[static_cast<std::size_t>(a)] = t;
      return f(ys);
    };
  };
  const Tensor x = xs[static_cast<std::size_t>(a)].detach();
  const auto eager_a = along(eager_fn);
  const auto compiled_a = along(compiled_fn);
  {
    const Outcome probe = run([&] { return eager_a(x); });
    if (!probe.value || !is_floating(probe.value->dtype())) return;
  }

  const Outcome jac = run([&] { return jacrev(eager_a)(x); });
  expect_same_outcome(run([&] { return jacrev(compiled_a)(x); }), jac,
                      s.name + ": jacrev(compile(f))");
  // compile of the Jacobian: the trace records the VJP ops under jacrev's vmap.
  CompiledFunction compiled_jac = compile(
      [&](const std::vector<Tensor>& ts) { return std::vector<Tensor>{jacrev(eager_a)(ts[0])}; },
      options);
  expect_same_outcome(run([&] { return compiled_jac({x})[0]; }), jac,
                      s.name + ": compile(jacrev(f))");
  // Per-example gradients of the compiled function: vmap over grad of compile(f).
  {
    auto total_of = [](const auto& f) {
      return [f](const Tensor& t) { return f(t).to(DType::Float64).sum(); };
    };
    std::vector<Tensor> xs3;
    for (int64_t k = 0; k < kBatch; ++k) xs3.push_back(example(x, k));
    const Tensor xb = stack(xs3, 0);
    VmapOptions vo;
    vo.randomness = Randomness::Same;
    expect_same_outcome(run([&] { return vmap(grad(total_of(compiled_a)), {0}, {0}, vo)(xb); }),
                        run([&] { return vmap(grad(total_of(eager_a)), {0}, {0}, vo)(xb); }),
                        s.name + ": vmap(grad(compile(f)))");
  }
  if (!s.jvp) return;
  expect_same_outcome(run([&] { return jacfwd(compiled_a)(x); }),
                      run([&] { return jacfwd(eager_a)(x); }), s.name + ": jacfwd(compile(f))");
  if (!s.gradgrad) return;
  auto total = [](const auto& f) {
    return [f](const Tensor& t) { return f(t).to(DType::Float64).sum(); };
  };
  expect_same_outcome(run([&] { return hessian(total(compiled_a))(x); }),
                      run([&] { return hessian(total(eager_a))(x); }),
                      s.name + ": hessian(compile(f))");
}

INSTANTIATE_TEST_SUITE_P(Registry, OpCompileTransforms,
                         ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

}  // namespace
