// Unit tests for the resampling ops (src/ops/resample.cpp): pad in every mode, interpolate
// (nearest, linear, bilinear), pixel_shuffle/pixel_unshuffle and unfold/fold, each against a
// plain loop written from PyTorch's definitions (its pad index rules, nearest_idx, the linear
// source index with guard_index_and_lambda, im2col's element formula); argument errors name the
// op.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

std::vector<double> values(const Tensor& t) {
  return t.contiguous().to(DType::Float64).to_vector<double>();
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

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// For each output element of `out` (row-major), fn(multi-index) gives the value.
std::vector<double> by_position(const Shape& out, const std::function<double(const V&)>& fn) {
  std::vector<double> r;
  V pos(out.size(), 0);
  for (int64_t flat = 0; flat < out.numel(); ++flat) {
    r.push_back(fn(pos));
    for (std::size_t d = out.size(); d-- > 0;) {
      if (++pos[d] < out[d]) break;
      pos[d] = 0;
    }
  }
  return r;
}

// pad of x by pairs (last dim first) in `mode`, element by element.
std::vector<double> ref_pad(const Tensor& x, const V& p, PadMode mode, double value) {
  const std::vector<double> xv = values(x);
  const Shape in = x.shape();
  Shape out = in;
  const auto r = static_cast<int64_t>(in.size());
  for (std::size_t k = 0; k < p.size() / 2; ++k) out[r - 1 - k] += p[2 * k] + p[2 * k + 1];
  const auto st = strides_of(in);
  return by_position(out, [&](const V& o) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      const auto k = static_cast<std::size_t>(r - 1 - d);
      const int64_t lo = k < p.size() / 2 ? p[2 * k] : 0, n = in[d];
      int64_t i = o[d] - lo;
      if (i < 0 || i >= n) {
        if (mode == PadMode::Constant) return value;
        if (mode == PadMode::Reflect) i = i < 0 ? -i : 2 * (n - 1) - i;
        if (mode == PadMode::Replicate) i = i < 0 ? 0 : n - 1;
        if (mode == PadMode::Circular) i = (i % n + n) % n;
      }
      off += i * st[d];
    }
    return xv[off];
  });
}

// PyTorch's nearest_idx.
int64_t nearest_src(int64_t o, int64_t in, int64_t out, std::optional<double> scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float s = scale ? static_cast<float>(1.0 / *scale) : static_cast<float>(in) / out;
  return std::min(static_cast<int64_t>(std::floor(o * s)), in - 1);
}

struct Tap {
  int64_t i0, i1;
  double l0, l1;
};
// PyTorch's area_pixel_compute_source_index and guard_index_and_lambda, in double.
Tap linear_src(int64_t o, int64_t in, int64_t out, bool align, std::optional<double> scale) {
  const double s = align ? (out > 1 ? double(in - 1) / (out - 1) : 0.0)
                         : (scale ? 1.0 / *scale : double(in) / out);
  double real = align ? s * o : s * (o + 0.5) - 0.5;
  if (!align && real < 0) real = 0;
  const int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
  const double l = std::min(std::max(real - i0, 0.0), 1.0);
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), 1 - l, l};
}

}  // namespace

TEST(Pad, EveryModeMatchesLoop) {
  const Tensor x3 = randn_t({2, 3, 5}, 1), x4 = randn_t({1, 2, 4, 5}, 2);
  const Tensor x5 = randn_t({1, 2, 3, 4, 5}, 3);
  for (PadMode mode :
       {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const double value = mode == PadMode::Constant ? 0.75 : 0.0;
    for (auto [x, p] : std::vector<std::pair<Tensor, V>>{{x3, {2, 1}},
                                                         {x3, {0, 4}},
                                                         {x4, {1, 2, 3, 0}},
                                                         {x5, {1, 1, 2, 0, 0, 2}},
                                                         {x3, {-1, 2}},
                                                         {x4, {-2, 1, 1, -1}},
                                                         {x4.transpose(-1, -2), {1, 2, 2, 1}}}) {
      if (mode == PadMode::Reflect && (p[1] >= x.size(-1) || p[0] >= x.size(-1))) continue;
      const Tensor y = pad(x, p, mode, value);
      EXPECT_EQ(values(y), ref_pad(x, p, mode, value))
          << "mode " << static_cast<int>(mode) << " pad " << Shape(p) << " input " << x.shape();
    }
  }
  // Constant padding of every dim (more pairs than non-constant modes take), and of ints.
  const Tensor xi = arange(6).reshape({2, 3});
  const Tensor yi = pad(xi, {1, 0, 0, 1}, PadMode::Constant, 7);
  EXPECT_EQ(yi.dtype(), DType::Int64);
  EXPECT_EQ(values(yi), ref_pad(xi, {1, 0, 0, 1}, PadMode::Constant, 7));
}

TEST(Pad, GradientAccumulatesReflectedRows) {
  // d/dx sum(w * reflect_pad(x)) = sum of w over every output row that reads x[i].
  const Tensor x = randn_t({1, 5}, 4).requires_grad_(true);
  const Tensor w = randn_t({1, 9}, 5);
  const Tensor g = autograd::grad({(pad(x, {2, 2}, PadMode::Reflect) * w).sum()}, {x})[0];
  const std::vector<double> wv = values(w);
  std::vector<double> want(5, 0.0);
  for (int64_t o = 0; o < 9; ++o) {
    int64_t i = o - 2;
    i = i < 0 ? -i : i >= 5 ? 8 - i : i;
    want[static_cast<std::size_t>(i)] += wv[static_cast<std::size_t>(o)];
  }
  const std::vector<double> got = values(g);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
}

TEST(Pad, Errors) {
  const Tensor x = randn_t({1, 2, 4}, 6);
  expect_error([&] { pad(x, {1}); }, ErrorKind::Value, "pad", {"even"});
  expect_error([&] { pad(x, {1, 1, 1, 1, 1, 1, 1, 1}); }, ErrorKind::Shape, "pad");
  expect_error(
      [&] {
        pad(x, {4, 0}, PadMode::Reflect);
      },
      ErrorKind::Value, "pad", {"reflect", "smaller than its size 4"});
  expect_error([&] { pad(x, {5, 0}, PadMode::Circular); }, ErrorKind::Value, "pad", {"circular"});
  expect_error(
      [&] {
        pad(randn_t({4}, 1), {1, 1}, PadMode::Replicate);
      },
      ErrorKind::Shape, "pad", {"replicate", "2-d or 3-d"});
  expect_error(
      [&] {
        pad(x, {1, 1}, PadMode::Reflect, 2.0);
      },
      ErrorKind::Value, "pad", {"fill value"});
  expect_error([&] { pad(x, {-3, -2}); }, ErrorKind::Shape, "pad", {"negative size"});
}

TEST(Interpolate, NearestMatchesLoop) {
  const Tensor x = randn_t({2, 3, 5, 7}, 7);
  for (auto [size, scale] : std::vector<std::pair<V, std::vector<double>>>{
           {{8, 11}, {}}, {{3, 4}, {}}, {{10, 14}, {}}, {{}, {1.7}}, {{}, {0.5, 2.5}}}) {
    InterpolateOptions o;
    o.size = size;
    o.scale_factor = scale;
    const Tensor y = interpolate(x, o);
    const int64_t oh = size.empty() ? int64_t(std::floor(5 * scale[0])) : size[0];
    const int64_t ow = size.empty() ? int64_t(std::floor(7 * scale.back())) : size[1];
    ASSERT_EQ(y.shape(), (Shape{2, 3, oh, ow}));
    std::optional<double> sh, sw;
    if (!scale.empty()) sh = scale[0], sw = scale.back();
    const std::vector<double> xv = values(x);
    EXPECT_EQ(values(y), by_position(y.shape(), [&](const V& p) {
                const int64_t h = nearest_src(p[2], 5, oh, sh), w = nearest_src(p[3], 7, ow, sw);
                return xv[((p[0] * 3 + p[1]) * 5 + h) * 7 + w];
              }));
  }
}

TEST(Interpolate, LinearModesMatchLoop) {
  const Tensor x = randn_t({2, 2, 4, 6}, 8);
  const std::vector<double> xv = values(x);
  for (bool align : {false, true})
    for (auto [size, scale] : std::vector<std::pair<V, std::vector<double>>>{
             {{7, 9}, {}}, {{3, 2}, {}}, {{1, 5}, {}}, {{}, {1.5, 2.25}}, {{}, {0.6}}}) {
      InterpolateOptions o;
      o.size = size;
      o.scale_factor = scale;
      o.mode = InterpolateMode::Bilinear;
      o.align_corners = align;
      const Tensor y = interpolate(x, o);
      std::optional<double> sh, sw;
      if (!scale.empty()) sh = scale[0], sw = scale.back();
      const int64_t oh = y.size(2), ow = y.size(3);
      const std::vector<double> want = by_position(y.shape(), [&](const V& p) {
        const Tap th = linear_src(p[2], 4, oh, align, sh), tw = linear_src(p[3], 6, ow, align, sw);
        auto at = [&](int64_t h, int64_t w) { return xv[((p[0] * 2 + p[1]) * 4 + h) * 6 + w]; };
        return th.l0 * (tw.l0 * at(th.i0, tw.i0) + tw.l1 * at(th.i0, tw.i1)) +
               th.l1 * (tw.l0 * at(th.i1, tw.i0) + tw.l1 * at(th.i1, tw.i1));
      });
      const std::vector<double> got = values(y);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-14) << "align " << align << " at " << i;
    }
  // 1-d linear
  const Tensor x1 = randn_t({1, 2, 5}, 9);
  InterpolateOptions o;
  o.size = {8};
  o.mode = InterpolateMode::Linear;
  const std::vector<double> v1 = values(x1);
  const std::vector<double> want = by_position({1, 2, 8}, [&](const V& p) {
    const Tap t = linear_src(p[2], 5, 8, false, std::nullopt);
    return t.l0 * v1[p[1] * 5 + t.i0] + t.l1 * v1[p[1] * 5 + t.i1];
  });
  const std::vector<double> got = values(interpolate(x1, o));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << i;
}

TEST(Interpolate, Errors) {
  const Tensor x = randn_t({1, 1, 3, 3}, 10);
  InterpolateOptions o;
  expect_error([&] { interpolate(x, o); }, ErrorKind::Value, "interpolate", {"either size"});
  o.size = {4};
  o.scale_factor = {2};
  expect_error([&] { interpolate(x, o); }, ErrorKind::Value, "interpolate", {"only one"});
  o.scale_factor = {};
  o.align_corners = true;
  expect_error([&] { interpolate(x, o); }, ErrorKind::Value, "interpolate", {"align_corners"});
  o.align_corners = std::nullopt;
  o.mode = InterpolateMode::Linear;
  expect_error([&] { interpolate(x, o); }, ErrorKind::Shape, "interpolate", {"linear", "3-d"});
  o.mode = InterpolateMode::Bilinear;
  expect_error(
      [&] {
        interpolate(randn_t({1, 3, 3}, 1), o);
      },
      ErrorKind::Shape, "interpolate", {"bilinear", "4-d"});
  o.size = {4, 4, 4};
  expect_error([&] { interpolate(x, o); }, ErrorKind::Value, "interpolate", {"size"});
  o.size = {};
  o.scale_factor = {-1};
  expect_error([&] { interpolate(x, o); }, ErrorKind::Value, "interpolate", {"positive"});
  o.scale_factor = {0.1};
  expect_error([&] { interpolate(x, o); }, ErrorKind::Shape, "interpolate", {"non-empty"});
}

TEST(PixelShuffle, MatchesLoopAndInverts) {
  const int64_t r = 3;
  const Tensor x = randn_t({2, 2 * r * r, 2, 3}, 11);
  const Tensor y = pixel_shuffle(x, r);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2 * r, 3 * r}));
  const std::vector<double> xv = values(x);
  EXPECT_EQ(values(y), by_position(y.shape(), [&](const V& p) {
              const int64_t c = p[1] * r * r + (p[2] % r) * r + p[3] % r;
              return xv[((p[0] * 2 * r * r + c) * 2 + p[2] / r) * 3 + p[3] / r];
            }));
  EXPECT_EQ(values(pixel_unshuffle(y, r)), xv);
  EXPECT_EQ(pixel_shuffle(randn_t({4, 1, 1}, 1), 2).shape(), (Shape{1, 2, 2}));
  expect_error(
      [&] {
        pixel_shuffle(randn_t({1, 3, 2, 2}, 1), 2);
      },
      ErrorKind::Shape, "pixel_shuffle", {"divisible"});
  expect_error(
      [&] {
        pixel_unshuffle(randn_t({1, 1, 3, 2}, 1), 2);
      },
      ErrorKind::Shape, "pixel_unshuffle", {"divisible"});
  expect_error([&] { pixel_shuffle(randn_t({4, 2}, 1), 2); }, ErrorKind::Shape, "pixel_shuffle");
  expect_error([&] { pixel_shuffle(randn_t({4, 2, 2}, 1), 0); }, ErrorKind::Value, "pixel_shuffle");
}

TEST(Unfold, MatchesLoopAndFoldIsItsTranspose) {
  const V k{2, 3}, d{1, 2}, p{1, 0}, s{2, 1};
  const Tensor x = randn_t({2, 3, 5, 7}, 12);
  const Tensor cols = unfold(x, k, d, p, s);
  const int64_t oh = (5 + 2 * 1 - 1 * (2 - 1) - 1) / 2 + 1, ow = (7 - 2 * (3 - 1) - 1) / 1 + 1;
  ASSERT_EQ(cols.shape(), (Shape{2, 3 * 6, oh * ow}));
  const std::vector<double> xv = values(x);
  auto src = [&](int64_t row, int64_t col, int64_t& c, int64_t& h, int64_t& w) {
    c = row / 6;
    const int64_t i = row % 6 / 3, j = row % 3;
    h = col / ow * s[0] - p[0] + i * d[0];
    w = col % ow * s[1] - p[1] + j * d[1];
    return h >= 0 && h < 5 && w >= 0 && w < 7;
  };
  EXPECT_EQ(values(cols), by_position(cols.shape(), [&](const V& q) {
              int64_t c, h, w;
              return src(q[1], q[2], c, h, w) ? xv[((q[0] * 3 + c) * 5 + h) * 7 + w] : 0.0;
            }));
  // fold sums every block element back into place.
  const Tensor b = randn_t(cols.shape(), 13);
  const std::vector<double> bv = values(b);
  std::vector<double> want(2 * 3 * 5 * 7, 0.0);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t row = 0; row < 18; ++row)
      for (int64_t col = 0; col < oh * ow; ++col) {
        int64_t c, h, w;
        if (src(row, col, c, h, w))
          want[static_cast<std::size_t>(((n * 3 + c) * 5 + h) * 7 + w)] +=
              bv[static_cast<std::size_t>((n * 18 + row) * oh * ow + col)];
      }
  const std::vector<double> got = values(fold(b, {5, 7}, k, d, p, s));
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << i;
  // Unbatched forms.
  EXPECT_EQ(unfold(x.select(0, 0), k, d, p, s).shape(), (Shape{18, oh * ow}));
  EXPECT_EQ(fold(b.select(0, 0), {5, 7}, k, d, p, s).shape(), (Shape{3, 5, 7}));
}

TEST(Unfold, Errors) {
  const Tensor x = randn_t({1, 2, 3, 3}, 14);
  expect_error([&] { unfold(x, {4}); }, ErrorKind::Shape, "unfold", {"at least one"});
  expect_error([&] { unfold(randn_t({3, 3}, 1), {2}); }, ErrorKind::Shape, "unfold", {"3-d"});
  expect_error([&] { unfold(x, {0}); }, ErrorKind::Value, "unfold", {"kernel_size"});
  expect_error([&] { unfold(x, {2}, {1}, {-1}); }, ErrorKind::Value, "unfold", {"padding"});
  expect_error(
      [&] {
        fold(randn_t({1, 5, 4}, 1), {3, 3}, {2});
      },
      ErrorKind::Shape, "fold", {"multiple"});
  expect_error(
      [&] {
        fold(randn_t({1, 4, 5}, 1), {3, 3}, {2});
      },
      ErrorKind::Shape, "fold", {"blocks"});
  expect_error([&] { fold(randn_t({4}, 1), {3, 3}, {2}); }, ErrorKind::Shape, "fold", {"2-d"});
}
