// Unit tests for slicing and joining (src/ops/shape.cpp): values of slice, select, narrow,
// flatten, cat, stack, split and chunk against naive loops and hand-computed results, views
// sharing storage with their base, gradients (including double backward through a slice),
// and the errors for bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

// A float64 tensor holding 0, 1, 2, ... in the given shape.
Tensor iota(const Shape& shape) {
  std::vector<double> v(shape.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return tensor(v, shape);
}

// Indices Python's range(n)[start:end:step] picks (step > 0), computed by membership.
std::vector<int64_t> py_slice(int64_t n, std::optional<int64_t> start, std::optional<int64_t> end,
                              int64_t step) {
  int64_t b = start.value_or(0), e = end.value_or(n);
  if (b < 0) b = std::max<int64_t>(b + n, 0);
  if (e < 0) e = std::max<int64_t>(e + n, 0);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (i >= b && i < e && (i - b) % step == 0) out.push_back(i);
  return out;
}

TEST(Slice, MatchesPythonSemantics) {
  const int64_t n = 10;
  Tensor x = iota({n});
  struct Case {
    std::optional<int64_t> start, end;
    int64_t step;
  };
  const std::vector<Case> cases = {{1, 4, 1},
                                   {-8, -1, 3},
                                   {std::nullopt, 100, 2},
                                   {-100, 3, 1},
                                   {5, 2, 1},
                                   {3, std::nullopt, 4},
                                   {0, 0, 1},
                                   {std::nullopt, -1, 1},
                                   {9, 10, 5}};
  for (const Case& c : cases) {
    std::vector<int64_t> want = py_slice(n, c.start, c.end, c.step);
    Tensor s = slice(x, 0, c.start, c.end, c.step);
    ASSERT_EQ(s.shape(), Shape({static_cast<int64_t>(want.size())}));
    std::vector<double> got = s.to_vector<double>();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], static_cast<double>(want[i]));
  }
  // Hand-computed: x[-8:-1:3] = [2, 5, 8].
  EXPECT_EQ(slice(x, 0, -8, -1, 3).to_vector<double>(), (std::vector<double>{2, 5, 8}));
}

TEST(Slice, NonContiguousInputWithStep) {
  Tensor base = iota({4, 6});
  Tensor x = base.t();  // [6, 4], x[i][j] = base[j][i] = 6 j + i
  Tensor s = x.slice(0, 1, std::nullopt, 2).slice(1, -3, std::nullopt);  // rows 1,3,5; cols 1..3
  ASSERT_EQ(s.shape(), Shape({3, 3}));
  std::vector<double> got = s.to_vector<double>();
  int k = 0;
  for (int64_t i : {1, 3, 5})
    for (int64_t j : {1, 2, 3}) EXPECT_EQ(got[k++], static_cast<double>(6 * j + i));
}

TEST(Slice, SharesStorageAndBumpsTheBaseVersion) {
  Tensor x = iota({3, 4});
  Tensor s = x.slice(1, 1, 3);
  EXPECT_TRUE(s.shares_storage(x));
  const uint64_t before = x.version();
  {
    NoGradGuard guard;
    s.fill_(-1);
  }
  EXPECT_GT(x.version(), before);
  std::vector<double> got = x.to_vector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(got[i * 4 + j], (j == 1 || j == 2) ? -1.0 : static_cast<double>(i * 4 + j));
  // Writing through a select and a split piece reaches the base too.
  {
    NoGradGuard guard;
    x.select(0, -1).fill_(9);
    split(x, 2, 1)[0].zero_();
  }
  got = x.to_vector<double>();
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(got[8 + j], j < 2 ? 0.0 : 9.0);
  EXPECT_EQ(got[0], 0.0);
  EXPECT_EQ(got[1], 0.0);
}

TEST(Slice, Errors) {
  Tensor x = iota({3, 4});
  expect_error([&] { slice(x, 0, 0, 2, 0); }, ErrorKind::Value, {"slice", "step"});
  expect_error([&] { slice(x, 0, 0, 2, -1); }, ErrorKind::Value, {"slice", "step"});
  expect_error([&] { slice(x, 2, 0, 1); }, ErrorKind::Index, {"slice"});
  expect_error([&] { slice(iota({}), 0, 0, 1); }, ErrorKind::Index, {"slice", "0-d"});
}

TEST(Slice, GradientIsZeroOutsideTheSlice) {
  Tensor x = iota({5, 2}).requires_grad_(true);
  Tensor w = iota({2, 2}) + 1;  // weights 1..4 on the picked rows 1 and 3
  (slice(x, 0, 1, std::nullopt, 2) * w).sum().backward();
  std::vector<double> g = x.grad().to_vector<double>();
  const std::vector<double> want = {0, 0, 1, 2, 0, 0, 3, 4, 0, 0};
  EXPECT_EQ(g, want);
}

TEST(Slice, DoubleBackward) {
  // f(x) = sum(slice(x)^3): df/dx = 3 x^2 on the slice; d/dx <df/dx, v> = 6 x v on the slice.
  Tensor x = iota({6}).requires_grad_(true);
  Tensor y = slice(x, 0, 1, 5, 2).pow(3).sum();
  Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  std::vector<double> gv = g.to_vector<double>();
  for (int64_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(gv[i], (i == 1 || i == 3) ? 3.0 * i * i : 0.0);
  Tensor v = iota({6}) + 1;
  Tensor gg = autograd::grad({(g * v).sum()}, {x})[0];
  std::vector<double> ggv = gg.to_vector<double>();
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_DOUBLE_EQ(ggv[i], (i == 1 || i == 3) ? 6.0 * i * (i + 1) : 0.0);
}

TEST(Select, ValuesAndNegativeIndex) {
  Tensor x = iota({3, 4});
  EXPECT_EQ(select(x, 0, 1).to_vector<double>(), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(x.select(1, -1).to_vector<double>(), (std::vector<double>{3, 7, 11}));
  Tensor s = select(iota({3}), 0, 2);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 2.0);
}

TEST(Select, OutOfRangeNamesOpIndexAndSize) {
  Tensor x = iota({3, 4});
  expect_error([&] { select(x, 1, 4); }, ErrorKind::Index, {"select", "4", "size 4"});
  expect_error([&] { select(x, 0, -4); }, ErrorKind::Index, {"select", "-4", "size 3"});
}

TEST(Select, Gradient) {
  Tensor x = iota({2, 3}).requires_grad_(true);
  (select(x, 1, -2) * tensor({5.0, 7.0}, DType::Float64)).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 5, 0, 0, 7, 0}));
}

TEST(Narrow, ValuesAndErrors) {
  Tensor x = iota({2, 5});
  EXPECT_EQ(narrow(x, 1, 1, 3).to_vector<double>(), (std::vector<double>{1, 2, 3, 6, 7, 8}));
  EXPECT_EQ(x.narrow(-1, -2, 2).to_vector<double>(), (std::vector<double>{3, 4, 8, 9}));
  EXPECT_TRUE(narrow(x, 0, 1, 1).shares_storage(x));
  expect_error([&] { narrow(x, 1, 3, 3); }, ErrorKind::Index, {"narrow", "size 5"});
  expect_error([&] { narrow(x, 1, 6, 0); }, ErrorKind::Index, {"narrow", "6"});
}

TEST(Flatten, Shapes) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(flatten(x).shape(), Shape({24}));
  EXPECT_EQ(x.flatten(1).shape(), Shape({2, 12}));
  EXPECT_EQ(flatten(x, 0, -2).shape(), Shape({6, 4}));
  EXPECT_EQ(flatten(x, 1, 1).shape(), Shape({2, 3, 4}));
  EXPECT_EQ(flatten(iota({})).shape(), Shape({1}));
  // A transpose is copied in row-major order of the transposed view.
  EXPECT_EQ(flatten(iota({2, 2}).t()).to_vector<double>(), (std::vector<double>{0, 2, 1, 3}));
  expect_error([&] { flatten(x, 2, 1); }, ErrorKind::Value, {"flatten"});
}

TEST(Cat, ValuesAgainstLoops) {
  Tensor a = iota({2, 3}), b = iota({2, 2}) + 100, c = iota({4, 3}).t().slice(1, 0, 1);  // [3,1]
  ASSERT_EQ(c.shape(), Shape({3, 1}));
  Tensor y = cat({a, b}, -1);
  ASSERT_EQ(y.shape(), Shape({2, 5}));
  std::vector<double> got = y.to_vector<double>();
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_EQ(got[i * 5 + j], j < 3 ? av[i * 3 + j] : bv[i * 2 + (j - 3)]);
  Tensor z = cat({a.t(), c}, 1);  // [3, 3]: columns of a.t() then c
  std::vector<double> zv = z.to_vector<double>(), cv = c.to_vector<double>();
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(zv[i * 3 + 0], av[0 * 3 + i]);
    EXPECT_EQ(zv[i * 3 + 1], av[1 * 3 + i]);
    EXPECT_EQ(zv[i * 3 + 2], cv[i]);
  }
}

TEST(Cat, PromotesTypes) {
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  Tensor f = tensor({0.5f}, DType::Float32);
  Tensor y = cat({i, f});
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 2, 0.5}));
  EXPECT_EQ(cat({i, i}).dtype(), DType::Int64);
}

TEST(Cat, Errors) {
  expect_error([] { cat({}); }, ErrorKind::Value, {"cat"});
  expect_error(
      [] {
        cat({iota({2, 3}), iota({2, 4})}, 0);
      },
      ErrorKind::Shape, {"cat", "[2, 3]", "[2, 4]"});
  expect_error([] { cat({iota({2, 3}), iota({3})}); }, ErrorKind::Shape, {"cat"});
  expect_error([] { cat({iota({})}); }, ErrorKind::Shape, {"cat", "zero-dimensional"});
}

TEST(Cat, GradientSlicesTheCotangent) {
  Tensor a = iota({2, 1}).requires_grad_(true), b = iota({2, 2}).requires_grad_(true);
  Tensor w = iota({2, 3}) + 1;  // [[1,2,3],[4,5,6]]
  (cat({a, b}, 1) * w).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 3, 5, 6}));
}

TEST(Stack, ValuesAndErrors) {
  Tensor a = iota({2}), b = iota({2}) + 10;
  Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), Shape({2, 2}));
  EXPECT_EQ(s0.to_vector<double>(), (std::vector<double>{0, 1, 10, 11}));
  Tensor s1 = stack({a, b}, -1);
  EXPECT_EQ(s1.shape(), Shape({2, 2}));
  EXPECT_EQ(s1.to_vector<double>(), (std::vector<double>{0, 10, 1, 11}));
  Tensor sc = stack({scalar_tensor(1.5), scalar_tensor(2.5)});
  EXPECT_EQ(sc.shape(), Shape({2}));
  expect_error([] { stack({iota({2}), iota({3})}); }, ErrorKind::Shape, {"stack", "[3]"});
}

TEST(Split, RoundTripsAndPieceSizes) {
  Tensor x = iota({7, 2});
  std::vector<Tensor> p = split(x, 3);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].shape(), Shape({3, 2}));
  EXPECT_EQ(p[2].shape(), Shape({1, 2}));
  for (const Tensor& t : p) EXPECT_TRUE(t.shares_storage(x));
  EXPECT_EQ(cat(p).to_vector<double>(), x.to_vector<double>());

  std::vector<Tensor> q = x.split(1, -1);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[1].to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));

  std::vector<Tensor> r = split(x, std::vector<int64_t>{2, 0, 5});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].shape(), Shape({0, 2}));
  EXPECT_EQ(r[2].to_vector<double>()[0], 4.0);
  EXPECT_EQ(cat(r).to_vector<double>(), x.to_vector<double>());

  expect_error(
      [&] {
        split(x, std::vector<int64_t>{2, 2});
      },
      ErrorKind::Value, {"split", "sum to 4", "size 7"});
  expect_error([&] { split(x, 0); }, ErrorKind::Value, {"split"});
  EXPECT_EQ(split(iota({0, 3}), 2).size(), 1u);
}

TEST(Chunk, TorchSemantics) {
  auto sizes = [](const std::vector<Tensor>& ts) {
    std::vector<int64_t> s;
    for (const Tensor& t : ts) s.push_back(t.shape()[0]);
    return s;
  };
  EXPECT_EQ(sizes(chunk(iota({7}), 3)), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes(chunk(iota({6}), 3)), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sizes(chunk(iota({5}), 4)), (std::vector<int64_t>{2, 2, 1}));  // ceil(5/4) = 2
  EXPECT_EQ(sizes(chunk(iota({2}), 5)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes(chunk(iota({0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  Tensor x = iota({3, 5});
  std::vector<Tensor> c = x.chunk(2, 1);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].to_vector<double>(), (std::vector<double>{3, 4, 8, 9, 13, 14}));
  EXPECT_EQ(cat(c, 1).to_vector<double>(), x.to_vector<double>());
  expect_error([&] { chunk(x, 0); }, ErrorKind::Value, {"chunk"});
}

TEST(Split, GradientsOfPiecesLandInPlace) {
  Tensor x = iota({5}).requires_grad_(true);
  std::vector<Tensor> p = chunk(x, 2);  // sizes 3, 2
  (p[0] * 2).sum().backward();
  (p[1] * 3).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2, 2, 3, 3}));
}

}  // namespace

TEST(Split, MorePiecesThanMemoryCanHoldIsANamedError) {
  // A dim expanded to 2^40 split into ones would build pieces until memory ran out (found by
  // fuzz_ops): the count is refused first, naming the op.
  const Tensor huge = ones({1}).expand({int64_t{1} << 40});
  expect_error([&] { split(huge, 1, 0); }, ErrorKind::OutOfMemory, {"[split]", "pieces"});
  expect_error([&] { chunk(zeros({0}), int64_t{1} << 50, 0); }, ErrorKind::OutOfMemory,
               {"[chunk]", "pieces"});
  // Oracle for the ordinary case: the pieces of a small split are the slices.
  const std::vector<Tensor> parts = split(huge.slice(0, 0, 5), 2, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].numel(), 1);
}
