// Unit tests for the pooling ops (src/ops/pooling.cpp): every value against plain loops written
// from PyTorch's CPU kernels (max_pool2d's hstart/hend with dilation, avg_pool2d's pool_size
// and clipping, adaptive pooling's start/end indices), in float64 and, bit for bit, in float32,
// on rows wide enough for the vectorised interiors and their tails. Also: NaN and tie rules,
// output shapes and dtypes, and every argument error naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

using V = std::vector<int64_t>;

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

void expect_error(const std::function<void()>& f, ErrorKind kind, const std::string& op,
                  const std::vector<std::string>& mentions = {}) {
  try {
    f();
    ADD_FAILURE() << "expected an adjoint::Error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(e.op(), op) << e.what();
    const std::string msg = e.what();
    for (const std::string& m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << msg;
  }
}

// PyTorch's pooling_output_shape.
int64_t out_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = static_cast<int64_t>(std::floor(static_cast<double>(num) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

struct Pool2d {
  V k, s, p, d;
  bool ceil = false;
};

// max_pool2d of contiguous [P, H, W] values as PyTorch's cpu kernel: (values, indices).
template <class T>
std::pair<std::vector<T>, std::vector<int64_t>> ref_max_pool(const std::vector<T>& x, int64_t P,
                                                             int64_t H, int64_t W,
                                                             const Pool2d& c) {
  const int64_t OH = out_size(H, c.k[0], c.p[0], c.s[0], c.d[0], c.ceil);
  const int64_t OW = out_size(W, c.k[1], c.p[1], c.s[1], c.d[1], c.ceil);
  std::vector<T> v;
  std::vector<int64_t> idx;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * c.s[0] - c.p[0], ws = ow * c.s[1] - c.p[1];
        const int64_t he = std::min(hs + (c.k[0] - 1) * c.d[0] + 1, H);
        const int64_t we = std::min(ws + (c.k[1] - 1) * c.d[1] + 1, W);
        while (hs < 0) hs += c.d[0];
        while (ws < 0) ws += c.d[1];
        int64_t best_i = hs * W + ws;
        T best = -std::numeric_limits<T>::infinity();
        for (int64_t h = hs; h < he; h += c.d[0])
          for (int64_t w = ws; w < we; w += c.d[1]) {
            const T val = x[p * H * W + h * W + w];
            if (val > best || std::isnan(val)) {
              best = val;
              best_i = h * W + w;
            }
          }
        v.push_back(best);
        idx.push_back(best_i);
      }
  return {v, idx};
}

// avg_pool2d of contiguous [P, H, W] values as PyTorch's cpu kernel.
template <class T>
std::vector<T> ref_avg_pool(const std::vector<T>& x, int64_t P, int64_t H, int64_t W,
                            const Pool2d& c, bool include_pad, int64_t divisor) {
  const int64_t OH = out_size(H, c.k[0], c.p[0], c.s[0], 1, c.ceil);
  const int64_t OW = out_size(W, c.k[1], c.p[1], c.s[1], 1, c.ceil);
  std::vector<T> out;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * c.s[0] - c.p[0], ws = ow * c.s[1] - c.p[1];
        int64_t he = std::min(hs + c.k[0], H + c.p[0]), we = std::min(ws + c.k[1], W + c.p[1]);
        const int64_t pool_size = (he - hs) * (we - ws);
        hs = std::max<int64_t>(hs, 0);
        ws = std::max<int64_t>(ws, 0);
        he = std::min(he, H);
        we = std::min(we, W);
        T sum = 0;
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = ws; w < we; ++w) sum += x[p * H * W + h * W + w];
        const int64_t div = divisor ? divisor : include_pad ? pool_size : (he - hs) * (we - ws);
        out.push_back(sum / static_cast<T>(div));
      }
  return out;
}

int64_t start_index(int64_t o, int64_t out, int64_t in) {
  return static_cast<int64_t>(std::floor(static_cast<double>(o * in) / out));
}
int64_t end_index(int64_t o, int64_t out, int64_t in) {
  return static_cast<int64_t>(std::ceil(static_cast<double>((o + 1) * in) / out));
}

// adaptive_avg_pool2d / adaptive_max_pool2d of [P, H, W] values (max: values, indices).
template <class T>
std::pair<std::vector<T>, std::vector<int64_t>> ref_adaptive(const std::vector<T>& x, int64_t P,
                                                             int64_t H, int64_t W, int64_t OH,
                                                             int64_t OW, bool max) {
  std::vector<T> v;
  std::vector<int64_t> idx;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t hs = start_index(oh, OH, H), he = end_index(oh, OH, H);
        const int64_t ws = start_index(ow, OW, W), we = end_index(ow, OW, W);
        T acc = max ? -std::numeric_limits<T>::infinity() : T(0);
        int64_t bi = hs * W + ws;
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = ws; w < we; ++w) {
            const T val = x[p * H * W + h * W + w];
            if (!max) {
              acc += val;
            } else if (val > acc || std::isnan(val)) {
              acc = val;
              bi = h * W + w;
            }
          }
        v.push_back(max ? acc : acc / static_cast<T>((he - hs) * (we - ws)));
        idx.push_back(bi);
      }
  return {v, idx};
}

// avg_pool2d's input gradient as PyTorch's avg_pool2d_backward: output by output, the
// cotangent / divisor added to every element of the (clipped) window.
template <class T>
std::vector<T> ref_avg_pool_backward(const std::vector<T>& g, int64_t P, int64_t H, int64_t W,
                                     const Pool2d& c, bool include_pad, int64_t divisor) {
  const int64_t OH = out_size(H, c.k[0], c.p[0], c.s[0], 1, c.ceil);
  const int64_t OW = out_size(W, c.k[1], c.p[1], c.s[1], 1, c.ceil);
  std::vector<T> gx(static_cast<std::size_t>(P * H * W), T(0));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t hs = oh * c.s[0] - c.p[0], ws = ow * c.s[1] - c.p[1];
        int64_t he = std::min(hs + c.k[0], H + c.p[0]), we = std::min(ws + c.k[1], W + c.p[1]);
        const int64_t pool_size = (he - hs) * (we - ws);
        hs = std::max<int64_t>(hs, 0);
        ws = std::max<int64_t>(ws, 0);
        he = std::min(he, H);
        we = std::min(we, W);
        const int64_t div = divisor ? divisor : include_pad ? pool_size : (he - hs) * (we - ws);
        const T delta = g[(p * OH + oh) * OW + ow] / static_cast<T>(div);
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = ws; w < we; ++w) gx[(p * H + h) * W + w] += delta;
      }
  return gx;
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  return t.contiguous().to_vector<T>();
}

// The configurations: odd sizes, strides, dilations, padding, ceil_mode, rectangular kernels,
// and wide rows whose interiors are vectorised (with a tail after the last full vector).
const std::vector<std::pair<Shape, Pool2d>>& configs() {
  static const std::vector<std::pair<Shape, Pool2d>> c = {
      {{2, 3, 6, 6}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}}},
      {{1, 2, 7, 5}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}}},
      {{1, 2, 7, 5}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}},
      {{2, 1, 6, 8}, {{3, 3}, {2, 2}, {0, 0}, {1, 1}, true}},
      {{1, 1, 9, 8}, {{3, 3}, {1, 1}, {1, 1}, {2, 2}}},
      {{2, 1, 5, 7}, {{2, 3}, {1, 2}, {1, 0}, {1, 1}}},
      {{1, 2, 5, 45}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}}},
      {{1, 2, 6, 71}, {{2, 3}, {2, 2}, {1, 1}, {1, 2}, true}},
      {{3, 4, 9, 64}, {{3, 3}, {3, 3}, {0, 1}, {1, 1}}},
      {{1, 1, 4, 130}, {{1, 5}, {1, 4}, {0, 2}, {1, 1}, true}},
      // Stride 2 with two or more window columns: the interleaved loads (Note [Strided lanes]);
      // with one column: the gathers.
      {{2, 2, 6, 60}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}}},
      {{1, 2, 7, 41}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}}},
      {{1, 2, 7, 41}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}},
      {{1, 1, 5, 50}, {{3, 1}, {1, 2}, {1, 0}, {1, 1}}},
  };
  return c;
}

template <class T>
void check_max_pool(DType dtype) {
  uint64_t seed = 10;
  for (const auto& [shape, c] : configs()) {
    const Tensor x = randn_t(shape, seed++, dtype);
    const int64_t P = shape[0] * shape[1], H = shape[2], W = shape[3];
    const auto [want_v, want_i] = ref_max_pool(values_of<T>(x), P, H, W, c);
    const auto [v, i] = max_pool2d_with_indices(x, c.k, c.s, c.p, c.d, c.ceil);
    const std::string what = "shape " + detail::str(shape) + " kernel " + detail::str(Shape(c.k));
    ASSERT_EQ(v.shape(), i.shape()) << what;
    ASSERT_EQ(v.numel(), static_cast<int64_t>(want_v.size())) << what;
    EXPECT_EQ(values_of<T>(v), want_v) << what;
    EXPECT_EQ(values_of<int64_t>(i), want_i) << what;
  }
}

template <class T>
void check_avg_pool(DType dtype) {
  uint64_t seed = 30;
  for (const auto& [shape, c] : configs()) {
    if (c.d[0] != 1 || c.d[1] != 1) continue;  // average pooling has no dilation
    for (bool include : {true, false})
      for (int64_t divisor : {int64_t{0}, int64_t{5}}) {
        const Tensor x = randn_t(shape, seed++, dtype);
        const int64_t P = shape[0] * shape[1], H = shape[2], W = shape[3];
        const std::vector<T> want = ref_avg_pool(values_of<T>(x), P, H, W, c, include, divisor);
        const Tensor y = avg_pool2d(x, c.k, c.s, c.p, c.ceil, include,
                                    divisor ? std::optional<int64_t>(divisor) : std::nullopt);
        EXPECT_EQ(values_of<T>(y), want)
            << "shape " << shape << " include_pad " << include << " divisor " << divisor;
      }
  }
}

template <class T>
void check_avg_pool_backward(DType dtype) {
  uint64_t seed = 50;
  for (const auto& [shape, c] : configs()) {
    if (c.d[0] != 1 || c.d[1] != 1) continue;
    for (bool include : {true, false}) {
      const Tensor x = randn_t(shape, seed++, dtype).requires_grad_(true);
      const Tensor y = avg_pool2d(x, c.k, c.s, c.p, c.ceil, include);
      const Tensor g = randn_t(y.shape(), seed++, dtype);
      const Tensor gx = autograd::grad({y}, {x}, {g})[0];
      const int64_t P = shape[0] * shape[1], H = shape[2], W = shape[3];
      EXPECT_EQ(values_of<T>(gx), ref_avg_pool_backward(values_of<T>(g), P, H, W, c, include, 0))
          << "shape " << shape << " include_pad " << include;
    }
  }
}

}  // namespace

TEST(AvgPool2d, BackwardMatchesLoopFloat64) { check_avg_pool_backward<double>(DType::Float64); }
TEST(AvgPool2d, BackwardMatchesLoopFloat32BitForBit) {
  check_avg_pool_backward<float>(DType::Float32);
}

TEST(MaxPool2d, MatchesLoopFloat64) { check_max_pool<double>(DType::Float64); }
TEST(MaxPool2d, MatchesLoopFloat32BitForBit) { check_max_pool<float>(DType::Float32); }
TEST(AvgPool2d, MatchesLoopFloat64) { check_avg_pool<double>(DType::Float64); }
TEST(AvgPool2d, MatchesLoopFloat32BitForBit) { check_avg_pool<float>(DType::Float32); }

TEST(Pooling, SameBitsForAnyThreadCount) {
  // 2048 planes: several chunks of planes per thread; each plane is one thread's.
  const Tensor x = randn_t({64, 32, 14, 14}, 20, DType::Float32).requires_grad_(true);
  auto run = [&](int threads) {
    set_num_threads(threads);
    auto [v, i] = max_pool2d_with_indices(x, {3}, {2}, {1});
    const Tensor a = avg_pool2d(x, {3}, {1}, {1}, false, false);
    const Tensor g = autograd::grad({v.sum() + a.square().sum()}, {x})[0];
    return std::make_tuple(values_of<float>(v), values_of<int64_t>(i), values_of<float>(a),
                           values_of<float>(g));
  };
  const int before = get_num_threads();
  const auto one = run(1);
  const auto two = run(2);
  set_num_threads(before);
  EXPECT_TRUE(one == two);
}

TEST(MaxPool2d, NaNWinsAndTiesTakeTheFirst) {
  // Row of 40 (vectorised) with equal values: each window's first element; then a NaN.
  std::vector<double> v(2 * 40, 1.0);
  v[45] = std::nan("");
  v[47] = std::nan("");  // two NaNs in one window: the last, as PyTorch's scan
  const Tensor x = tensor(v, Shape{1, 2, 40});
  for (DType dt : {DType::Float64, DType::Float32}) {
    auto [y, i] = max_pool2d_with_indices(x.to(dt), {2, 4}, {1, 1});
    const auto idx = values_of<int64_t>(i);
    const auto vals = values_of<double>(y.to(DType::Float64));
    ASSERT_EQ(idx.size(), 37u);
    for (int64_t ow = 0; ow < 37; ++ow) {
      // Row 1's columns 5 and 7 hold the NaNs: windows [ow, ow + 3] from 2 to 7 have one.
      if (ow >= 2 && ow <= 7) {
        EXPECT_TRUE(std::isnan(vals[ow])) << ow;
        EXPECT_EQ(idx[ow], ow >= 4 ? 47 : 45) << ow;
      } else {
        EXPECT_EQ(vals[ow], 1.0) << ow;
        EXPECT_EQ(idx[ow], ow) << ow;
      }
    }
  }
}

TEST(MaxPool2d, NaNAndTiesAtTheBorder) {
  // Padding 1 makes columns 0 and 38 border windows (the scalar loop) beside the vectorised
  // interior 1..37; row 1 has NaNs in columns 0 and 1.
  std::vector<double> v(2 * 40, 1.0);
  v[40] = v[41] = std::nan("");
  const Tensor x = tensor(v, Shape{1, 2, 40});
  for (DType dt : {DType::Float64, DType::Float32}) {
    auto [y, i] = max_pool2d_with_indices(x.to(dt), {2, 4}, {1, 1}, {0, 1});
    const auto idx = values_of<int64_t>(i);
    ASSERT_EQ(idx.size(), 39u);
    for (int64_t ow = 0; ow < 39; ++ow) {
      const int64_t first = std::max<int64_t>(ow - 1, 0);  // the window's first column
      EXPECT_EQ(idx[ow], ow <= 2 ? 41 : first) << ow;
    }
  }
}

TEST(MaxPool1d, IsMaxPool2dOfHeightOne) {
  const Tensor x = randn_t({2, 3, 11}, 3);
  auto [y, i] = max_pool1d_with_indices(x, 3, 2, 1, 2, true);
  auto [y2, i2] = max_pool2d_with_indices(x.unsqueeze(2), {1, 3}, {1, 2}, {0, 1}, {1, 2}, true);
  EXPECT_EQ(y.shape(), (Shape{2, 3, out_size(11, 3, 1, 2, 2, true)}));
  EXPECT_EQ(values_of<double>(y), values_of<double>(y2.squeeze(2)));
  EXPECT_EQ(values_of<int64_t>(i), values_of<int64_t>(i2.squeeze(2)));
  // unbatched [C, L]
  EXPECT_EQ(max_pool1d(x.select(0, 0), 2).shape(), (Shape{3, 5}));
}

TEST(AvgPool1d, MatchesLoop) {
  const Tensor x = randn_t({2, 3, 10}, 4);
  const Pool2d c{{1, 3}, {1, 2}, {0, 1}, {1, 1}, true};
  for (bool include : {true, false}) {
    const auto want = ref_avg_pool(values_of<double>(x), 6, 1, 10, c, include, 0);
    EXPECT_EQ(values_of<double>(avg_pool1d(x, 3, 2, 1, true, include)), want);
  }
}

TEST(AdaptivePool2d, MatchesLoop) {
  for (auto [shape, out] : std::vector<std::pair<Shape, V>>{{{2, 3, 7, 5}, {3, 2}},
                                                            {{1, 2, 4, 5}, {1, 1}},
                                                            {{1, 1, 3, 4}, {4, 6}},
                                                            {{1, 2, 10, 67}, {4, 19}}}) {
    for (DType dt : {DType::Float64, DType::Float32}) {
      const Tensor x = randn_t(shape, 5, dt);
      const int64_t P = shape[0] * shape[1];
      if (dt == DType::Float64) {
        const auto avg =
            ref_adaptive(values_of<double>(x), P, shape[2], shape[3], out[0], out[1], false);
        const auto mx =
            ref_adaptive(values_of<double>(x), P, shape[2], shape[3], out[0], out[1], true);
        EXPECT_EQ(values_of<double>(adaptive_avg_pool2d(x, out)), avg.first);
        auto [v, i] = adaptive_max_pool2d_with_indices(x, out);
        EXPECT_EQ(values_of<double>(v), mx.first);
        EXPECT_EQ(values_of<int64_t>(i), mx.second);
      } else {
        const auto avg =
            ref_adaptive(values_of<float>(x), P, shape[2], shape[3], out[0], out[1], false);
        const auto mx =
            ref_adaptive(values_of<float>(x), P, shape[2], shape[3], out[0], out[1], true);
        EXPECT_EQ(values_of<float>(adaptive_avg_pool2d(x, out)), avg.first);
        EXPECT_EQ(values_of<float>(adaptive_max_pool2d(x, out)), mx.first);
      }
    }
  }
}

TEST(Pooling, ShapesAndDtypes) {
  const Tensor x = randn_t({3, 7, 6}, 6, DType::Float32);  // unbatched [C, H, W]
  EXPECT_EQ(max_pool2d(x, {2}).shape(), (Shape{3, 3, 3}));
  EXPECT_EQ(avg_pool2d(x, {3}, {2}, {1}, true).shape(),
            (Shape{3, out_size(7, 3, 1, 2, 1, true), out_size(6, 3, 1, 2, 1, true)}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {1}).shape(), (Shape{3, 1, 1}));
  EXPECT_EQ(max_pool2d(x, {2}).dtype(), DType::Float32);
  EXPECT_EQ(max_pool2d_with_indices(x, {2}).second.dtype(), DType::Int64);
  // Empty batch
  EXPECT_EQ(max_pool2d(randn_t({0, 2, 4, 4}, 1), {2}).shape(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(avg_pool2d(randn_t({0, 2, 4, 4}, 1), {2}).shape(), (Shape{0, 2, 2, 2}));
  // 16-bit inputs give 16-bit outputs (the mean computed in float32 and rounded once).
  for (DType low : {DType::BFloat16, DType::Float16}) {
    const Tensor xl = x.to(low);
    EXPECT_EQ(max_pool2d(xl, {2}).dtype(), low);
    const Tensor want = avg_pool2d(xl.to(DType::Float32), {2}).to(low);
    EXPECT_EQ(values_of<float>(avg_pool2d(xl, {2}).to(DType::Float32)),
              values_of<float>(want.to(DType::Float32)));
  }
  // Integer inputs are pooled as floats.
  EXPECT_EQ(max_pool2d(arange(16).reshape({1, 4, 4}), {2}).dtype(), kDefaultFloat);
}

TEST(Pooling, Errors) {
  const Tensor x = randn_t({1, 2, 5, 5}, 7);
  // The kernel does not fit the padded input.
  expect_error([&] { max_pool2d(x, {7}); }, ErrorKind::Shape, "max_pool2d",
               {"too small", "[1, 2, 5, 5]"});
  expect_error([&] { avg_pool2d(x, {3, 6}); }, ErrorKind::Shape, "avg_pool2d", {"too small"});
  expect_error([&] { max_pool2d(x, {4}, {1}, {0}, {2}); }, ErrorKind::Shape, "max_pool2d",
               {"dilation"});
  // Padding more than half the kernel, as PyTorch refuses.
  expect_error([&] { max_pool2d(x, {3}, {1}, {2}); }, ErrorKind::Value, "max_pool2d",
               {"half the kernel"});
  expect_error([&] { avg_pool2d(x, {2}, {1}, {2}); }, ErrorKind::Value, "avg_pool2d",
               {"half the kernel"});
  expect_error([&] { max_pool1d(randn_t({1, 5}, 1), 2, 1, 2); }, ErrorKind::Value, "max_pool1d");
  // Wrong rank.
  expect_error(
      [&] {
        max_pool2d(randn_t({5, 5}, 1), {2});
      },
      ErrorKind::Shape, "max_pool2d", {"3-d", "[5, 5]"});
  expect_error([&] { max_pool1d(randn_t({1, 1, 2, 5}, 1), 2); }, ErrorKind::Shape, "max_pool1d");
  expect_error(
      [&] {
        adaptive_avg_pool2d(randn_t({2, 1, 1, 3, 3}, 1), {2});
      },
      ErrorKind::Shape, "adaptive_avg_pool2d");
  // Empty channel or spatial dims.
  expect_error(
      [&] {
        max_pool2d(randn_t({1, 0, 4, 4}, 1), {2});
      },
      ErrorKind::Shape, "max_pool2d", {"non-empty"});
  // Bad sizes.
  expect_error([&] { max_pool2d(x, {0}); }, ErrorKind::Value, "max_pool2d", {"kernel_size"});
  expect_error([&] { max_pool2d(x, {2}, {0}); }, ErrorKind::Value, "max_pool2d", {"stride"});
  expect_error([&] { max_pool2d(x, {2}, {1}, {-1}); }, ErrorKind::Value, "max_pool2d", {"padding"});
  expect_error([&] { max_pool2d(x, {2}, {1}, {0}, {0}); }, ErrorKind::Value, "max_pool2d",
               {"dilation"});
  expect_error([&] { max_pool2d(x, {2, 2, 2}); }, ErrorKind::Value, "max_pool2d", {"kernel_size"});
  expect_error([&] { avg_pool2d(x, {2}, {}, {0}, false, true, 0); }, ErrorKind::Value, "avg_pool2d",
               {"divisor_override"});
  expect_error(
      [&] {
        adaptive_avg_pool2d(x, {0, 2});
      },
      ErrorKind::Value, "adaptive_avg_pool2d", {"output_size"});
  expect_error(
      [&] {
        adaptive_max_pool2d(x, {1, 2, 3});
      },
      ErrorKind::Value, "adaptive_max_pool2d", {"output_size"});
}

TEST(MaxPool2d, GradientGoesToTheMaximum) {
  // d/dx sum(max_pool2d(x)) is 1 at each window's maximum (a maximum shared by overlapping
  // windows gets one per window), and the gradient of sum(d/dx sum(y²)) twice that: the
  // double backward through pool_scatter's gather.
  const Tensor x = randn_t({1, 1, 5, 6}, 8).requires_grad_(true);
  auto [y, i] = max_pool2d_with_indices(x, {3}, {1}, {1});
  const Tensor g = autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true)[0];
  std::vector<double> want(30, 0.0);
  for (int64_t k : values_of<int64_t>(i)) want[static_cast<std::size_t>(k)] += 1;
  EXPECT_EQ(values_of<double>(g), want);
  const Tensor gx = autograd::grad({y.square().sum()}, {x}, {}, std::nullopt, true)[0];
  // sum(gx) = sum_k 2 y_k, so its gradient is 2 at each window's maximum, once per window.
  const Tensor h = autograd::grad({gx.sum()}, {x})[0];
  for (double& w : want) w *= 2;
  EXPECT_EQ(values_of<double>(h), want);
}
