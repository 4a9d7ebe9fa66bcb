// Unit tests for the indexing ops (src/ops/indexing.cpp, src/backend/cpu/index.cpp): values of
// index_select, gather, scatter_add, index_add, masked_fill, embedding, one_hot, tril and triu
// against naive loops written here, gradients (repeated indices accumulate), and the errors
// for out-of-range and non-int64 indices.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

Tensor iota(const Shape& shape, double scale = 1) {
  std::vector<double> v(shape.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<double>(i);
  return tensor(v, shape);
}

Tensor ints(std::vector<int64_t> v, std::optional<Shape> shape = std::nullopt) {
  return tensor(v, shape);
}

Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, DType::Float64, &gen);
}

TEST(IndexSelect, ValuesAgainstLoops) {
  Tensor x = randn64({4, 3, 2}, 1);
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> idx = {2, 0, 2};
  Tensor y = index_select(x, 1, ints(idx));
  ASSERT_EQ(y.shape(), Shape({4, 3, 2}));
  std::vector<double> yv = y.to_vector<double>();
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t b = 0; b < 2; ++b)
        EXPECT_EQ(yv[(a * 3 + j) * 2 + b], xv[(a * 3 + idx[j]) * 2 + b]);
  // Non-contiguous input: rows of x.t() are columns of x.
  Tensor m = iota({3, 4});
  EXPECT_EQ(m.t().index_select(0, ints({3, 1})).to_vector<double>(),
            (std::vector<double>{3, 7, 11, 1, 5, 9}));
  // Integer data.
  EXPECT_EQ(index_select(ints({10, 20, 30}), 0, ints({2, 2, 0})).to_vector<int64_t>(),
            (std::vector<int64_t>{30, 30, 10}));
}

TEST(IndexSelect, GradientAccumulatesRepeatedIndices) {
  Tensor x = iota({4, 2}).requires_grad_(true);
  Tensor w = iota({3, 2}) + 1;  // rows [1,2], [3,4], [5,6] go to rows 3, 1, 3
  (index_select(x, 0, ints({3, 1, 3})) * w).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 3, 4, 0, 0, 6, 8}));
}

TEST(Gather, ValuesAgainstLoops) {
  Tensor x = randn64({3, 4, 2}, 2);
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> iv = {0, 3, 3, 1, 2, 2, 1, 0, 0, 0, 3, 1};  // shape [3, 2, 2]
  Tensor y = gather(x, 1, ints(iv, Shape{3, 2, 2}));
  ASSERT_EQ(y.shape(), Shape({3, 2, 2}));
  std::vector<double> yv = y.to_vector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t flat = (i * 2 + j) * 2 + k;
        EXPECT_EQ(yv[flat], xv[(i * 4 + iv[flat]) * 2 + k]);
      }
  // dim 0 on a transposed input: y[i][j] = x.t()[index[i][j]][j] = m[j][index[i][j]].
  Tensor m = iota({2, 3});
  EXPECT_EQ(m.t().gather(0, ints({2, 0, 1, 1}, Shape{2, 2})).to_vector<double>(),
            (std::vector<double>{2, 3, 1, 4}));
}

TEST(Gather, GradientIsScatterAdd) {
  Tensor x = iota({2, 3}).requires_grad_(true);
  Tensor w = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, DType::Float64);
  (gather(x, 1, ints({2, 2, 0, 1}, Shape{2, 2})) * w).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 3, 3, 4, 0}));
}

TEST(ScatterAdd, ValuesAgainstLoopAndOutOfPlace) {
  Tensor x = randn64({3, 4}, 3), src = randn64({2, 4}, 4);
  std::vector<int64_t> iv = {2, 0, 2, 2, 2, 1, 0, 2};  // [2, 4], repeats along dim 0
  const std::vector<double> xv = x.to_vector<double>(), sv = src.to_vector<double>();
  Tensor y = scatter_add(x, 0, ints(iv, Shape{2, 4}), src);
  std::vector<double> want = xv;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) want[iv[i * 4 + j] * 4 + j] += sv[i * 4 + j];
  std::vector<double> yv = y.to_vector<double>();
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_DOUBLE_EQ(yv[k], want[k]);
  EXPECT_EQ(x.to_vector<double>(), xv);  // x itself is untouched
  // Along dim 1 with an index narrower than src (src's extra column is unused).
  Tensor z = zeros({2, 3}, DType::Float64)
                 .scatter_add(1, ints({1, 1, 0, 2}, Shape{2, 2}), iota({2, 3}) + 1);
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{0, 3, 0, 4, 0, 5}));
}

TEST(ScatterAdd, GradientsForInputAndSrc) {
  Tensor x = iota({2, 3}).requires_grad_(true);
  Tensor src = iota({2, 3}).requires_grad_(true);
  Tensor w = iota({2, 3}) + 1;  // [[1,2,3],[4,5,6]]
  // index [[2, 2], [0, 1]] covers src[:, :2]; src[:, 2] gets no gradient.
  (scatter_add(x, 1, ints({2, 2, 0, 1}, Shape{2, 2}), src) * w).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(src.grad().to_vector<double>(), (std::vector<double>{3, 3, 0, 4, 5, 0}));
}

TEST(IndexAdd, ValuesAgainstLoop) {
  Tensor x = randn64({2, 4}, 5), source = randn64({2, 3}, 6);
  std::vector<int64_t> iv = {3, 0, 3};
  const std::vector<double> xv = x.to_vector<double>(), sv = source.to_vector<double>();
  std::vector<double> want = xv;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t j = 0; j < 3; ++j) want[a * 4 + iv[j]] += sv[a * 3 + j];
  std::vector<double> yv = index_add(x, -1, ints(iv), source).to_vector<double>();
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_DOUBLE_EQ(yv[k], want[k]);
  expect_error(
      [&] {
        index_add(x, 1, ints(iv), randn64({2, 2}, 7));
      },
      ErrorKind::Shape, {"index_add", "[2, 3]"});
}

TEST(IndexAdd, Gradients) {
  Tensor x = zeros({3, 2}, DType::Float64).requires_grad_(true);
  Tensor source = zeros({2, 2}, DType::Float64).requires_grad_(true);
  Tensor w = iota({3, 2}) + 1;  // [[1,2],[3,4],[5,6]]
  (index_add(x, 0, ints({2, 0}), source) * w).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(source.grad().to_vector<double>(), (std::vector<double>{5, 6, 1, 2}));
}

TEST(Embedding, ValuesAndShape) {
  Tensor w = randn64({5, 3}, 8);
  std::vector<double> wv = w.to_vector<double>();
  std::vector<int64_t> iv = {4, 0, 4, 2};
  Tensor y = embedding(w, ints(iv, Shape{2, 2}));
  ASSERT_EQ(y.shape(), Shape({2, 2, 3}));
  std::vector<double> yv = y.to_vector<double>();
  for (std::size_t p = 0; p < iv.size(); ++p)
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(yv[p * 3 + d], wv[iv[p] * 3 + d]);
  EXPECT_EQ(embedding(w, ints({1}, Shape{})).shape(), Shape({3}));
}

TEST(Embedding, GradientSumsRepeatedIndices) {
  Tensor w = randn64({5, 2}, 9).requires_grad_(true);
  embedding(w, ints({1, 1, 3})).sum().backward();
  std::vector<double> g = w.grad().to_vector<double>();
  // Row 1 was picked twice, row 3 once, the rest never.
  EXPECT_EQ(g, (std::vector<double>{0, 0, 2, 2, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(g[2], 2 * g[6]);

  // With an arbitrary upstream gradient: row r gets the sum of gy over positions holding r.
  Tensor w2 = randn64({4, 3}, 10).requires_grad_(true);
  std::vector<int64_t> iv = {2, 0, 2, 2, 3, 0};
  Tensor gy = randn64({2, 3, 3}, 11);
  embedding(w2, ints(iv, Shape{2, 3})).backward(gy);
  std::vector<double> want(12, 0.0), gyv = gy.to_vector<double>();
  for (std::size_t p = 0; p < iv.size(); ++p)
    for (int64_t d = 0; d < 3; ++d) want[iv[p] * 3 + d] += gyv[p * 3 + d];
  std::vector<double> got = w2.grad().to_vector<double>();
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_DOUBLE_EQ(got[k], want[k]);
}

TEST(Indexing, OutOfRangeErrorsNameOpIndexAndSize) {
  Tensor w = iota({5, 3});
  expect_error(
      [&] {
        embedding(w, ints({1, 7}));
      },
      ErrorKind::Index, {"[embedding]", "7", "size 5"});
  expect_error([&] { embedding(w, ints({-1})); }, ErrorKind::Index, {"[embedding]", "-1"});
  expect_error([&] { index_select(w, 1, ints({3})); }, ErrorKind::Index,
               {"[index_select]", "3", "size 3"});
  expect_error(
      [&] {
        gather(w, 0, ints({0, 5}, Shape{1, 2}));
      },
      ErrorKind::Index, {"[gather]", "5", "size 5"});
  expect_error(
      [&] {
        scatter_add(w, 1, ints({4}, Shape{1, 1}), iota({1, 1}));
      },
      ErrorKind::Index, {"[scatter_add]", "4", "size 3"});
  expect_error(
      [&] {
        index_add(w, 0, ints({9}), iota({1, 3}));
      },
      ErrorKind::Index, {"[index_add]", "9", "size 5"});
  expect_error([&] { one_hot(ints({0, 3}), 3); }, ErrorKind::Index, {"[one_hot]", "3"});
}

TEST(Indexing, FloatIndicesAreDTypeErrors) {
  Tensor w = iota({5, 3});
  Tensor f = tensor({1.0, 2.0}, DType::Float64);
  expect_error([&] { embedding(w, f); }, ErrorKind::DType, {"[embedding]", "int64"});
  expect_error([&] { index_select(w, 0, f); }, ErrorKind::DType, {"[index_select]"});
  expect_error([&] { gather(w, 0, f.reshape({1, 2})); }, ErrorKind::DType, {"[gather]"});
  expect_error(
      [&] {
        scatter_add(w, 0, f.reshape({1, 2}), iota({1, 2}));
      },
      ErrorKind::DType, {"[scatter_add]"});
  expect_error([&] { index_add(w, 0, f, iota({2, 3})); }, ErrorKind::DType, {"[index_add]"});
  expect_error([&] { one_hot(f); }, ErrorKind::DType, {"[one_hot]"});
}

TEST(Indexing, ShapeErrors) {
  Tensor x = iota({3, 4});
  expect_error([&] { gather(x, 0, ints({0, 1})); }, ErrorKind::Shape, {"[gather]"});
  expect_error(
      [&] {
        gather(x, 0, ints({0, 0, 0, 0, 0}, Shape{1, 5}));
      },
      ErrorKind::Shape, {"[gather]", "dim 1"});
  expect_error(
      [&] {
        index_select(x, 0, ints({0, 1}, Shape{1, 2}));
      },
      ErrorKind::Shape, {"[index_select]"});
  expect_error([&] { embedding(iota({5}), ints({0})); }, ErrorKind::Shape, {"[embedding]"});
}

TEST(MaskedFill, ValuesAndGradient) {
  Tensor x = iota({2, 3}).requires_grad_(true);
  Tensor mask = tensor(std::vector<bool>{true, false, true}, Shape{3});
  Tensor y = masked_fill(x, mask, -5.0);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{-5, 1, -5, -5, 4, -5}));
  (y * (iota({2, 3}) + 1)).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 0, 0, 5, 0}));
  // Integer tensors keep their dtype.
  Tensor i = ints({1, 2, 3}).masked_fill(mask, 9);
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{9, 2, 9}));
  expect_error([&] { masked_fill(x, ints({1, 0, 1}), 0); }, ErrorKind::DType, {"masked_fill"});
  expect_error(
      [&] {
        masked_fill(iota({3}), tensor(std::vector<bool>(6, true), Shape{2, 3}), 0);
      },
      ErrorKind::Shape, {"masked_fill"});
}

TEST(OneHot, ValuesAgainstLoop) {
  std::vector<int64_t> iv = {2, 0, 1, 2, 4, 0};
  Tensor y = one_hot(ints(iv, Shape{2, 3}), 6);
  EXPECT_EQ(y.dtype(), DType::Int64);
  ASSERT_EQ(y.shape(), Shape({2, 3, 6}));
  std::vector<int64_t> yv = y.to_vector<int64_t>();
  for (std::size_t p = 0; p < iv.size(); ++p)
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(yv[p * 6 + c], c == iv[p] ? 1 : 0);
  EXPECT_EQ(one_hot(ints(iv)).shape(), Shape({6, 5}));  // max + 1 classes
  EXPECT_EQ(one_hot(ints({}), 3).shape(), Shape({0, 3}));
  expect_error([] { one_hot(ints({})); }, ErrorKind::Value, {"one_hot"});
}

TEST(IndexAdd, NothingToAddReturnsAtOnceWhateverTheOuterCount) {
  // Found by fuzz_ops: a [2^40, 0] input along dim 1 looped over 2^40 empty rows (a hang).
  const Shape s{1LL << 40, 0};
  Tensor r = index_add(zeros(s, DType::Int64), 1, ints({}), zeros(s, DType::Int64));
  EXPECT_EQ(r.shape(), s);
  Tensor x = iota({2, 3});
  Tensor r2 = index_add(x, 1, ints({}), zeros({2, 0}, DType::Float64));  // no index: a copy
  EXPECT_EQ(r2.to_vector<double>(), x.to_vector<double>());
}

TEST(IndexSelect, EmptyResultReturnsAtOnceWhateverTheRowCount) {
  // Found by fuzz_ops: a [2^40, 4, 0] input along dim 1 looped over 2^40 * k empty rows.
  const Shape s{1LL << 40, 4, 0};
  Tensor r = index_select(zeros(s), 1, ints({3, 0, 1}));
  EXPECT_EQ(r.shape(), Shape({1LL << 40, 3, 0}));
  // The same along dim 0 of a non-empty tensor: picked rows, compared with a loop.
  Tensor x = iota({3, 2});
  std::vector<double> xv = x.to_vector<double>(),
                      rv = index_select(x, 0, ints({2, 0})).to_vector<double>();
  for (int64_t j = 0; j < 2; ++j) {
    EXPECT_EQ(rv[j], xv[4 + j]);
    EXPECT_EQ(rv[2 + j], xv[j]);
  }
}

TEST(OneHot, LargestIndexHasNoSuccessorClass) {
  // Found by fuzz_ops: the class count max + 1 overflowed (UB) for an index of INT64_MAX.
  expect_error([] { one_hot(ints({INT64_MAX})); }, ErrorKind::Value, {"one_hot", "2^63"});
  EXPECT_EQ(one_hot(ints({2, 0})).shape(), Shape({2, 3}));  // inferred classes: max + 1
}

TEST(Triangle, ValuesAgainstLoops) {
  Tensor x = randn64({2, 3, 4}, 12);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t diag : {-2, -1, 0, 1, 3}) {
    std::vector<double> lo = tril(x, diag).to_vector<double>();
    std::vector<double> up = x.triu(diag).to_vector<double>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          const int64_t k = (b * 3 + i) * 4 + j;
          EXPECT_EQ(lo[k], j <= i + diag ? xv[k] : 0.0) << "tril diag " << diag;
          EXPECT_EQ(up[k], j >= i + diag ? xv[k] : 0.0) << "triu diag " << diag;
        }
  }
  // Non-contiguous input and integer dtype.
  EXPECT_EQ(iota({2, 2}).t().tril().to_vector<double>(), (std::vector<double>{0, 0, 1, 3}));
  Tensor ti = triu(ints({1, 2, 3, 4}, Shape{2, 2}));
  EXPECT_EQ(ti.dtype(), DType::Int64);
  EXPECT_EQ(ti.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 0, 4}));
  expect_error([] { tril(iota({3})); }, ErrorKind::Shape, {"tril"});
}

TEST(Triangle, EmptyMatrixWithHugeRowCountReturnsAtOnce) {
  // Found by fuzz_ops: tril of a [2^40, 0] tensor looped over 2^40 empty rows (a hang).
  for (const Shape& s : {Shape{1LL << 40, 0}, Shape{3, 1LL << 40, 0}}) {
    Tensor lo = tril(zeros(s, DType::Int64));
    EXPECT_EQ(lo.shape(), s);
    EXPECT_EQ(lo.numel(), 0);
    EXPECT_EQ(triu(zeros(s), 1).shape(), s);
  }
}

TEST(Triangle, GradientIsTheMask) {
  Tensor x = iota({3, 3}).requires_grad_(true);
  tril(x, -1).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 1, 0, 0, 1, 1, 0}));
}

}  // namespace

TEST(IndexAdd, ZeroDimInputTakesOneSourceValuePerIndex) {
  // Found by fuzz_ops: 64 indices and a 0-d source read 63 values past the source.
  expect_error(
      [] { index_add(scalar_tensor(1.0), 0, zeros({64}, DType::Int64), scalar_tensor(2.0)); },
      ErrorKind::Shape, {"[index_add]", "source"});
  Tensor r = index_add(scalar_tensor(1.0), 0, zeros({3}, DType::Int64), tensor({2., 3, 4}));
  EXPECT_EQ(r.dim(), 0);
  EXPECT_FLOAT_EQ(r.item<float>(), 10.0f);
  Tensor one = index_add(scalar_tensor(1.0), 0, zeros({1}, DType::Int64), scalar_tensor(2.0));
  EXPECT_FLOAT_EQ(one.item<float>(), 3.0f);
}
