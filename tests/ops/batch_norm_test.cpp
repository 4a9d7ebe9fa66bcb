// batch_norm, batch_norm_stats and batch_norm_backward against independent oracles: the unfused
// composite of ops (mean and biased variance over every dim but 1) for values and gradients, in
// float64 and on the vectorised float32 paths; plain loops for the running statistics over
// several steps (momentum, Bessel's correction) and for evaluation. Also the refusals PyTorch
// makes (one value per channel when training), the empty batch, dtypes, the running-statistic
// update under vmap and compile, and thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

std::vector<int64_t> reduced(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

Tensor per_channel(const Tensor& t, int64_t rank) {
  Shape s(static_cast<std::size_t>(rank), 1);
  s[1] = t.numel();
  return t.reshape(s);
}

// The unfused composite: (x - mean) / sqrt(var + eps) * w + b with batch statistics.
Tensor composite(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<int64_t> dims = reduced(x.dim());
  const Tensor mu = mean(x, dims, true);
  const Tensor var = mean((x - mu).square(), dims, true);
  Tensor y = (x - mu) / sqrt(var + eps);
  if (w.defined()) y = y * per_channel(w, x.dim());
  if (b.defined()) y = y + per_channel(b, x.dim());
  return y;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.numel() == 0) return 0;
  return (a.detach().to(DType::Float64) - b.detach().to(DType::Float64)).abs().max().item<double>();
}

// Per-channel mean and variance of x [N, C, *] by a plain loop (correction 0 or 1).
struct LoopStats {
  std::vector<double> mean, var;
};
LoopStats loop_stats(const Tensor& x, int correction) {
  const std::vector<double> v = x.contiguous().to(DType::Float64).to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / std::max<int64_t>(n * c, 1);
  LoopStats r{std::vector<double>(c, 0), std::vector<double>(c, 0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += v[(i * c + ch) * s + j];
    const double m = sum / static_cast<double>(n * s);
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j)
        ss += (v[(i * c + ch) * s + j] - m) * (v[(i * c + ch) * s + j] - m);
    r.mean[ch] = m;
    r.var[ch] = ss / static_cast<double>(n * s - correction);
  }
  return r;
}

void expect_throws_naming(const std::function<void()>& f, ErrorKind kind, const std::string& op,
                          const std::string& part = "") {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
    if (!part.empty()) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- batch statistics: values and gradients against the composite ----

TEST(BatchNorm, TrainingMatchesTheCompositeAndItsGradientsInFloat64) {
  for (const Shape& shape : {Shape{6, 3}, Shape{3, 4, 7}, Shape{2, 3, 5, 5}, Shape{1, 2, 9}}) {
    const int64_t c = shape[1];
    Tensor x = leaf(randn_t(shape, 1) * 2 + 0.5), w = leaf(randn_t({c}, 2)),
           b = leaf(randn_t({c}, 3));
    Tensor y = batch_norm(x, {}, {}, w, b, true);
    Tensor want = composite(x, w, b, 1e-5);
    EXPECT_LT(max_abs_diff(y, want), 1e-12) << shape;
    Tensor gy = randn_t(shape, 4);
    std::vector<Tensor> got = autograd::grad({y}, {x, w, b}, {gy});
    std::vector<Tensor> ref = autograd::grad({want}, {x, w, b}, {gy});
    for (int i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(got[i], ref[i]), 1e-10) << shape << i;
  }
}

TEST(BatchNorm, VectorisedFloat32PathsMatchTheFloat64Composite) {
  // Segments of S >= 32 take the Highway loops; S = 1 ([N, C]) and S = 7 the scalar ones.
  for (const Shape& shape : {Shape{4, 3, 40}, Shape{3, 5, 8, 9}, Shape{64, 6}, Shape{5, 2, 7}}) {
    const int64_t c = shape[1];
    Tensor x64 = randn_t(shape, 5) * 3 + 1, w64 = randn_t({c}, 6), b64 = randn_t({c}, 7);
    Tensor x = leaf(x64.to(DType::Float32)), w = leaf(w64.to(DType::Float32)),
           b = leaf(b64.to(DType::Float32));
    Tensor y = batch_norm(x, {}, {}, w, b, true);
    EXPECT_EQ(y.dtype(), DType::Float32);
    Tensor xd = leaf(x.detach().to(DType::Float64)), wd = leaf(w.detach().to(DType::Float64)),
           bd = leaf(b.detach().to(DType::Float64));
    Tensor want = composite(xd, wd, bd, 1e-5);
    EXPECT_LT(max_abs_diff(y, want), 2e-5) << shape;
    Tensor gy = randn_t(shape, 8);
    std::vector<Tensor> got = autograd::grad({y}, {x, w, b}, {gy.to(DType::Float32)});
    std::vector<Tensor> ref = autograd::grad({want}, {xd, wd, bd}, {gy});
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(max_abs_diff(got[i], ref[i]), 1e-4 * (1 + ref[i].abs().max().item<double>()))
          << shape << " grad " << i;
  }
}

TEST(BatchNorm, StridedInputsGiveTheContiguousResult) {
  Tensor base = randn_t({2, 5, 4, 3}, 9);  // [N, H, W, C] memory
  Tensor cl = base.permute({0, 3, 1, 2});  // channels-last [N, C, H, W]
  Tensor w = randn_t({3}, 10), b = randn_t({3}, 11);
  EXPECT_LT(max_abs_diff(batch_norm(cl, {}, {}, w, b, true),
                         batch_norm(cl.contiguous(), {}, {}, w, b, true)),
            1e-14);
  Tensor t = randn_t({4, 3, 2}, 12).permute({2, 1, 0});  // [2, 3, 4], non-contiguous
  EXPECT_LT(max_abs_diff(batch_norm(t, {}, {}, w, b, true), composite(t, w, b, 1e-5)), 1e-12);
}

TEST(BatchNorm, BackwardKernelMatchesItsFormulaWithOps) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor x = randn_t({3, 4, 50}, 13, dt), gy = randn_t({3, 4, 50}, 14, dt);
    Tensor w = randn_t({4}, 15, dt), mu = randn_t({4}, 16, dt) * 0.1;
    Tensor rstd = rand({4}, dt) + 0.5;
    Tensor got = batch_norm_backward(gy, x, w, mu, rstd);
    // rstd (g - mean(g) - x̂ mean(g x̂)) with g = gy w, x̂ = (x - mean) rstd, over dims 0 and 2
    Tensor xd = x.to(DType::Float64),
           g = gy.to(DType::Float64) * per_channel(w, 3).to(DType::Float64);
    Tensor a = per_channel(rstd, 3).to(DType::Float64);
    Tensor xh = (xd - per_channel(mu, 3).to(DType::Float64)) * a;
    Tensor want = a * (g - mean(g, {0, 2}, true) - xh * mean(g * xh, {0, 2}, true));
    EXPECT_LT(max_abs_diff(got, want), dt == DType::Float64 ? 1e-12 : 1e-5) << dt;
  }
}

TEST(BatchNorm, StatsAreTheMeanAndUnbiasedVariancePerChannel) {
  Tensor x = randn_t({3, 4, 5, 2}, 17) * 2 + 3;
  const BatchNormStats s = batch_norm_stats(x);
  const LoopStats want = loop_stats(x, 1);
  const std::vector<double> m = s.mean.to_vector<double>(), v = s.var.to_vector<double>();
  for (int ch = 0; ch < 4; ++ch) {
    EXPECT_NEAR(m[ch], want.mean[ch], 1e-12);
    EXPECT_NEAR(v[ch], want.var[ch], 1e-12);
  }
  EXPECT_LT(max_abs_diff(s.var, var(x, {0, 2, 3})), 1e-12);
}

// ---- running statistics ----

TEST(BatchNorm, RunningStatisticsFollowAPlainLoopOverSeveralSteps) {
  for (double momentum : {0.1, 0.35}) {
    const int64_t c = 3;
    Tensor rm = zeros({c}), rv = ones({c});
    std::vector<double> lm(c, 0), lv(c, 1);
    for (int step = 0; step < 4; ++step) {
      Tensor x = randn_t({4, c, 3, 2}, 20 + step) * (1 + step) + step;
      batch_norm(x, rm, rv, {}, {}, true, momentum);
      const LoopStats s = loop_stats(x, 1);  // Bessel's correction for the running estimate
      for (int64_t ch = 0; ch < c; ++ch) {
        lm[ch] = (1 - momentum) * lm[ch] + momentum * s.mean[ch];
        lv[ch] = (1 - momentum) * lv[ch] + momentum * s.var[ch];
      }
    }
    const std::vector<double> gm = rm.to_vector<double>(), gv = rv.to_vector<double>();
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(gm[ch], lm[ch], 1e-6) << momentum;  // float32 buffers
      EXPECT_NEAR(gv[ch], lv[ch], 1e-5 * lv[ch]) << momentum;
    }
  }
}

TEST(BatchNorm, NormalisesWithTheBiasedBatchVarianceWhileTrackingTheUnbiasedOne) {
  Tensor x = randn_t({2, 2, 3}, 30);
  Tensor rm = zeros({2}, DType::Float64), rv = zeros({2}, DType::Float64);
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, 1.0, 0);  // momentum 1: the batch's own
  const LoopStats biased = loop_stats(x, 0), unbiased = loop_stats(x, 1);
  const std::vector<double> gv = rv.to_vector<double>();
  for (int ch = 0; ch < 2; ++ch) EXPECT_NEAR(gv[ch], unbiased.var[ch], 1e-12);
  // Every channel of y has variance 1 under the biased estimate.
  const LoopStats ys = loop_stats(y, 0);
  for (int ch = 0; ch < 2; ++ch) {
    EXPECT_NEAR(ys.var[ch], 1, 1e-10);
    EXPECT_GT(unbiased.var[ch], biased.var[ch]);
  }
}

TEST(BatchNorm, EvaluationUsesTheRunningStatistics) {
  Tensor x = leaf(randn_t({3, 2, 4}, 31)), w = leaf(randn_t({2}, 32)), b = leaf(randn_t({2}, 33));
  Tensor rm = randn_t({2}, 34), rv = rand({2}, DType::Float64) + 0.5;
  const Tensor rm0 = rm.clone(), rv0 = rv.clone();
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-3);
  const std::vector<double> xv = x.detach().to_vector<double>(),
                            yv = y.detach().to_vector<double>(), m = rm.to_vector<double>(),
                            v = rv.to_vector<double>(), wv = w.detach().to_vector<double>(),
                            bv = b.detach().to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int ch = 0; ch < 2; ++ch)
      for (int j = 0; j < 4; ++j) {
        const int k = (i * 2 + ch) * 4 + j;
        EXPECT_NEAR(yv[k], (xv[k] - m[ch]) / std::sqrt(v[ch] + 1e-3) * wv[ch] + bv[ch], 1e-12);
      }
  EXPECT_EQ(max_abs_diff(rm, rm0), 0);  // evaluation updates nothing
  EXPECT_EQ(max_abs_diff(rv, rv0), 0);
  // Training normalises with the batch instead: a different result from the same input.
  EXPECT_GT(max_abs_diff(batch_norm(x, rm, rv, w, b, true, 0.1, 1e-3), y), 1e-3);
  // The evaluation gradient: w / sqrt(var + eps) per channel.
  Tensor g = autograd::grad({y.sum()}, {x})[0];
  for (int ch = 0; ch < 2; ++ch)
    EXPECT_NEAR(g.select(1, ch).max().item<double>(), wv[ch] / std::sqrt(v[ch] + 1e-3), 1e-12);
}

TEST(BatchNorm, TheUpdateIsNotDifferentiatedAndKeepsTheBuffersDtype) {
  Tensor x = leaf(randn_t({4, 3}, 35));
  Tensor rm = zeros({3}), rv = ones({3});  // float32 buffers, float64 input
  Tensor y = batch_norm(x, rm, rv, {}, {}, true);
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_EQ(rm.dtype(), DType::Float32);
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_FALSE(rv.requires_grad());
  EXPECT_GT(rm.abs().max().item<double>(), 0);
}

TEST(BatchNorm, EmptyBatchGivesAnEmptyOutputAndLeavesTheRunningStatistics) {
  Tensor x = leaf(randn_t({0, 3, 4}, 36)), w = leaf(randn_t({3}, 37));
  Tensor rm = randn_t({3}, 38), rv = ones({3});
  const Tensor rm0 = rm.clone();
  Tensor y = batch_norm(x, rm, rv, w, {}, true);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 4}));
  EXPECT_EQ(max_abs_diff(rm, rm0), 0);
  std::vector<Tensor> g = autograd::grad({y.sum()}, {x, w});
  EXPECT_EQ(g[0].shape(), (Shape{0, 3, 4}));
  EXPECT_EQ(g[1].abs().sum().item<double>(), 0);
}

// ---- dtypes and errors ----

TEST(BatchNorm, DtypesPromoteToTheWiderOfInputAndParameters) {
  Tensor x = randn_t({4, 3, 5}, 39, DType::BFloat16);
  Tensor w = randn_t({3}, 40, DType::Float32);
  Tensor y = batch_norm(x, {}, {}, w, {}, true);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_LT(max_abs_diff(y, composite(x.to(DType::Float64), w.to(DType::Float64), {}, 1e-5)), 1e-4);
  Tensor xi = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 7}).reshape({3, 2});
  EXPECT_EQ(batch_norm(xi, {}, {}, {}, {}, true).dtype(), kDefaultFloat);
  Tensor yb = batch_norm(x, {}, {}, {}, {}, true);
  EXPECT_EQ(yb.dtype(), DType::BFloat16);
  // float32 running statistics of a bfloat16 model: the output keeps the model's dtype.
  Tensor rm = randn_t({3}, 41, DType::Float32), rv = rand({3}) + 0.5;
  Tensor ye = batch_norm(x, rm, rv, {}, {}, false);
  EXPECT_EQ(ye.dtype(), DType::BFloat16);
  Tensor want = (x.to(DType::Float64) - per_channel(rm, 3).to(DType::Float64)) /
                sqrt(per_channel(rv, 3).to(DType::Float64) + 1e-5);
  EXPECT_LT(max_abs_diff(ye, want), 0.02 * (1 + want.abs().max().item<double>()));
}

TEST(BatchNorm, OneValuePerChannelWhenTrainingIsAnError) {
  Tensor rm = zeros({3}), rv = ones({3});
  expect_throws_naming(
      [&] {
        batch_norm(randn_t({1, 3}, 41), rm, rv, {}, {}, true);
      },
      ErrorKind::Value, "batch_norm", "more than 1 value per channel");
  expect_throws_naming(
      [&] {
        batch_norm(randn_t({1, 3, 1, 1}, 41), {}, {}, {}, {}, true);
      },
      ErrorKind::Value, "batch_norm", "[1, 3, 1, 1]");
  // Evaluation with running statistics is fine, as in PyTorch.
  EXPECT_EQ(batch_norm(randn_t({1, 3}, 41), rm, rv, {}, {}, false).shape(), (Shape{1, 3}));
}

TEST(BatchNorm, BadArgumentsAreNamedErrors) {
  Tensor x = randn_t({4, 3, 2}, 42);
  expect_throws_naming([&] { batch_norm(randn_t({4}, 1), {}, {}, {}, {}, true); }, ErrorKind::Shape,
                       "batch_norm", "[4]");
  expect_throws_naming([&] { batch_norm(x, {}, {}, randn_t({2}, 1), {}, true); }, ErrorKind::Shape,
                       "batch_norm", "weight");
  expect_throws_naming(
      [&] {
        batch_norm(x, {}, {}, {}, randn_t({3, 1}, 1), true);
      },
      ErrorKind::Shape, "batch_norm", "bias");
  expect_throws_naming([&] { batch_norm(x, zeros({3}), {}, {}, {}, true); }, ErrorKind::Value,
                       "batch_norm", "together");
  expect_throws_naming([&] { batch_norm(x, zeros({4}), ones({4}), {}, {}, true); },
                       ErrorKind::Shape, "batch_norm", "running_mean");
  expect_throws_naming([&] { batch_norm(x, {}, {}, {}, {}, true, 0.1, -1); }, ErrorKind::Value,
                       "batch_norm", "eps");
  expect_throws_naming([&] { batch_norm(Tensor(), {}, {}, {}, {}, true); }, ErrorKind::Value,
                       "batch_norm");
  expect_throws_naming([&] { batch_norm_stats(randn_t({3}, 1)); }, ErrorKind::Shape,
                       "batch_norm_stats");
  expect_throws_naming(
      [&] {
        batch_norm_backward(randn_t({4, 3}, 1), x, {}, zeros({3}), ones({3}));
      },
      ErrorKind::Shape, "batch_norm_backward", "gradient");
  expect_throws_naming([&] { batch_norm_backward(x, x, {}, zeros({2}), ones({3})); },
                       ErrorKind::Shape, "batch_norm_backward", "mean");
}

// ---- the running-statistic update under the transforms ----

TEST(BatchNorm, VmapUpdatesBatchedRunningStatisticsPerExample) {
  const int64_t batch = 3, c = 2;
  Tensor xs = randn_t({batch, 4, c, 3}, 43);
  Tensor rms = zeros({batch, c}, DType::Float64), rvs = ones({batch, c}, DType::Float64);
  Tensor ys = vmap([](const Tensor& x, const Tensor& rm, const Tensor& rv) {
    return batch_norm(x, rm, rv, {}, {}, true, 0.2);
  })(xs, rms, rvs);
  for (int64_t k = 0; k < batch; ++k) {
    Tensor rm = zeros({c}, DType::Float64), rv = ones({c}, DType::Float64);
    Tensor y = batch_norm(xs.select(0, k), rm, rv, {}, {}, true, 0.2);
    EXPECT_LT(max_abs_diff(ys.select(0, k), y), 1e-12) << k;
    EXPECT_LT(max_abs_diff(rms.select(0, k), rm), 1e-12) << k;
    EXPECT_LT(max_abs_diff(rvs.select(0, k), rv), 1e-12) << k;
  }
}

TEST(BatchNorm, VmapRefusesToUpdateUnbatchedRunningStatistics) {
  Tensor xs = randn_t({3, 4, 2}, 44);
  Tensor rm = zeros({2}, DType::Float64), rv = ones({2}, DType::Float64);
  expect_throws_naming(
      [&] { vmap([&](const Tensor& x) { return batch_norm(x, rm, rv, {}, {}, true); })(xs); },
      ErrorKind::Value, "batch_norm", "running statistics");
  EXPECT_EQ(rm.abs().sum().item<double>(), 0);  // nothing written
  // Evaluation reads them, which vmap allows.
  Tensor ys = vmap([&](const Tensor& x) { return batch_norm(x, rm, rv, {}, {}, false); })(xs);
  EXPECT_LT(max_abs_diff(ys, xs / std::sqrt(1 + 1e-5)), 1e-12);
}

// The running statistics' update is a write to captured tensors, made at each replay (Note
// [In-place ops under compile]).
TEST(BatchNorm, CompileReplaysTheUpdateAsAWriteAndEvaluationAsAGraph) {
  Tensor rm = zeros({2}, DType::Float64), rv = ones({2}, DType::Float64);
  auto train = compile([&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{batch_norm(in[0], rm, rv, {}, {}, true, 0.5)};
  });
  Tensor rm_loop = zeros({2}, DType::Float64), rv_loop = ones({2}, DType::Float64);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn_t({4, 2, 3}, 45 + step);
    Tensor y = train({x})[0];
    Tensor want = batch_norm(x, rm_loop, rv_loop, {}, {}, true, 0.5);
    EXPECT_LT(max_abs_diff(y, want), 1e-12);
    EXPECT_LT(max_abs_diff(rm, rm_loop), 1e-12) << step;  // updated once per call
    EXPECT_LT(max_abs_diff(rv, rv_loop), 1e-12) << step;
  }
  EXPECT_EQ(train.stats().graph_breaks, 0);
  EXPECT_EQ(train.stats().traces, 1);
  auto eval = compile([&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{batch_norm(in[0], rm, rv, {}, {}, false)};
  });
  Tensor x = randn_t({4, 2, 3}, 50);
  for (int i = 0; i < 2; ++i)
    EXPECT_LT(max_abs_diff(eval({x})[0], batch_norm(x, rm, rv, {}, {}, false)), 1e-12);
  EXPECT_EQ(eval.stats().graph_breaks, 0);
  EXPECT_EQ(eval.stats().traces, 1);
  EXPECT_EQ(eval.stats().eager_calls, 0);
}

TEST(BatchNorm, ResultsDoNotDependOnTheThreadCount) {
  Tensor x = randn_t({8, 16, 12, 12}, 51, DType::Float32),
         gy = randn_t({8, 16, 12, 12}, 52, DType::Float32);
  Tensor w = randn_t({16}, 53, DType::Float32);
  const int before = get_num_threads();
  std::vector<Tensor> outs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor xl = leaf(x), wl = leaf(w);
    Tensor y = batch_norm(xl, {}, {}, wl, {}, true);
    Tensor gx = autograd::grad({y}, {xl}, {gy})[0];
    outs.push_back(y.detach());
    outs.push_back(gx);
  }
  set_num_threads(before);
  EXPECT_EQ(max_abs_diff(outs[0], outs[2]), 0);
  EXPECT_EQ(max_abs_diff(outs[1], outs[3]), 0);
}

TEST(BatchNorm, VmapOverNoExamplesGivesEmptyResultsOfTheRightShape) {
  Tensor xs = randn_t({0, 4, 3, 5}, 60), w = randn_t({3}, 61);
  auto bn = [&](const Tensor& x) { return batch_norm(x, {}, {}, w, {}, true); };
  EXPECT_EQ(vmap(bn)(xs).shape(), (Shape{0, 4, 3, 5}));
  auto gn = [&](const Tensor& x) { return group_norm(x, 3, w); };
  EXPECT_EQ(vmap(gn)(xs).shape(), (Shape{0, 4, 3, 5}));
  auto stats = [](const Tensor& x) { return batch_norm_stats(x).var; };
  EXPECT_EQ(vmap(stats)(xs).shape(), (Shape{0, 3}));
}

// As with torch.utils.checkpoint: the region runs again in backward, update included, so the
// running statistics take a second step (docs/vision.md says so). The gradient is exact.
TEST(BatchNorm, CheckpointRecomputationUpdatesTheRunningStatisticsAgain) {
  Tensor rm = zeros({2}, DType::Float64), rv = ones({2}, DType::Float64);
  Tensor x = leaf(randn_t({4, 2, 3}, 70));
  Tensor y = checkpoint(
      [&](const std::vector<Tensor>& xs) { return batch_norm(xs[0], rm, rv, {}, {}, true, 0.5); },
      {x});
  Tensor rm_once = zeros({2}, DType::Float64), rv_once = ones({2}, DType::Float64);
  Tensor x2 = leaf(x.detach());
  Tensor y2 = batch_norm(x2, rm_once, rv_once, {}, {}, true, 0.5);
  EXPECT_LT(max_abs_diff(rm, rm_once), 1e-15);  // the forward: one step
  Tensor g = autograd::grad({(y * y.detach()).sum()}, {x})[0];
  EXPECT_LT(max_abs_diff(g, autograd::grad({(y2 * y2.detach()).sum()}, {x2})[0]), 1e-12);
  batch_norm(x2.detach(), rm_once, rv_once, {}, {}, true, 0.5);  // a second step
  EXPECT_LT(max_abs_diff(rm, rm_once), 1e-15);
  EXPECT_LT(max_abs_diff(rv, rv_once), 1e-15);
}
