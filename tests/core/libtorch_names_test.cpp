// What a libtorch user writes (docs/coming-from-libtorch.md): the metadata aliases sizes(),
// ndimension(), scalar_type(), element_size() and options(); the dtype constants kFloat ...
// kInt; the option builders dtype(), device(), requires_grad(); from_blob over caller memory
// with and without a deleter; and tensor(std::vector<int>) giving int32.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

TEST(LibtorchNames, MetadataAliasesMatchTheNativeNames) {
  Tensor t = zeros({2, 3, 4}, DType::Float64);
  EXPECT_EQ(t.sizes(), t.shape());
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.ndimension(), t.dim());
  EXPECT_EQ(t.ndimension(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.scalar_type(), DType::Float64);
  EXPECT_EQ(t.element_size(), 8);
  EXPECT_EQ(zeros({1}, DType::BFloat16).element_size(), 2);
  EXPECT_EQ(zeros({1}, DType::Bool).element_size(), 1);

  Tensor w = ones({3}, dtype(kFloat64).requires_grad(true));
  TensorOptions o = w.options();  // dtype and device, not requires_grad (as libtorch's)
  EXPECT_EQ(o.dtype(), DType::Float64);
  EXPECT_EQ(o.device(), kCPU);
  EXPECT_FALSE(o.requires_grad());
  Tensor like = zeros({5}, w.options());
  EXPECT_EQ(like.dtype(), DType::Float64);
  EXPECT_FALSE(like.requires_grad());
}

TEST(LibtorchNames, DTypeConstants) {
  EXPECT_EQ(kBool, DType::Bool);
  EXPECT_EQ(kUInt8, DType::UInt8);
  EXPECT_EQ(kByte, DType::UInt8);
  EXPECT_EQ(kInt8, DType::Int8);
  EXPECT_EQ(kChar, DType::Int8);
  EXPECT_EQ(kInt16, DType::Int16);
  EXPECT_EQ(kShort, DType::Int16);
  EXPECT_EQ(kInt32, DType::Int32);
  EXPECT_EQ(kInt, DType::Int32);
  EXPECT_EQ(kInt64, DType::Int64);
  EXPECT_EQ(kLong, DType::Int64);
  EXPECT_EQ(kFloat16, DType::Float16);
  EXPECT_EQ(kHalf, DType::Float16);
  EXPECT_EQ(kBFloat16, DType::BFloat16);
  EXPECT_EQ(kFloat32, DType::Float32);
  EXPECT_EQ(kFloat, DType::Float32);
  EXPECT_EQ(kFloat64, DType::Float64);
  EXPECT_EQ(kDouble, DType::Float64);
}

TEST(LibtorchNames, OptionBuilders) {
  Tensor a = zeros({2, 3}, dtype(kFloat64).requires_grad(true));
  EXPECT_EQ(a.dtype(), DType::Float64);
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());

  Tensor b = ones({2}, requires_grad());
  EXPECT_EQ(b.dtype(), kDefaultFloat);
  EXPECT_TRUE(b.requires_grad());

  Tensor c = zeros({2}, device(kMeta).dtype(kHalf));
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.dtype(), DType::Float16);

  Tensor d = arange(4, dtype(kInt32));
  EXPECT_EQ(d.dtype(), DType::Int32);
  EXPECT_EQ(d.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(LibtorchNames, TensorFromVectorOfIntIsInt32) {
  Tensor t = tensor(std::vector<int>{1, 2});
  EXPECT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(t.scalar_type(), kInt);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2}));
  EXPECT_EQ(tensor(std::vector<int64_t>{1, 2}).dtype(), kLong);
  EXPECT_EQ(tensor(std::vector<float>{1, 2}).dtype(), kFloat);
}

TEST(LibtorchNames, FromBlobSharesTheCallersMemory) {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  {
    Tensor t = from_blob(data.data(), {2, 3});  // no deleter: the caller keeps ownership
    EXPECT_EQ(t.dtype(), DType::Float32);
    EXPECT_EQ(t.sizes(), (Shape{2, 3}));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.data_ptr<float>(), data.data());  // no copy
    EXPECT_FLOAT_EQ(t.sum().item<float>(), 21);
    t.mul_(2.0);  // writes go to the caller's memory
    EXPECT_FLOAT_EQ(data[5], 12);
    data[0] = 100;  // and the caller's writes show in the tensor
    EXPECT_FLOAT_EQ(t.select(0, 0).select(0, 0).item<float>(), 100);
  }
  EXPECT_FLOAT_EQ(data[1], 4);  // still the caller's, intact after the tensor died
}

TEST(LibtorchNames, FromBlobCallsTheDeleterOnceWhenTheLastTensorDies) {
  int calls = 0;
  void* released = nullptr;
  auto* data = new double[4]{1, 2, 3, 4};
  {
    Tensor t = from_blob(
        data, {4},
        [&](void* p) {
          ++calls;
          released = p;
          delete[] static_cast<double*>(p);
        },
        dtype(kFloat64));
    EXPECT_EQ(t.dtype(), DType::Float64);
    Tensor view = t.slice(0, 1, 3);  // a view keeps the storage alive
    Tensor copy = t;                 // so does another handle
    t = Tensor();
    EXPECT_EQ(calls, 0);
    copy = Tensor();
    EXPECT_EQ(calls, 0);
    EXPECT_DOUBLE_EQ(view.sum().item<double>(), 5);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(released, data);
}

TEST(LibtorchNames, FromBlobWithStridesAndGradients) {
  // A column-major 2x3 matrix: element (i, j) at i + 2 j.
  std::vector<float> colmajor{1, 4, 2, 5, 3, 6};
  Tensor t = from_blob(colmajor.data(), {2, 3}, {1, 2}, requires_grad());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.contiguous().to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(t.requires_grad());
  (t * t).sum().backward();
  EXPECT_EQ(t.grad().to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));

  int calls = 0;
  std::vector<int32_t> ints{7, 8, 9};
  {
    Tensor i = from_blob(
        ints.data(), {3}, {1}, [&](void*) { ++calls; }, kInt32);
  }
  EXPECT_EQ(calls, 1);
}

TEST(LibtorchNames, FromBlobRefusesWhatItCannotWrap) {
  std::vector<float> data(4);
  EXPECT_THROW(from_blob(data.data(), {2, 2}, {2}), Error);  // strides of the wrong rank
  EXPECT_THROW(from_blob(data.data(), {2, 2}, {-1, 1}), Error);
  EXPECT_THROW(from_blob(nullptr, {2}), Error);
  EXPECT_THROW(from_blob(reinterpret_cast<char*>(data.data()) + 1, {2}), Error);  // misaligned
  EXPECT_THROW(from_blob(data.data(), {2}, kMeta), Error);
  EXPECT_EQ(from_blob(nullptr, {0, 3}).numel(), 0);
}

}  // namespace
