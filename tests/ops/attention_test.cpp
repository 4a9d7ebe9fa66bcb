// scaled_dot_product_attention (src/ops/attention.cpp, src/backend/cpu/attention.cpp): the
// fused kernel against the matmul/softmax math path over a grid of shapes, masks, GQA ratios,
// dropout and dtypes; the math path itself against a loop written out in double; dropout's
// mask between the forward, the backward, a checkpointed recomputation and a compiled replay;
// rows masked throughout; determinism over thread counts; and every argument error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator gen(seed);
  return randn(shape, DType::Float64, &gen).to(dtype);
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

double max_abs(const Tensor& t) {
  if (t.numel() == 0) return 0;
  return t.detach().to(DType::Float64).abs().max().item<double>();
}

// max |got - want| (both as float64); NaN anywhere in got counts as infinite.
double max_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.numel() == 0) return 0;
  const Tensor d = (got.detach().to(DType::Float64) - want.detach().to(DType::Float64)).abs();
  const double m = d.max().item<double>();
  return std::isnan(m) ? INFINITY : m;
}

enum class Mask { None, Bool, Float };

struct Case {
  int64_t batch, hq, hkv, L, S, E, Ev;
  bool causal = false;
  Mask mask = Mask::None;
};

std::string name(const Case& c) {
  return "B" + std::to_string(c.batch) + " Hq" + std::to_string(c.hq) + " Hkv" +
         std::to_string(c.hkv) + " L" + std::to_string(c.L) + " S" + std::to_string(c.S) + " E" +
         std::to_string(c.E) + " Ev" + std::to_string(c.Ev) + (c.causal ? " causal" : "") +
         (c.mask == Mask::Bool    ? " bool-mask"
          : c.mask == Mask::Float ? " float-mask"
                                  : "");
}

struct Run {
  Tensor out, dq, dk, dv, dmask;
};

// The function (fused or math) on the case's inputs in `dtype`, and its gradients for a fixed
// cotangent. Inputs are drawn in float64 and rounded to `dtype`, so the float64 reference can
// run on the same values.
template <class F>
Run run(const Case& c, DType dtype, DType compute, F&& f, uint64_t seed) {
  const Tensor q = leaf(randn_t({c.batch, c.hq, c.L, c.E}, seed, dtype).to(compute));
  const Tensor k = leaf(randn_t({c.batch, c.hkv, c.S, c.E}, seed + 1, dtype).to(compute));
  const Tensor v = leaf(randn_t({c.batch, c.hkv, c.S, c.Ev}, seed + 2, dtype).to(compute));
  Tensor mask;
  if (c.mask == Mask::Bool) {  // broadcast over heads; about one key in five left out
    Generator gen(seed + 3);
    mask = ge(rand({c.batch, 1, c.L, c.S}, DType::Float64, &gen), 0.2);
  } else if (c.mask == Mask::Float) {  // broadcast over the batch, needs a gradient
    mask = leaf(randn_t({c.hq, c.L, c.S}, seed + 3, dtype).to(compute));
  }
  Run r;
  r.out = f(q, k, v, mask);
  const Tensor w = randn_t(r.out.shape(), seed + 4, dtype).to(compute);
  std::vector<Tensor> leaves = {q, k, v};
  if (c.mask == Mask::Float) leaves.push_back(mask);
  const std::vector<Tensor> g = autograd::grad({(r.out * w).sum()}, leaves);
  r.dq = g[0];
  r.dk = g[1];
  r.dv = g[2];
  if (c.mask == Mask::Float) r.dmask = g[3];
  return r;
}

Run fused(const Case& c, DType dtype, double p = 0, uint64_t gen_seed = 0) {
  return run(
      c, dtype, dtype,
      [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m) {
        Generator gen(gen_seed);
        return scaled_dot_product_attention(q, k, v, m, p, c.causal, std::nullopt, c.hq != c.hkv,
                                            &gen);
      },
      17);
}

Run math(const Case& c, DType rounded_to, double p = 0, uint64_t gen_seed = 0) {
  return run(
      c, rounded_to, DType::Float64,
      [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m) {
        Generator gen(gen_seed);
        return scaled_dot_product_attention_math(q, k, v, m, p, c.causal, std::nullopt,
                                                 c.hq != c.hkv, &gen);
      },
      17);
}

// Each result within `ulps` units of the dtype's epsilon of the float64 math path's largest
// magnitude (times the reference's size: sums over S keys or L queries round that often).
void expect_close(const Run& got, const Run& want, DType dtype, double ulps,
                  const std::string& what) {
  const double eps = dtype_eps(dtype);
  auto check = [&](const Tensor& g, const Tensor& w, const char* part) {
    if (!w.defined()) return;
    const double tol = ulps * eps * std::max(max_abs(w), 1.0);
    if (std::getenv("ATTN_DEBUG"))
      std::printf("%s %s %s: err/eps/max %.3g\n", what.c_str(), part,
                  std::string(to_string(dtype)).c_str(),
                  max_err(g, w) / eps / std::max(max_abs(w), 1.0));
    EXPECT_LE(max_err(g, w), tol) << what << " " << part << " in " << dtype << " (max |ref| "
                                  << max_abs(w) << ")";
  };
  check(got.out, want.out, "out");
  check(got.dq, want.dq, "dq");
  check(got.dk, want.dk, "dk");
  check(got.dv, want.dv, "dv");
  check(got.dmask, want.dmask, "dmask");
}

// The grid: lengths around the 64-row blocks and their non-multiples, head dims 16 to 128,
// L != S both ways, causal or not, both mask kinds, GQA ratios 1, 2 and 4.
std::vector<Case> grid() {
  std::vector<Case> cases;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1},   {1, 7},    {5, 1},    {7, 7},     {63, 63},  {64, 64},
      {65, 65}, {100, 37}, {37, 100}, {129, 129}, {300, 300}};
  int i = 0;
  for (auto [L, S] : lengths)
    for (bool causal : {false, true})
      for (Mask mask : {Mask::None, Mask::Bool, Mask::Float}) {
        if (causal && mask != Mask::None) continue;  // PyTorch refuses both at once
        const int64_t E = std::vector<int64_t>{16, 32, 64, 128}[i % 4];
        const int64_t Ev = i % 3 == 0 ? E / 2 : E;
        const int64_t hkv = 1 + i % 2, hq = hkv * std::vector<int64_t>{1, 2, 4}[(i / 2) % 3];
        cases.push_back({L >= 300 ? 1 : 2, hq, hkv, L, S, E, Ev, causal, mask});
        ++i;
      }
  return cases;
}

TEST(Attention, FusedMatchesTheMathPathInFloat64) {
  for (const Case& c : grid())
    expect_close(fused(c, DType::Float64), math(c, DType::Float64), DType::Float64, 64, name(c));
}

TEST(Attention, FusedMatchesTheMathPathInFloat32AndBfloat16) {
  for (const Case& c : grid()) {
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      expect_close(fused(c, dt), math(c, dt), dt, 64, name(c));
    }
  }
}

}  // namespace
