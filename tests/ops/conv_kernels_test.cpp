// The oneDNN convolution path against the reference loops (src/backend/cpu/conv_reference.cpp),
// forward, backward-data and backward-weights, float32 and bfloat16, over odd sizes, strides,
// one-sided padding, dilations, groups, depthwise, channels-last inputs, several batch pieces
// and the Fashion-MNIST ResNet's shapes. The bounds come from the dtypes: each output is a sum
// of n products, so float32 accumulation differs from the float64 reference by at most
// n eps32 Σ|x w| (Higham's γ_n), and a bfloat16 result adds its rounding, half an ulp of |y|.
// Inputs of fewer than 8 channels run on plain NCHW, the others on oneDNN's blocked layouts
// (Note [Convolution memory format]); ctest runs this again with ADJOINT_CONV_LAYOUT=plain and
// with oneDNN capped at AVX2, and with its direct kernels forced (ADJOINT_CONV_ALGO=direct;
// the default lets oneDNN choose Winograd). Skipped (saying so) where oneDNN is not built or
// has no bfloat16 ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "adjoint/adjoint.h"
#include "backend/conv_kernels.h"

namespace {

using namespace adjoint;
using kernels::ConvGeometry;
using kernels::ConvPath;

struct Case {
  std::string name;
  Shape x, w;
  ConvGeometry g;
  bool channels_last = false;
};

std::vector<Case> cases() {
  return {
      {"basic", {2, 3, 7, 6}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
      {"strided_one_sided", {3, 5, 9, 8}, {6, 5, 2, 4}, {{2, 3}, {0, 1}, {1, 2}, {1, 1}, 1}},
      {"dilated", {2, 4, 11, 9}, {3, 4, 3, 2}, {{1, 2}, {2, 1}, {2, 1}, {2, 3}, 1}},
      {"groups", {2, 6, 8, 8}, {9, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 3}},
      {"blocked_odd", {3, 10, 9, 8}, {7, 10, 2, 3}, {{2, 1}, {0, 1}, {1, 2}, {2, 1}, 1}},
      {"blocked_groups", {2, 16, 7, 7}, {24, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 2}},
      {"depthwise", {3, 8, 10, 10}, {16, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 8}},
      {"channels_last", {2, 16, 9, 7}, {8, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}, true},
      {"conv1d", {4, 3, 17}, {5, 3, 4}, {{2}, {1}, {2}, {1}, 1}},
      {"conv3d", {2, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, {{1, 1, 2}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, 1}},
      {"resnet_first", {64, 1, 28, 28}, {16, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
      {"resnet_16_32_stride2",
       {64, 16, 28, 28},
       {32, 16, 3, 3},
       {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1}},
      {"resnet_64", {16, 64, 7, 7}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
      // 3x3 stride 1 with 32 channels: where oneDNN may pick Winograd (Note [Convolution
      // algorithm]).
      {"resnet_32", {32, 32, 14, 14}, {32, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
  };
}

// x in `dtype`, channels-last when the case asks (converted before the permute: a conversion
// gives a contiguous tensor).
Tensor make_input(const Case& c, DType dtype, Generator& gen) {
  if (!c.channels_last) return randn(c.x, {}, &gen).to(dtype);
  Shape perm{c.x[0]};
  for (std::size_t i = 2; i < c.x.size(); ++i) perm.push_back(c.x[i]);
  perm.push_back(c.x[1]);
  std::vector<int64_t> back{0, static_cast<int64_t>(c.x.size()) - 1};
  for (int64_t i = 1; i + 1 < static_cast<int64_t>(c.x.size()); ++i) back.push_back(i);
  return randn(perm, {}, &gen).to(dtype).permute(back);
}

double eps_of(DType d) { return d == DType::BFloat16 ? 1.0 / 128 : 1.0 / (1 << 23); }

// |got - want| <= n eps32 |a|*|b| + (bfloat16: eps |want|) elementwise, where |a|*|b| is the
// same kernel on absolute values (float64).
void expect_within(const Tensor& got, const Tensor& want, const Tensor& abs_sum, int64_t n,
                   DType dtype, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), dtype) << what;
  const std::vector<double> g = got.to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> w = want.contiguous().to_vector<double>();
  const std::vector<double> a = abs_sum.contiguous().to_vector<double>();
  const double eps32 = 1.0 / (1 << 23);
  for (std::size_t i = 0; i < g.size(); ++i) {
    double bound = static_cast<double>(n + 1) * eps32 * a[i] + 1e-30;
    if (dtype == DType::BFloat16) bound += 0.5 * eps_of(dtype) * std::abs(w[i]) * 1.01;
    ASSERT_LE(std::abs(g[i] - w[i]), bound)
        << what << " at " << i << ": " << g[i] << " vs " << w[i];
  }
}

Shape output_shape(const Case& c) {
  Shape s{c.x[0], c.w[0]};
  for (std::size_t i = 0; i + 2 < c.x.size(); ++i)
    s.push_back(kernels::conv_output_size(c.x[2 + i], c.w[2 + i], c.g.stride[i], c.g.pad_l[i],
                                          c.g.pad_r[i], c.g.dilation[i]));
  return s;
}

void check_dtype(DType dtype) {
  if (!kernels::conv_onednn_supports(dtype))
    GTEST_SKIP() << "oneDNN has no " << dtype << " convolution here ("
                 << kernels::conv_path_name(dtype) << ")";
  Generator gen(11);
  for (const Case& c : cases()) {
    // Inputs representable in the dtype, so that both paths see the same numbers.
    const Tensor x = make_input(c, dtype, gen), w = randn(c.w, {}, &gen).to(dtype);
    const Tensor b = randn({c.w[0]}, {}, &gen).to(dtype);
    const Tensor gy = randn(output_shape(c), {}, &gen).to(dtype);
    const Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64),
                 gy64 = gy.to(DType::Float64);
    const Tensor b64 = b.to(DType::Float64);
    const int64_t kvol = Shape(std::vector<int64_t>(c.w.begin() + 2, c.w.end())).numel();
    const std::string what = c.name + " " + detail::str(dtype);
    auto ref = ConvPath::Reference;

    const Tensor y = kernels::conv_forward(x, w, b, c.g, ConvPath::OneDnn);
    expect_within(y, kernels::conv_forward(x64, w64, b64, c.g, ref),
                  kernels::conv_forward(x64.abs(), w64.abs(), b64.abs(), c.g, ref), c.w[1] * kvol,
                  dtype, what + " forward");
    if (c.channels_last) EXPECT_EQ(y.strides()[1], 1) << what << ": the output keeps the layout";

    const Tensor gx = kernels::conv_backward_data(gy, w, c.g, c.x, ConvPath::OneDnn);
    expect_within(gx, kernels::conv_backward_data(gy64, w64, c.g, c.x, ref),
                  kernels::conv_backward_data(gy64.abs(), w64.abs(), c.g, c.x, ref),
                  (c.w[0] / c.g.groups) * kvol, dtype, what + " backward-data");

    const Tensor gw = kernels::conv_backward_weight(x, gy, c.g, c.w, ConvPath::OneDnn);
    expect_within(gw, kernels::conv_backward_weight(x64, gy64, c.g, c.w, ref),
                  kernels::conv_backward_weight(x64.abs(), gy64.abs(), c.g, c.w, ref),
                  c.x[0] * output_shape(c).numel() / (c.x[0] * c.w[0]), dtype,
                  what + " backward-weights");
  }
}

TEST(ConvKernels, OneDnnFloat32MatchesTheReference) { check_dtype(DType::Float32); }
TEST(ConvKernels, OneDnnBfloat16MatchesTheReference) { check_dtype(DType::BFloat16); }

// The reference path itself in float32 against float64 (the path without oneDNN).
TEST(ConvKernels, ReferenceFloat32MatchesFloat64) {
  Generator gen(12);
  const Case c = cases()[1];
  const Tensor x = randn(c.x, {}, &gen), w = randn(c.w, {}, &gen);
  const Tensor y = kernels::conv_forward(x, w, {}, c.g, ConvPath::Reference);
  const Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64);
  expect_within(y, kernels::conv_forward(x64, w64, {}, c.g, ConvPath::Reference),
                kernels::conv_forward(x64.abs(), w64.abs(), {}, c.g, ConvPath::Reference), 1,
                DType::Float32, "reference float32");
}

}  // namespace
