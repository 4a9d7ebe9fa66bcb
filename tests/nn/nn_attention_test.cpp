// Tests for nn::CausalSelfAttention and the transformer Block: forward values against the
// loop oracle in gpt_oracle.h, causality (a future token changes neither earlier outputs nor
// their gradients), the mask buffer, names, dropout in train/eval mode, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "gpt_oracle.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
namespace oracle = adjoint::testing::oracle;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

}  // namespace

TEST(CausalSelfAttention, MatchesLoopOracle) {
  Generator gen(21);
  const int64_t B = 2, d = 8, H = 2, context = 7;
  nn::CausalSelfAttention attn(d, H, context, 0.0, &gen);
  attn.to(DType::Float64);
  EXPECT_EQ(names(attn),
            (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  // T < context uses the top-left corner of the mask; T == context uses all of it.
  for (int64_t T : {int64_t{5}, context, int64_t{1}}) {
    Tensor x = randn({B, T, d}, DType::Float64, &gen);
    Tensor y = attn(x);
    ASSERT_EQ(y.shape(), (Shape{B, T, d}));
    const std::vector<double> want =
        oracle::attention(values(x), B, T, d, H, values(attn.qkv->weight), values(attn.qkv->bias),
                          values(attn.proj->weight), values(attn.proj->bias));
    expect_near_all(values(y), want, 1e-13);
  }
}

TEST(CausalSelfAttention, MaskBufferIsStrictlyUpperTriangular) {
  nn::CausalSelfAttention attn(4, 1, 5);
  auto buffers = attn.named_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].first, "mask");
  const Tensor& mask = buffers[0].second;
  EXPECT_EQ(mask.dtype(), DType::Bool);
  ASSERT_EQ(mask.shape(), (Shape{5, 5}));
  std::vector<bool> m;
  for (int64_t v : mask.to_vector<int64_t>()) m.push_back(v != 0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(m[i * 5 + j], j > i) << i << "," << j;
  attn.to(DType::Float64);  // the mask stays bool
  EXPECT_EQ(attn.mask.dtype(), DType::Bool);
}

TEST(CausalSelfAttention, FutureTokensDoNotChangeEarlierOutputs) {
  Generator gen(22);
  const int64_t B = 2, T = 6, d = 12, H = 3;
  nn::CausalSelfAttention attn(d, H, T, 0.0, &gen);
  attn.to(DType::Float64);
  Tensor x = randn({B, T, d}, DType::Float64, &gen);
  Tensor changed = x.clone();
  {
    NoGradGuard no_grad;
    changed.select(1, 4).add_(randn({B, d}, DType::Float64, &gen));  // token 4 only
  }
  const std::vector<double> y0 = values(attn(x)), y1 = values(attn(changed));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double diff = 0;
      for (int64_t e = 0; e < d; ++e) {
        const std::size_t i = (b * T + t) * d + e;
        diff = std::max(diff, std::abs(y0[i] - y1[i]));
      }
      if (t < 4) {
        EXPECT_LE(diff, 1e-14) << "position " << t << " saw the future";
      } else {
        EXPECT_GT(diff, 1e-6) << "position " << t << " ignored token 4";
      }
    }

  // The same through the gradient: d y[:, 2] / d x[:, t] is zero exactly for t > 2.
  Tensor xl = x.detach().requires_grad_(true);
  attn(xl).select(1, 2).sum().backward();
  const std::vector<double> g = values(xl.grad().abs().sum({0, 2}));
  for (int64_t t = 0; t < T; ++t) {
    if (t <= 2) {
      EXPECT_GT(g[t], 0.0) << "position " << t;
    } else {
      EXPECT_EQ(g[t], 0.0) << "position " << t;
    }
  }
}

TEST(CausalSelfAttention, DropoutOnlyInTraining) {
  Generator gen(23);
  nn::CausalSelfAttention attn(8, 2, 4, 0.5, &gen);
  Tensor x = randn({2, 4, 8}, {}, &gen);
  attn.eval();
  const std::vector<float> e1 = attn(x).to_vector<float>(), e2 = attn(x).to_vector<float>();
  EXPECT_EQ(e1, e2);
  attn.train();
  EXPECT_NE(attn(x).to_vector<float>(), e1);
}

TEST(CausalSelfAttention, Errors) {
  expect_error([] { nn::CausalSelfAttention(10, 3, 4); }, ErrorKind::Value,
               {"[nn.CausalSelfAttention]", "d_model 10", "heads 3"});
  nn::CausalSelfAttention attn(8, 2, 4);
  expect_error(
      [&] {
        attn(zeros({2, 4, 6}));
      },
      ErrorKind::Shape,
      {"[nn.CausalSelfAttention]", "expected input [B, T, 8]", "[2, 4, 6] (float32)"});
  expect_error([&] { attn(zeros({4, 8})); }, ErrorKind::Shape, {"[B, T, 8]"});
  expect_error(
      [&] {
        attn(zeros({1, 5, 8}));
      },
      ErrorKind::Shape, {"sequence length 5 exceeds the context 4"});
}

TEST(Block, PreLayerNormResidualsMatchOracle) {
  Generator gen(24);
  const int64_t B = 2, T = 4, d = 8, H = 2;
  nn::Block block(d, H, T, 0.0, &gen);
  block.to(DType::Float64);
  EXPECT_EQ(names(block),
            (std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                      "attn.proj.weight", "attn.proj.bias", "ln2.weight",
                                      "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                                      "mlp.fc_out.weight", "mlp.fc_out.bias"}));
  {
    NoGradGuard no_grad;  // LayerNorm parameters away from the trivial 1 and 0
    for (const Tensor& p : block.parameters()) {
      Tensor t = p;
      t.add_(randn(p.shape(), DType::Float64, &gen) * 0.1);
    }
  }
  Tensor x = randn({B, T, d}, DType::Float64, &gen);
  auto P = [&](const std::string& n) { return values(block.get_parameter(n)); };
  const int64_t rows = B * T;
  std::vector<double> xv = values(x);
  std::vector<double> a = oracle::attention(
      oracle::layer_norm(xv, rows, d, P("ln1.weight"), P("ln1.bias")), B, T, d, H,
      P("attn.qkv.weight"), P("attn.qkv.bias"), P("attn.proj.weight"), P("attn.proj.bias"));
  for (int64_t i = 0; i < rows * d; ++i) xv[i] += a[i];
  std::vector<double> f =
      oracle::linear(oracle::layer_norm(xv, rows, d, P("ln2.weight"), P("ln2.bias")), rows, d,
                     P("mlp.fc.weight"), P("mlp.fc.bias"), 4 * d);
  for (double& v : f) v = oracle::gelu_tanh(v);
  std::vector<double> o =
      oracle::linear(f, rows, 4 * d, P("mlp.fc_out.weight"), P("mlp.fc_out.bias"), d);
  for (int64_t i = 0; i < rows * d; ++i) xv[i] += o[i];
  expect_near_all(values(block(x)), xv, 1e-12);
}
