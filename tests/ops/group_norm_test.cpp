// group_norm and instance_norm against plain loops (each example's group, or each (example,
// channel) instance, normalised with its biased variance, then the per-channel affine), their
// gradients against the unfused composite of ops, instance_norm's running statistics against a
// loop, and the errors naming each op.
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

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.numel() == 0) return 0;
  return (a.detach().to(DType::Float64) - b.detach().to(DType::Float64)).abs().max().item<double>();
}

// Group norm by a plain loop over x [N, C, *] (contiguous values).
std::vector<double> loop_group_norm(const Tensor& x, int64_t groups, const Tensor& w,
                                    const Tensor& b, double eps) {
  const std::vector<double> v = x.contiguous().to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c), per = c / groups * s;
  const std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(c, 1);
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(c, 0);
  std::vector<double> y(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t start = (i * c + g * (c / groups)) * s;
      double m = 0, var = 0;
      for (int64_t j = 0; j < per; ++j) m += v[start + j];
      m /= static_cast<double>(per);
      for (int64_t j = 0; j < per; ++j) var += (v[start + j] - m) * (v[start + j] - m);
      var /= static_cast<double>(per);
      for (int64_t j = 0; j < per; ++j) {
        const int64_t ch = g * (c / groups) + j / s;
        y[start + j] = (v[start + j] - m) / std::sqrt(var + eps) * wv[ch] + bv[ch];
      }
    }
  return y;
}

// The unfused composite with ops.
Tensor composite(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps) {
  const Tensor xg = x.reshape({x.size(0), groups, -1});
  const Tensor mu = mean(xg, {2}, true);
  const Tensor var = mean((xg - mu).square(), {2}, true);
  Tensor y = ((xg - mu) / sqrt(var + eps)).reshape(x.shape());
  Shape s(static_cast<std::size_t>(x.dim()), 1);
  s[1] = x.size(1);
  if (w.defined()) y = y * w.reshape(s);
  if (b.defined()) y = y + b.reshape(s);
  return y;
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

TEST(GroupNorm, MatchesAPlainLoop) {
  struct Case {
    Shape shape;
    int64_t groups;
  };
  for (const Case& k :
       {Case{{2, 6, 5}, 3}, Case{{3, 4}, 2}, Case{{2, 4, 3, 3}, 1}, Case{{1, 3, 2, 2}, 3}}) {
    const int64_t c = k.shape[1];
    Tensor x = randn_t(k.shape, 1) * 2 + 1, w = randn_t({c}, 2), b = randn_t({c}, 3);
    const std::vector<double> y = group_norm(x, k.groups, w, b, 1e-4).to_vector<double>();
    const std::vector<double> want = loop_group_norm(x, k.groups, w, b, 1e-4);
    ASSERT_EQ(y.size(), want.size());
    for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << k.shape << i;
  }
}

TEST(GroupNorm, GradientsMatchTheComposite) {
  Tensor x = leaf(randn_t({3, 6, 4}, 4)), w = leaf(randn_t({6}, 5)), b = leaf(randn_t({6}, 6));
  Tensor y = group_norm(x, 2, w, b);
  Tensor want = composite(x, 2, w, b, 1e-5);
  EXPECT_LT(max_abs_diff(y, want), 1e-12);
  Tensor gy = randn_t({3, 6, 4}, 7);
  std::vector<Tensor> got = autograd::grad({y}, {x, w, b}, {gy});
  std::vector<Tensor> ref = autograd::grad({want}, {x, w, b}, {gy});
  for (int i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(got[i], ref[i]), 1e-10) << i;
}

TEST(GroupNorm, ChannelsLastAndFloat32) {
  Tensor cl = randn_t({2, 3, 4, 6}, 8, DType::Float32).permute({0, 3, 1, 2});  // [2, 6, 3, 4]
  Tensor y = group_norm(cl, 3);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_LT(max_abs_diff(y, composite(cl.to(DType::Float64), 3, {}, {}, 1e-5)), 1e-5);
}

TEST(GroupNorm, VectorisedFloat32PathMatchesTheFloat64Composite) {
  // Rows of 4 x 42 elements and channels of 42: the Highway loops (32 and more).
  Tensor x64 = randn_t({4, 8, 6, 7}, 11) * 2 + 1, w64 = randn_t({8}, 12), b64 = randn_t({8}, 13);
  Tensor x = leaf(x64.to(DType::Float32)), w = leaf(w64.to(DType::Float32)),
         b = leaf(b64.to(DType::Float32));
  Tensor xd = leaf(x.detach().to(DType::Float64)), wd = leaf(w.detach().to(DType::Float64)),
         bd = leaf(b.detach().to(DType::Float64));
  Tensor y = group_norm(x, 2, w, b), want = composite(xd, 2, wd, bd, 1e-5);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_LT(max_abs_diff(y, want), 2e-5);
  Tensor gy = randn_t({4, 8, 6, 7}, 14);
  std::vector<Tensor> got = autograd::grad({y}, {x, w, b}, {gy.to(DType::Float32)});
  std::vector<Tensor> ref = autograd::grad({want}, {xd, wd, bd}, {gy});
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(max_abs_diff(got[i], ref[i]), 1e-4 * (1 + ref[i].abs().max().item<double>())) << i;
}

TEST(GroupNorm, BadArgumentsAreNamedErrors) {
  Tensor x = randn_t({2, 6, 3}, 9);
  expect_throws_naming([&] { group_norm(x, 4); }, ErrorKind::Value, "group_norm", "divisible");
  expect_throws_naming([&] { group_norm(x, 0); }, ErrorKind::Value, "group_norm");
  expect_throws_naming([&] { group_norm(x, 3, randn_t({3}, 1)); }, ErrorKind::Shape, "group_norm",
                       "weight");
  expect_throws_naming([&] { group_norm(randn_t({6}, 1), 3); }, ErrorKind::Shape, "group_norm");
  expect_throws_naming([&] { group_norm(x, 3, {}, {}, -1); }, ErrorKind::Value, "group_norm",
                       "eps");
}

TEST(InstanceNorm, NormalisesEachInstanceAndUpdatesRunningStatisticsAsALoop) {
  const int64_t n = 3, c = 2, s = 5;
  const double momentum = 0.3;
  Tensor rm = zeros({c}), rv = ones({c});
  std::vector<double> lm(c, 0), lv(c, 1);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn_t({n, c, s}, 10 + step) * (1 + step) - step;
    Tensor w = randn_t({c}, 20), b = randn_t({c}, 21);
    const std::vector<double> y =
        instance_norm(x, rm, rv, w, b, true, momentum, 1e-5).to_vector<double>();
    const std::vector<double> want = loop_group_norm(x, c, w, b, 1e-5);
    for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-12);
    // The running estimate: the instance means and unbiased variances, averaged over the batch.
    const std::vector<double> v = x.to_vector<double>();
    for (int64_t ch = 0; ch < c; ++ch) {
      double mean_sum = 0, var_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        double m = 0, ss = 0;
        for (int64_t j = 0; j < s; ++j) m += v[(i * c + ch) * s + j];
        m /= s;
        for (int64_t j = 0; j < s; ++j)
          ss += (v[(i * c + ch) * s + j] - m) * (v[(i * c + ch) * s + j] - m);
        mean_sum += m;
        var_sum += ss / (s - 1);
      }
      lm[ch] = (1 - momentum) * lm[ch] + momentum * mean_sum / n;
      lv[ch] = (1 - momentum) * lv[ch] + momentum * var_sum / n;
    }
  }
  const std::vector<double> gm = rm.to_vector<double>(), gv = rv.to_vector<double>();
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_NEAR(gm[ch], lm[ch], 1e-6);
    EXPECT_NEAR(gv[ch], lv[ch], 1e-5 * lv[ch]);
  }
}

TEST(InstanceNorm, WithoutInputStatisticsUsesTheRunningOnes) {
  Tensor x = randn_t({2, 3, 4}, 30), rm = randn_t({3}, 31), rv = rand({3}, DType::Float64) + 0.5;
  Tensor y = instance_norm(x, rm, rv, {}, {}, false);
  EXPECT_LT(max_abs_diff(y, batch_norm(x, rm, rv, {}, {}, false)), 1e-15);
  EXPECT_GT(max_abs_diff(y, instance_norm(x)), 1e-3);
}

TEST(InstanceNorm, BadArgumentsAreNamedErrors) {
  expect_throws_naming(
      [&] {
        instance_norm(randn_t({2, 3, 4}, 1), {}, {}, {}, {}, false);
      },
      ErrorKind::Value, "instance_norm", "running_mean");
  expect_throws_naming(
      [&] {
        instance_norm(randn_t({2, 3, 1}, 1));
      },
      ErrorKind::Value, "instance_norm", "spatial");
  expect_throws_naming(
      [&] {
        instance_norm(randn_t({2, 3}, 1));
      },
      ErrorKind::Shape, "instance_norm");
  expect_throws_naming(
      [&] {
        instance_norm(randn_t({2, 3, 4}, 1), zeros({3}));
      },
      ErrorKind::Value, "instance_norm", "together");
  expect_throws_naming(
      [&] {
        instance_norm(randn_t({2, 3, 4}, 1), {}, {}, randn_t({2}, 1));
      },
      ErrorKind::Shape, "instance_norm", "weight");
}
