// Unit tests for masked_softmax (src/ops/nn.cpp, src/backend/cpu/masked_softmax.cpp). Values are
// checked against a softmax written out by hand in double over the unmasked entries of each
// row, and gradients against the unfused composite softmax(masked_fill(x, mask, -inf)), which
// autograd differentiates with the masked_fill and softmax rules. The kernel's three paths are
// each exercised: rows whose unmasked entries are a prefix (causal masks), any other mask along
// the last dim, and other dims.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::autograd::grad;
using adjoint::testing::expect_error;
using adjoint::testing::expect_values;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

// mask[i][j] = j > i: row i may not see the entries after i.
Tensor causal_mask(int64_t n) {
  Tensor pos = arange(n);
  return gt(pos.unsqueeze(0), pos.unsqueeze(1));
}

// A mask whose unmasked entries are not a prefix in most rows.
Tensor scattered_mask(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return lt(rand(shape, DType::Float64, &gen), 0.4);
}

// masked_softmax by hand: x and the mask (already broadcast) as row-major vectors, the softmax
// over the unmasked entries of each row along `dim`, 0 elsewhere (and on all-masked rows).
std::vector<double> oracle(const std::vector<double>& x, const std::vector<bool>& m,
                           const Shape& shape, int64_t dim) {
  int64_t outer = 1, n = shape[dim], inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (std::size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * n + d) * inner + i; };
      double mx = -INFINITY, s = 0;
      for (int64_t d = 0; d < n; ++d)
        if (!m[at(d)]) mx = std::max(mx, x[at(d)]);
      if (mx == -INFINITY) continue;  // every entry masked
      for (int64_t d = 0; d < n; ++d)
        if (!m[at(d)]) s += std::exp(x[at(d)] - mx);
      for (int64_t d = 0; d < n; ++d)
        if (!m[at(d)]) y[at(d)] = std::exp(x[at(d)] - mx) / s;
    }
  return y;
}

std::vector<bool> bools(const Tensor& mask, const Shape& shape) {
  std::vector<bool> out;
  for (int64_t b : mask.expand(shape).to(DType::Int64).to_vector<int64_t>()) out.push_back(b != 0);
  return out;
}

void expect_matches_oracle(const Tensor& x, const Tensor& mask, int64_t dim, double tol,
                           const std::string& what) {
  const Tensor y = masked_softmax(x, mask, dim);
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const std::vector<bool> m = bools(mask, x.shape());
  const std::vector<double> want = oracle(x.to_vector<double>(), m, x.shape(), d);
  const std::vector<double> got = y.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (m[i]) {
      EXPECT_EQ(got[i], 0.0) << what << ": masked entry " << i << " is not exactly 0";
    } else {
      EXPECT_NEAR(got[i], want[i], tol) << what << " at " << i;
    }
  }
}

Tensor composite(const Tensor& x, const Tensor& mask, int64_t dim) {
  return softmax(masked_fill(x, mask, -std::numeric_limits<double>::infinity()), dim);
}

}  // namespace

TEST(MaskedSoftmax, CausalMaskMatchesHandWrittenSoftmaxOfUnmaskedPrefix) {
  expect_matches_oracle(randn_t({2, 3, 6, 6}, 1), causal_mask(6), -1, 1e-14, "causal");
  // float32 rows of attention size, against the double oracle
  expect_matches_oracle(randn_t({2, 128, 128}, 2, DType::Float32), causal_mask(128), -1, 1e-6,
                        "causal float32");
}

TEST(MaskedSoftmax, AnyMaskAlongTheLastDim) {
  const Shape shape{3, 4, 7};
  expect_matches_oracle(randn_t(shape, 3), scattered_mask(shape, 4), 2, 1e-14, "full mask");
  expect_matches_oracle(randn_t(shape, 5), scattered_mask({4, 7}, 6), -1, 1e-14, "broadcast");
  expect_matches_oracle(randn_t(shape, 7), scattered_mask({4, 1}, 8), -1, 1e-14,
                        "mask broadcast along the softmax dim");
  expect_matches_oracle(randn_t(shape, 9, DType::Float32), scattered_mask({7}, 10), -1, 1e-6,
                        "float32");
}

TEST(MaskedSoftmax, OtherDimsAndNonContiguousOperands) {
  const Shape shape{5, 4, 3};
  expect_matches_oracle(randn_t(shape, 11), scattered_mask(shape, 12), 0, 1e-14, "dim 0");
  expect_matches_oracle(randn_t(shape, 13), scattered_mask({4, 1}, 14), 1, 1e-14, "dim 1");
  // a transposed input and a transposed mask along the last dim
  const Tensor xt = randn_t({6, 5}, 15).t();
  const Tensor mt = scattered_mask({6, 5}, 16).t();
  ASSERT_FALSE(xt.is_contiguous());
  expect_matches_oracle(xt, mt, 1, 1e-14, "transposed");
  expect_matches_oracle(xt, causal_mask(6).t().slice(0, 0, 5), -1, 1e-14, "transposed causal");
}

TEST(MaskedSoftmax, FullyMaskedRowIsZeroWhereTheCompositeIsNaN) {
  Tensor mask = tensor(std::vector<bool>{true, true, true, false, true, false}, Shape{2, 3});
  for (int64_t dim : {1, 0}) {
    const Tensor x = randn_t({2, 3}, 17);
    const std::vector<double> y = masked_softmax(x, mask, dim).to_vector<double>();
    const std::vector<double> c = composite(x, mask, dim).to_vector<double>();
    if (dim == 1) {
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(y[j], 0.0) << "all-masked row, entry " << j;
        EXPECT_TRUE(std::isnan(c[j])) << "the composite's all-masked row is NaN";
      }
    }
    expect_matches_oracle(x, mask, dim, 1e-14, "dim " + std::to_string(dim));
  }
}

TEST(MaskedSoftmax, NaNOrInfinityUnderTheMaskDoesNotLeak) {
  Tensor x = tensor({1.0, std::nan(""), 2.0, std::numeric_limits<double>::infinity()}, {1, 4},
                    DType::Float64);
  Tensor mask = tensor(std::vector<bool>{false, true, false, true}, Shape{1, 4});
  const std::vector<double> y = masked_softmax(x, mask, -1).to_vector<double>();
  const double e = std::exp(1.0);  // softmax of (1, 2) = (1, e) / (1 + e)
  EXPECT_NEAR(y[0], 1 / (1 + e), 1e-15);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_NEAR(y[2], e / (1 + e), 1e-15);
  EXPECT_EQ(y[3], 0.0);
}

TEST(MaskedSoftmax, GradientsEqualTheComposites) {
  // reverse mode, including a second derivative, for a causal mask and a scattered one
  for (bool causal : {true, false}) {
    const Shape shape{2, 5, 5};
    const Tensor mask = causal ? causal_mask(5) : scattered_mask({5, 5}, 18);
    const Tensor w = randn_t(shape, 19);
    Tensor x1 = leaf(randn_t(shape, 20)), x2 = leaf(x1);
    auto loss = [&](const Tensor& y) { return (y * w).sum() + (y * y).sum(); };
    Tensor g1 = grad({loss(masked_softmax(x1, mask, -1))}, {x1}, {}, true, true)[0];
    Tensor g2 = grad({loss(composite(x2, mask, -1))}, {x2}, {}, true, true)[0];
    expect_values(g1, g2.to_vector<double>(), 1e-12);  // first derivative
    Tensor h1 = grad({(g1 * w).sum()}, {x1})[0];
    Tensor h2 = grad({(g2 * w).sum()}, {x2})[0];
    expect_values(h1, h2.to_vector<double>(), 1e-12);  // second derivative
  }
  // forward mode
  const Tensor mask = scattered_mask({4, 6}, 21);
  const Tensor x = randn_t({4, 6}, 22), t = randn_t({4, 6}, 23);
  DualLevel level;
  Tensor j1 = unpack_dual(masked_softmax(make_dual(x, t), mask, 1)).second;
  Tensor j2 = unpack_dual(composite(make_dual(x, t), mask, 1)).second;
  expect_values(j1, j2.to_vector<double>(), 1e-12);
}

TEST(MaskedSoftmax, Errors) {
  const Tensor x = zeros({2, 3});
  expect_error([&] { masked_softmax(x, zeros({3}), 1); }, ErrorKind::DType,
               {"masked_softmax", "bool", "float32"});
  expect_error([&] { masked_softmax(x, causal_mask(2), 1); }, ErrorKind::Shape,
               {"masked_softmax", "[2, 2]", "[2, 3]"});
  expect_error([&] { masked_softmax(x, lt(arange(3), 1), 2); }, ErrorKind::Index,
               {"masked_softmax"});
  expect_error([&] { masked_softmax(Tensor(), causal_mask(3), 0); }, ErrorKind::Value,
               {"masked_softmax"});
}
