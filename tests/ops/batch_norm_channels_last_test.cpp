// batch_norm on channels-last inputs (read and written in place by the kernels of
// src/backend/cpu/batch_norm_channels_last.cpp) against the plain NCHW path on the same values
// and against the unfused float64 composite: outputs, running statistics, the gradients of x,
// weight and bias, batch_norm_stats and batch_norm_backward on their own, float32, float64 and
// bfloat16, odd sizes (C = 3, 17, 32; N = 1; H W = 1), evaluation, an empty batch, the output's
// strides, thread-count independence and a bad weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

// x [N, C, *sp] with channels-last memory: an [N, *sp, C] tensor permuted.
Tensor channels_last_of(const Shape& shape, uint64_t seed, DType dtype) {
  Shape mem{shape[0]};
  std::vector<int64_t> perm{0, static_cast<int64_t>(shape.size()) - 1};
  for (std::size_t d = 2; d < shape.size(); ++d) {
    mem.push_back(shape[d]);
    perm.push_back(static_cast<int64_t>(d) - 1);
  }
  mem.push_back(shape[1]);
  return (randn_t(mem, seed) * 2 + 0.5).to(dtype).permute(perm);
}

// The channels-last strides of `shape`, written out: C innermost, then the last spatial dim, ...
Shape expected_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = shape[1];
  st[1] = 1;
  for (std::size_t d = shape.size() - 1; d >= 2; --d) {
    st[d] = s;
    s *= shape[d];
  }
  st[0] = s;
  return st;
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

// max |a - b| / (1 + max |b|): a tolerance in units of the result's size.
double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.numel() == 0) return 0;
  const Tensor a64 = a.detach().to(DType::Float64), b64 = b.detach().to(DType::Float64);
  return (a64 - b64).abs().max().item<double>() / (1 + b64.abs().max().item<double>());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.contiguous().to(DType::Float64).to_vector<double>() ==
                                       b.contiguous().to(DType::Float64).to_vector<double>();
}

// The unfused composite in float64 with batch statistics.
Tensor composite(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape bc(static_cast<std::size_t>(x.dim()), 1);
  bc[1] = x.size(1);
  const Tensor mu = mean(x, dims, true);
  const Tensor var = mean((x - mu).square(), dims, true);
  return (x - mu) / sqrt(var + eps) * w.reshape(bc) + b.reshape(bc);
}

struct Result {
  Tensor y, gx, gw, gb, running_mean, running_var;
};

// One training step (or evaluation) of batch_norm on x with running statistics, and the
// gradients for the cotangent gy.
Result run(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Tensor& gy,
           bool training) {
  Result r;
  r.running_mean = randn_t({x_in.size(1)}, 30).to(DType::Float32);
  r.running_var = (randn_t({x_in.size(1)}, 31).abs() + 0.5).to(DType::Float32);
  const Tensor x = leaf(x_in), w = leaf(w_in), b = leaf(b_in);
  r.y = batch_norm(x, r.running_mean, r.running_var, w, b, training, 0.1, 1e-5);
  const std::vector<Tensor> g = autograd::grad({r.y}, {x, w, b}, {gy});
  r.gx = g[0];
  r.gw = g[1];
  r.gb = g[2];
  return r;
}

// Channels-last x against the same values contiguous: every result within tol, and y and the
// input gradient channels-last.
void expect_like_nchw(const Tensor& cl, bool training, double tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_FALSE(cl.is_contiguous());
  const DType dt = cl.dtype();
  const int64_t c = cl.size(1);
  const Tensor w = randn_t({c}, 20).to(dt), b = randn_t({c}, 21).to(dt);
  const Tensor gy = randn_t(cl.shape(), 22).to(dt);
  const Result got = run(cl, w, b, gy, training);
  const Result want = run(cl.contiguous(), w, b, gy, training);
  EXPECT_EQ(got.y.dtype(), dt);
  EXPECT_EQ(got.y.strides(), expected_strides(cl.shape()));
  EXPECT_LE(rel_diff(got.y, want.y), tol);
  EXPECT_LE(rel_diff(got.running_mean, want.running_mean), tol);
  EXPECT_LE(rel_diff(got.running_var, want.running_var), tol);
  EXPECT_LE(rel_diff(got.gx, want.gx), tol);
  EXPECT_LE(rel_diff(got.gw, want.gw), tol);
  EXPECT_LE(rel_diff(got.gb, want.gb), tol);
  if (training) EXPECT_EQ(got.gx.strides(), expected_strides(cl.shape()));
  // The same with a channels-last cotangent (a channels-last next layer's gradient).
  if (cl.dim() == 4) {
    const Tensor gy_cl = gy.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
    EXPECT_LE(rel_diff(run(cl, w, b, gy_cl, training).gx, want.gx), tol);
  }
}

const std::vector<Shape> kShapes = {
    {4, 3, 5, 7},   // C = 3: every channel in the one-lane tail
    {2, 17, 3, 3},  // C = 17: vectors and a tail
    {1, 5, 4, 4},   // N = 1
    {3, 32, 9, 9},  // whole vectors, several chunks
    {64, 32, 28, 28} /* the cnn workload's first blocks: 98 chunks */};

}  // namespace

TEST(BatchNormChannelsLast, Float32TrainingMatchesTheNchwPath) {
  // The reductions run in another order (chunks of rows against per-example segments), both in
  // double; the per-channel coefficients may round to neighbouring floats: a few ulps.
  for (const Shape& s : kShapes)
    expect_like_nchw(channels_last_of(s, 1, DType::Float32), true, 1e-6,
                     "float32 " + std::to_string(s[1]));
}

TEST(BatchNormChannelsLast, Float64TrainingMatchesTheCompositeAndTheNchwPath) {
  for (const Shape& s : {Shape{4, 3, 5, 7}, Shape{2, 17, 3, 3}, Shape{1, 5, 4, 4}}) {
    const Tensor cl = channels_last_of(s, 2, DType::Float64);
    expect_like_nchw(cl, true, 1e-13, "float64 " + std::to_string(s[1]));
    const Tensor x = leaf(cl), w = leaf(randn_t({s[1]}, 3)), b = leaf(randn_t({s[1]}, 4));
    const Tensor gy = randn_t(s, 5);
    const Tensor y = batch_norm(x, {}, {}, w, b, true);
    const Tensor want = composite(x, w, b, 1e-5);
    EXPECT_LT(rel_diff(y, want), 1e-13);
    const std::vector<Tensor> got = autograd::grad({y}, {x, w, b}, {gy});
    const std::vector<Tensor> ref = autograd::grad({want}, {x, w, b}, {gy});
    for (int i = 0; i < 3; ++i) EXPECT_LT(rel_diff(got[i], ref[i]), 1e-12) << i;
  }
}

TEST(BatchNormChannelsLast, OtherRanksAndOneSpatialElement) {
  // [N, C, L] and [N, C, D, H, W] channels-last: the same kernels.
  expect_like_nchw(channels_last_of({5, 17, 6}, 6, DType::Float32), true, 1e-6, "3d");
  expect_like_nchw(channels_last_of({2, 3, 3, 2, 5}, 7, DType::Float32), true, 1e-6, "5d");
  // H W = 1: the layouts coincide, so the tensor is contiguous and takes the plain path.
  const Tensor one = channels_last_of({6, 17, 1, 1}, 8, DType::Float32);
  EXPECT_TRUE(one.is_contiguous());
  const Tensor w = randn_t({17}, 9).to(DType::Float32);
  EXPECT_TRUE(same_bits(batch_norm(one, {}, {}, w, {}, true),
                        batch_norm(one.contiguous(), {}, {}, w, {}, true)));
}

TEST(BatchNormChannelsLast, BFloat16MatchesTheNchwPath) {
  // Both widen to float32 (keeping the layout here), compute, and round once: the results are
  // within one bfloat16 rounding of each other.
  for (const Shape& s : {Shape{4, 3, 5, 7}, Shape{2, 17, 3, 3}})
    expect_like_nchw(channels_last_of(s, 10, DType::BFloat16), true, 1.0 / 128,
                     "bfloat16 " + std::to_string(s[1]));
}

TEST(BatchNormChannelsLast, EvaluationMatchesTheNchwPathAndKeepsTheLayout) {
  for (const Shape& s : {Shape{4, 3, 5, 7}, Shape{2, 17, 3, 3}, Shape{1, 5, 4, 4}})
    expect_like_nchw(channels_last_of(s, 11, DType::Float32), false, 1e-6,
                     "eval " + std::to_string(s[1]));
}

TEST(BatchNormChannelsLast, StatsAndBackwardKernelsMatchTheNchwPath) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(std::to_string(s[1]));
    const Tensor cl = channels_last_of(s, 12, DType::Float32);
    const BatchNormStats got = batch_norm_stats(cl), want = batch_norm_stats(cl.contiguous());
    EXPECT_LE(rel_diff(got.mean, want.mean), 1e-6);
    EXPECT_LE(rel_diff(got.var, want.var), 1e-6);
    const Tensor gy = channels_last_of(s, 13, DType::Float32);
    const Tensor w = randn_t({s[1]}, 14).to(DType::Float32);
    const Tensor mu = randn_t({s[1]}, 15).to(DType::Float32);
    const Tensor rstd = (randn_t({s[1]}, 16).abs() + 0.5).to(DType::Float32);
    const Tensor gx = batch_norm_backward(gy, cl, w, mu, rstd);
    EXPECT_EQ(gx.strides(), expected_strides(s));
    EXPECT_LE(rel_diff(gx, batch_norm_backward(gy.contiguous(), cl.contiguous(), w, mu, rstd)),
              1e-6);
  }
}

TEST(BatchNormChannelsLast, EmptyBatchBehavesAsTheNchwPath) {
  const Tensor cl = channels_last_of({0, 3, 4, 4}, 17, DType::Float32);
  const Tensor w = randn_t({3}, 18).to(DType::Float32), b = randn_t({3}, 19).to(DType::Float32);
  const Result got = run(cl, w, b, zeros({0, 3, 4, 4}), true);
  const Result want = run(cl.contiguous(), w, b, zeros({0, 3, 4, 4}), true);
  EXPECT_EQ(got.y.shape(), (Shape{0, 3, 4, 4}));
  EXPECT_TRUE(same_bits(got.running_mean, want.running_mean));
  EXPECT_TRUE(same_bits(got.running_var, want.running_var));
  EXPECT_TRUE(same_bits(got.gw, want.gw));
  EXPECT_TRUE(same_bits(got.gb, want.gb));
}

TEST(BatchNormChannelsLast, ResultsDoNotDependOnTheThreadCount) {
  const Tensor cl = channels_last_of({64, 32, 28, 28}, 23, DType::Float32);
  const Tensor w = randn_t({32}, 24).to(DType::Float32), b = randn_t({32}, 25).to(DType::Float32);
  const Tensor gy = randn_t(cl.shape(), 26).to(DType::Float32);
  const int before = get_num_threads();
  std::vector<Result> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(run(cl, w, b, gy, true));
  }
  set_num_threads(before);
  for (std::size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(same_bits(runs[i].y, runs[0].y));
    EXPECT_TRUE(same_bits(runs[i].gx, runs[0].gx));
    EXPECT_TRUE(same_bits(runs[i].running_var, runs[0].running_var));
  }
}

TEST(BatchNormChannelsLast, AWrongWeightIsANamedError) {
  const Tensor cl = channels_last_of({2, 3, 4, 4}, 27, DType::Float32);
  try {
    batch_norm(cl, {}, {}, ones({4}), {}, true);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Shape) << msg;
    EXPECT_NE(msg.find("[batch_norm]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3, 4, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  }
}
