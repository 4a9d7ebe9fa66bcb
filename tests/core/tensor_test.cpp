// Tensors as data: factories, type promotion, conversion, element access and printing.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "adjoint/adjoint.h"

using namespace adjoint;

TEST(Factories, ValuesAndShapes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (double v : full({4}, 2.5, DType::Float64).to_vector<double>()) EXPECT_EQ(v, 2.5);
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25, DType::Float64).to_vector<double>(),
            (std::vector<double>{1, 1.25, 1.5, 1.75}));
  std::vector<double> lin = linspace(-1, 1, 5, DType::Float64).to_vector<double>();
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(lin[i], -1 + 0.5 * i);
  std::vector<float> id = eye(3).to_vector<float>();
  for (int i = 0; i < 9; ++i) EXPECT_EQ(id[i], i % 4 == 0 ? 1.0f : 0.0f);
  Tensor s = scalar_tensor(3);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 3.0f);
  Tensor t = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.size(-1), 3);
}

TEST(Factories, RandomTensorsFollowTheirDistributions) {
  Generator gen(7);
  std::vector<double> u = rand({20000}, DType::Float64, &gen).to_vector<double>();
  double mean = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    mean += v / u.size();
  }
  EXPECT_NEAR(mean, 0.5, 0.01);
  std::vector<double> n = randn({20000}, DType::Float64, &gen).to_vector<double>();
  double m = 0, sq = 0;
  for (double v : n) m += v / n.size();
  for (double v : n) sq += (v - m) * (v - m) / n.size();
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(sq), 1.0, 0.03);
  for (int64_t v : randint(-3, 4, {1000}, &gen).to_vector<int64_t>()) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
  }
}

TEST(Factories, SameSeedSameNumbers) {
  Generator a(123), b(123), c(124);
  EXPECT_EQ(randn({64}, {}, &a).to_vector<float>(), randn({64}, {}, &b).to_vector<float>());
  EXPECT_NE(randn({64}, {}, &a).to_vector<float>(), randn({64}, {}, &c).to_vector<float>());
}

TEST(Promotion, FollowsPyTorch) {
  Tensor i = arange(3);                            // int64 [3]
  Tensor f = ones({3});                            // float32 [3]
  Tensor d = ones({3}, DType::Float64);            // float64 [3]
  Tensor b = gt(f, 0.5);                           // bool [3]
  Tensor d0 = scalar_tensor(2.0, DType::Float64);  // float64, 0-d
  EXPECT_EQ((i + f).dtype(), DType::Float32);
  EXPECT_EQ((f + d).dtype(), DType::Float64);
  EXPECT_EQ((i + b).dtype(), DType::Int64);
  EXPECT_EQ((i * 2).dtype(), DType::Int64);      // an integer number keeps int64
  EXPECT_EQ((i * 2.5).dtype(), DType::Float32);  // a float number gives the default float
  EXPECT_EQ((f * d0).dtype(), DType::Float32);   // a dimensioned tensor wins over a 0-d one...
  EXPECT_EQ((i * d0).dtype(), DType::Float64);   // ...unless the 0-d one is of a higher category
  EXPECT_EQ((i / i).dtype(), DType::Float32);    // true division
  EXPECT_EQ(exp(i).dtype(), DType::Float32);
  EXPECT_EQ(sum(b).dtype(), DType::Int64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
}

TEST(Conversion, ToAndItem) {
  Tensor x = tensor({1.7, -2.2, 3.0});
  EXPECT_EQ(x.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(x.to(DType::Bool).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_FLOAT_EQ(x.to(DType::Float64).sum().item<float>(), 2.5f);
  // Reading through strides: the transpose's elements come out in its own row-major order.
  Tensor m = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(m.t().to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_FALSE(m.t().is_contiguous());
  EXPECT_TRUE(m.t().contiguous().is_contiguous());
}

TEST(Tensor, EmptyTensorsAreContiguousWhateverTheirStrides) {
  // As PyTorch: no element is laid out, so every view of an empty tensor is contiguous, and a
  // factory's empty tensor and a view rebuilt with its strides agree (found by fuzz_ops).
  Tensor e = zeros({2, 3, 0});
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_TRUE(e.permute({2, 0, 1}).is_contiguous());
  EXPECT_TRUE(e.transpose(0, 1).is_contiguous());
  EXPECT_TRUE(e.detach().is_contiguous());
  const Tensor p = e.permute({2, 0, 1});
  EXPECT_EQ(p.contiguous().impl(), p.impl());  // no copy
  // a non-empty transpose is still not
  EXPECT_FALSE(zeros({2, 3}).t().is_contiguous());
}

TEST(Printing, ShowsValuesShapeDtypeAndGradFn) {
  Tensor x = tensor({1.5, -2.0}).requires_grad_(true);
  std::ostringstream os;
  os << x;
  EXPECT_NE(os.str().find("1.5"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("shape=[2]"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("float32"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("requires_grad=true"), std::string::npos) << os.str();
  std::ostringstream os2;
  os2 << x * 2;
  EXPECT_NE(os2.str().find("grad_fn=MulBackward"), std::string::npos) << os2.str();
  std::ostringstream big;
  big << arange(5000);  // summarised, like PyTorch
  EXPECT_NE(big.str().find("..."), std::string::npos);
  EXPECT_LT(big.str().size(), 200u);
}

TEST(Tensor, PrintsAnEmptyTensorWithoutWalkingItsRows) {
  // Found by fuzz_ops: [2^40, 1, 0] printed row by row until memory ran out.
  std::ostringstream os;
  os << zeros({int64_t{1} << 40, 1, 0});
  EXPECT_EQ(os.str(), "tensor([], shape=[1099511627776, 1, 0], dtype=float32)");
}
