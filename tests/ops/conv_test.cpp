// The convolutions' values against loops written here from PyTorch's definitions (float64):
// conv1d/conv2d with stride, padding (numbers, "same" with an even kernel, "valid"), dilation,
// groups and depthwise, unbatched inputs, conv_transpose1d/2d with output_padding; the memory
// format of the result; autocast; and every argument error, naming the op, shapes and dtypes.
// The kernels' oneDNN path against the reference loops is conv_kernels_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace {

using namespace adjoint;

// Tensors as flat float64 vectors and a [N, C, H, W] index (1-d problems use H = 1).
struct Dims4 {
  int64_t n, c, h, w;
  int64_t at(int64_t a, int64_t b, int64_t y, int64_t x) const {
    return ((a * c + b) * h + y) * w + x;
  }
};

std::vector<double> values(const Tensor& t) {
  return t.contiguous().to(DType::Float64).to_vector<double>();
}

struct Conv2dCase {
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, groups;
};

// y[n, o, i, j] = b[o] + Σ_{c, u, v} x[n, g Cg + c, i sh - pt + u dh, j sw - pl + v dw] w[o, c, u,
// v] with zeros outside the input; the output size from the padded input.
std::vector<double> conv2d_loop(const std::vector<double>& x, Dims4 xd,
                                const std::vector<double>& w, Dims4 wd,
                                const std::vector<double>* b, const Conv2dCase& k, Dims4* out) {
  const int64_t oh = (xd.h + k.pt + k.pb - k.dh * (wd.h - 1) - 1) / k.sh + 1;
  const int64_t ow = (xd.w + k.pl + k.pr - k.dw * (wd.w - 1) - 1) / k.sw + 1;
  *out = {xd.n, wd.n, oh, ow};
  const int64_t cg = xd.c / k.groups, og = wd.n / k.groups;
  std::vector<double> y(static_cast<std::size_t>(xd.n * wd.n * oh * ow), 0.0);
  for (int64_t n = 0; n < xd.n; ++n)
    for (int64_t o = 0; o < wd.n; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b ? (*b)[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < wd.h; ++u)
              for (int64_t v = 0; v < wd.w; ++v) {
                const int64_t yi = i * k.sh - k.pt + u * k.dh, xj = j * k.sw - k.pl + v * k.dw;
                if (yi < 0 || yi >= xd.h || xj < 0 || xj >= xd.w) continue;
                s += x[xd.at(n, (o / og) * cg + c, yi, xj)] * w[wd.at(o, c, u, v)];
              }
          y[out->at(n, o, i, j)] = s;
        }
  return y;
}

// The transposed convolution by its definition: every input element scatters w times itself.
std::vector<double> conv_transpose2d_loop(const std::vector<double>& x, Dims4 xd,
                                          const std::vector<double>& w, Dims4 wd, int64_t s,
                                          int64_t p, int64_t op, int64_t groups, int64_t d,
                                          Dims4* out) {
  const int64_t oh = (xd.h - 1) * s - 2 * p + d * (wd.h - 1) + op + 1;
  const int64_t ow = (xd.w - 1) * s - 2 * p + d * (wd.w - 1) + op + 1;
  const int64_t og = wd.c, cg = xd.c / groups;
  *out = {xd.n, og * groups, oh, ow};
  std::vector<double> y(static_cast<std::size_t>(out->n * out->c * oh * ow), 0.0);
  for (int64_t n = 0; n < xd.n; ++n)
    for (int64_t c = 0; c < xd.c; ++c)
      for (int64_t i = 0; i < xd.h; ++i)
        for (int64_t j = 0; j < xd.w; ++j)
          for (int64_t o = 0; o < og; ++o)
            for (int64_t u = 0; u < wd.h; ++u)
              for (int64_t v = 0; v < wd.w; ++v) {
                const int64_t yi = i * s - p + u * d, yj = j * s - p + v * d;
                if (yi < 0 || yi >= oh || yj < 0 || yj >= ow) continue;
                y[out->at(n, (c / cg) * og + o, yi, yj)] +=
                    x[xd.at(n, c, i, j)] * w[wd.at(c, o, u, v)];
              }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

Tensor rnd(const Shape& s, Generator& g) { return randn(s, DType::Float64, &g); }

TEST(Conv2d, MatchesTheLoopOverStridesPaddingDilationGroups) {
  Generator gen(1);
  struct Case {
    Conv2dCase k;
    Shape x, w;
  };
  const std::vector<Case> cases = {
      {{1, 1, 0, 0, 0, 0, 1, 1, 1}, {2, 3, 5, 6}, {4, 3, 3, 3}},
      {{2, 3, 1, 2, 1, 2, 1, 1, 1}, {1, 2, 7, 8}, {3, 2, 3, 2}},
      {{1, 1, 2, 1, 2, 1, 2, 3, 1}, {2, 2, 9, 8}, {2, 2, 3, 2}},
      {{1, 2, 1, 1, 1, 1, 1, 1, 2}, {2, 4, 5, 7}, {6, 2, 3, 3}},
      {{2, 2, 1, 1, 1, 1, 1, 1, 3}, {1, 3, 6, 6}, {6, 1, 3, 3}},  // depthwise, multiplier 2
  };
  for (const Case& c : cases) {
    const Tensor x = rnd(c.x, gen), w = rnd(c.w, gen), b = rnd({c.w[0]}, gen);
    const Tensor y =
        conv2d(x, w, b, {c.k.sh, c.k.sw}, {c.k.pt, c.k.pl}, {c.k.dh, c.k.dw}, c.k.groups);
    const std::vector<double> bv = values(b);
    Dims4 od;
    const std::vector<double> want =
        conv2d_loop(values(x), {c.x[0], c.x[1], c.x[2], c.x[3]}, values(w),
                    {c.w[0], c.w[1], c.w[2], c.w[3]}, &bv, c.k, &od);
    EXPECT_EQ(y.shape(), (Shape{od.n, od.c, od.h, od.w}));
    expect_near_all(values(y), want, 1e-12, "conv2d " + detail::str(c.x, " * ", c.w));
  }
}

TEST(Conv2d, SamePaddingPutsTheOddElementOnTheRight) {
  Generator gen(2);
  const Tensor x = rnd({1, 2, 5, 6}, gen), w = rnd({3, 2, 2, 4}, gen);
  // kernel 2 x 4: total padding 1 and 3, so (top 0, bottom 1) and (left 1, right 2)
  const Tensor y = conv2d(x, w, {}, 1, "same");
  Dims4 od;
  const std::vector<double> want = conv2d_loop(values(x), {1, 2, 5, 6}, values(w), {3, 2, 2, 4},
                                               nullptr, {1, 1, 0, 1, 1, 2, 1, 1, 1}, &od);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 5, 6}));
  expect_near_all(values(y), want, 1e-12, "same");
  // dilated: dilation 2, kernel 2 -> total 2, one on each side
  const Tensor yd = conv2d(x, w, {}, 1, "same", 2);
  const std::vector<double> want_d = conv2d_loop(values(x), {1, 2, 5, 6}, values(w), {3, 2, 2, 4},
                                                 nullptr, {1, 1, 1, 3, 1, 3, 2, 2, 1}, &od);
  EXPECT_EQ(yd.shape(), (Shape{1, 3, 5, 6}));
  expect_near_all(values(yd), want_d, 1e-12, "same dilated");
  const Tensor yv = conv2d(x, w, {}, 1, "valid");
  EXPECT_EQ(yv.shape(), (Shape{1, 3, 4, 3}));
  expect_near_all(values(yv), values(conv2d(x, w)), 0, "valid is no padding");
}

TEST(Conv2d, UnbatchedInputIsABatchOfOne) {
  Generator gen(3);
  const Tensor x = rnd({2, 5, 4}, gen), w = rnd({3, 2, 3, 3}, gen), b = rnd({3}, gen);
  const Tensor y = conv2d(x, w, b, 1, 1);
  EXPECT_EQ(y.shape(), (Shape{3, 5, 4}));
  expect_near_all(values(y), values(conv2d(x.unsqueeze(0), w, b, 1, 1)), 0, "unbatched");
}

TEST(Conv1d, IsConv2dWithHeightOne) {
  Generator gen(4);
  const Tensor x = rnd({2, 4, 9}, gen), w = rnd({6, 2, 3}, gen), b = rnd({6}, gen);
  const Tensor y = conv1d(x, w, b, 2, 2, 2, 2);
  const std::vector<double> bv = values(b);
  Dims4 od;
  const std::vector<double> want = conv2d_loop(values(x), {2, 4, 1, 9}, values(w), {6, 2, 1, 3},
                                               &bv, {1, 2, 0, 2, 0, 2, 1, 2, 2}, &od);
  EXPECT_EQ(y.shape(), (Shape{2, 6, od.w}));
  expect_near_all(values(y), want, 1e-12, "conv1d");
}

TEST(ConvTranspose2d, MatchesTheScatterLoop) {
  Generator gen(5);
  struct Case {
    int64_t s, p, op, groups, d;
    Shape x, w;
  };
  const std::vector<Case> cases = {{1, 0, 0, 1, 1, {2, 3, 3, 4}, {3, 2, 3, 2}},
                                   {2, 1, 1, 1, 1, {1, 2, 4, 3}, {2, 3, 3, 3}},
                                   {3, 0, 2, 2, 1, {2, 4, 2, 3}, {4, 1, 2, 2}},
                                   {1, 1, 1, 1, 2, {1, 2, 3, 3}, {2, 2, 3, 2}}};
  for (const Case& c : cases) {
    const Tensor x = rnd(c.x, gen), w = rnd(c.w, gen);
    const Tensor y = conv_transpose2d(x, w, {}, c.s, c.p, c.op, c.groups, c.d);
    Dims4 od;
    const std::vector<double> want =
        conv_transpose2d_loop(values(x), {c.x[0], c.x[1], c.x[2], c.x[3]}, values(w),
                              {c.w[0], c.w[1], c.w[2], c.w[3]}, c.s, c.p, c.op, c.groups, c.d, &od);
    EXPECT_EQ(y.shape(), (Shape{od.n, od.c, od.h, od.w}));
    expect_near_all(values(y), want, 1e-12, "conv_transpose2d " + detail::str(c.x, " * ", c.w));
  }
  // bias over the output channels; conv_transpose1d as height one
  const Tensor x = rnd({2, 2, 5}, gen), w = rnd({2, 3, 3}, gen), b = rnd({3}, gen);
  const Tensor y1 = conv_transpose1d(x, w, b, 2, 1, 1);
  const Tensor y2 = conv_transpose2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {0, 1});
  expect_near_all(values(y1), values(y2.squeeze(2)), 1e-12, "conv_transpose1d");
  expect_near_all(values(y1), values(conv_transpose1d(x, w, {}, 2, 1, 1) + b.reshape({3, 1})),
                  1e-12, "bias");
}

TEST(Conv2d, ChannelsLastInputGivesAChannelsLastOutputOfTheSameValues) {
  Generator gen(6);
  const Tensor xc = randn({2, 5, 6, 8}, {}, &gen);  // [N, H, W, C] memory
  const Tensor x = xc.permute({0, 3, 1, 2});
  const Tensor w = randn({4, 8, 3, 3}, {}, &gen);
  const Tensor y = conv2d(x, w, {}, 1, 1);
  const Tensor want = conv2d(x.contiguous(), w, {}, 1, 1);
  expect_near_all(values(y), values(want), 1e-5, "channels last");
  if (y.strides()[1] == 1) EXPECT_EQ(y.strides(), (Shape{5 * 6 * 4, 1, 6 * 4, 4}));
}

TEST(Conv2d, AutocastRunsInBfloat16) {
  Generator gen(7);
  const Tensor x = randn({2, 3, 6, 6}, {}, &gen), w = randn({4, 3, 3, 3}, {}, &gen);
  Tensor y;
  {
    Autocast ac(DType::BFloat16);
    y = conv2d(x, w, {}, 1, 1);
  }
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  const Tensor want = conv2d(x.to(DType::BFloat16).to(DType::Float32),
                             w.to(DType::BFloat16).to(DType::Float32), {}, 1, 1);
  // the inputs rounded to bfloat16, float32 sums, the result rounded once: half a bfloat16 ulp
  const std::vector<double> got = values(y), ref = values(want);
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], std::abs(ref[i]) * (1.0 / 256) + 1e-5) << i;
}

// vmap over every combination of batched input, weight and bias (the registry batches all of
// them or the first only): each equals the loop over examples, for conv2d, conv_transpose2d and
// the per-example gradients through both.
TEST(ConvVmap, AnyCombinationOfBatchedArgumentsEqualsTheLoop) {
  Generator gen(8);
  const int64_t B = 3;
  auto conv = [](const std::vector<Tensor>& a) {
    return conv2d(a[0], a[1], a[2], {2, 1}, 1, 1, 2);
  };
  auto tconv = [](const std::vector<Tensor>& a) {
    return conv_transpose2d(a[0], a[1], a[2], 2, 1, 1, 2);
  };
  auto wgrad = [&](const std::vector<Tensor>& a) {
    return grad([&](const std::vector<Tensor>& p) { return conv(p).square().sum(); }, 1)(a);
  };
  struct Fn {
    std::function<Tensor(const std::vector<Tensor>&)> f;
    Shape x, w, b;
  };
  const std::vector<Fn> fns = {{conv, {2, 4, 5, 6}, {6, 2, 3, 3}, {6}},
                               {tconv, {2, 4, 3, 3}, {4, 3, 3, 2}, {6}},
                               {wgrad, {2, 4, 5, 6}, {6, 2, 3, 3}, {6}}};
  for (const Fn& fn : fns)
    for (int mask = 1; mask < 8; ++mask) {
      std::vector<Tensor> args;
      std::vector<BatchDim> dims;
      const std::vector<Shape> shapes{fn.x, fn.w, fn.b};
      for (int i = 0; i < 3; ++i) {
        const bool batched = (mask >> i) & 1;
        Shape s = shapes[static_cast<std::size_t>(i)];
        if (batched) s.insert(i == 1 ? 1 : 0, B);  // the weight's batch dim not in front
        args.push_back(rnd(s, gen));
        dims.push_back(batched ? BatchDim(i == 1 ? 1 : 0) : no_batch);
      }
      const Tensor got = vmap(fn.f, dims)(args);
      std::vector<Tensor> want;
      for (int64_t k = 0; k < B; ++k) {
        std::vector<Tensor> ex;
        for (int i = 0; i < 3; ++i)
          ex.push_back(
              dims[static_cast<std::size_t>(i)]
                  ? args[static_cast<std::size_t>(i)].select(*dims[static_cast<std::size_t>(i)], k)
                  : args[static_cast<std::size_t>(i)]);
        want.push_back(fn.f(ex));
      }
      expect_near_all(values(got), values(stack(want, 0)), 1e-10,
                      "vmap mask " + std::to_string(mask));
    }
}

// ---- errors ----

void expect_error(const std::function<void()>& f, ErrorKind kind,
                  const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "no error; expected one mentioning " << parts[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(ConvErrors, NameTheOpShapesAndDtypes) {
  const Tensor x = zeros({2, 4, 5, 5}), w = zeros({6, 2, 3, 3});
  expect_error(
      [&] {
        conv2d(x, zeros({6, 3, 3, 3}));
      },
      ErrorKind::Shape, {"[conv2d]", "[2, 4, 5, 5]", "[6, 3, 3, 3]", "float32", "channels"});
  expect_error(
      [&] {
        conv2d(x, zeros({6, 4, 3, 3}), {}, 1, 0, 1, 3);
      },
      ErrorKind::Value, {"[conv2d]", "groups (3)", "[2, 4, 5, 5]"});
  expect_error(
      [&] {
        conv2d(x, zeros({5, 2, 3, 3}), {}, 1, 0, 1, 2);
      },
      ErrorKind::Value, {"[conv2d]", "groups (2)", "[5, 2, 3, 3]"});
  expect_error([&] { conv2d(x, w, {}, 1, "full", 1, 2); }, ErrorKind::Value,
               {"[conv2d]", "\"full\"", "same", "valid"});
  expect_error([&] { conv2d(x, w, {}, 2, "same", 1, 2); }, ErrorKind::Value,
               {"[conv2d]", "strided", "[2, 2]"});
  expect_error([&] { conv2d(zeros({4, 5}), w); }, ErrorKind::Shape, {"[conv2d]", "[4, 5]", "3-d"});
  expect_error(
      [&] {
        conv2d(x, zeros({6, 2, 3}));
      },
      ErrorKind::Shape, {"[conv2d]", "4-d weight", "[6, 2, 3]"});
  expect_error([&] { conv1d(x, w); }, ErrorKind::Shape, {"[conv1d]", "[2, 4, 5, 5]"});
  expect_error([&] { conv2d(x.to(DType::Float64), w, {}, 1, 0, 1, 2); }, ErrorKind::DType,
               {"[conv2d]", "float64", "float32", "[6, 2, 3, 3]"});
  expect_error([&] { conv2d(x, w, zeros({6}, DType::Float64), 1, 0, 1, 2); }, ErrorKind::DType,
               {"[conv2d]", "bias", "float64"});
  expect_error([&] { conv2d(x.to(DType::Int64), w.to(DType::Int64), {}, 1, 0, 1, 2); },
               ErrorKind::DType, {"[conv2d]", "floating", "int64"});
  expect_error([&] { conv2d(x, w, zeros({5}), 1, 0, 1, 2); }, ErrorKind::Shape,
               {"[conv2d]", "bias", "[5]", "[6]"});
  expect_error([&] { conv2d(x, w, {}, 1, 0, 1, 0); }, ErrorKind::Value, {"[conv2d]", "groups"});
  expect_error([&] { conv2d(x, w, {}, 0, 0, 1, 2); }, ErrorKind::Value, {"[conv2d]", "stride"});
  expect_error([&] { conv2d(x, w, {}, 1, -1, 1, 2); }, ErrorKind::Value, {"[conv2d]", "padding"});
  expect_error(
      [&] {
        conv2d(x, w, {}, {1, 1, 1}, 0, 1, 2);
      },
      ErrorKind::Value, {"[conv2d]", "stride", "[1, 1, 1]"});
  expect_error(
      [&] {
        conv2d(x, zeros({6, 2, 7, 3}), {}, 1, 0, 1, 2);
      },
      ErrorKind::Shape, {"[conv2d]", "does not fit", "[6, 2, 7, 3]"});
  expect_error([&] { conv2d(x, w, {}, 1, 0, 3, 2); }, ErrorKind::Shape, {"[conv2d]", "dilation 3"});
  // transposed
  const Tensor wt = zeros({4, 3, 3, 3});
  expect_error(
      [&] {
        conv_transpose2d(x, zeros({3, 3, 3, 3}));
      },
      ErrorKind::Shape, {"[conv_transpose2d]", "[2, 4, 5, 5]", "[3, 3, 3, 3]"});
  expect_error([&] { conv_transpose2d(x, wt, {}, 2, 0, 2); }, ErrorKind::Value,
               {"[conv_transpose2d]", "output_padding", "[2, 2]"});
  expect_error([&] { conv_transpose2d(x, wt, {}, 1, 0, 0, 3); }, ErrorKind::Shape,
               {"[conv_transpose2d]", "groups (3)"});
  expect_error([&] { conv_transpose2d(x, wt, zeros({4})); }, ErrorKind::Shape,
               {"[conv_transpose2d]", "bias", "[3]"});
  expect_error([&] { conv_transpose2d(x, wt, {}, 1, 4); }, ErrorKind::Shape,
               {"[conv_transpose2d]", "size -1"});
  expect_error([&] { conv_transpose1d(x, wt); }, ErrorKind::Shape,
               {"[conv_transpose1d]", "[2, 4, 5, 5]"});
  expect_error([&] { conv_transpose2d(x, wt.to(DType::Float64)); }, ErrorKind::DType,
               {"[conv_transpose2d]", "float64", "float32"});
}

}  // namespace

// The Autocast layer converts a convolution's operands (Note [Products promote inside the op]
// in src/ops/linalg.cpp): a bfloat16 input beside float32 parameters is accepted under autocast
// and equals the casts written out, bit for bit, while without autocast the same call is the
// dtype error it always was.
TEST(ConvAutocast, ABfloat16InputBesideFloat32ParametersIsLoweredByTheLayer) {
  Generator gen(9);
  const DType bf16 = DType::BFloat16;
  const Tensor x = randn({2, 4, 5, 5}, {}, &gen).to(bf16), w = randn({6, 2, 3, 3}, {}, &gen);
  const Tensor b = randn({6}, {}, &gen);
  const Tensor wt = randn({4, 3, 3, 3}, {}, &gen);
  Tensor y, yt;
  {
    Autocast ac(bf16);
    y = conv2d(x, w, b, 1, "same", 1, 2);
    yt = conv_transpose2d(x, wt, b, 2, 1, 1, 2);
  }
  ASSERT_EQ(y.dtype(), bf16);
  ASSERT_EQ(yt.dtype(), bf16);
  EXPECT_EQ(values(y), values(conv2d(x, w.to(bf16), b.to(bf16), 1, "same", 1, 2)));
  EXPECT_EQ(values(yt), values(conv_transpose2d(x, wt.to(bf16), b.to(bf16), 2, 1, 1, 2)));
  expect_error([&] { conv2d(x, w, b, 1, "same", 1, 2); }, ErrorKind::DType,
               {"[conv2d]", "bfloat16", "float32"});
  expect_error([&] { conv_transpose2d(x, wt, b, 2, 1, 1, 2); }, ErrorKind::DType,
               {"[conv_transpose2d]", "bfloat16", "float32"});
}
