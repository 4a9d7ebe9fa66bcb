// Shapes too large to describe and memory the allocator cannot give. Element and byte counts
// are checked once, where a tensor is made (Note [Tensor size limits] in
// src/core/tensor_impl.cpp), whatever made the shape: a factory, expand, view, a broadcast or
// cat. The errors name the op, the shape and the dtype; an allocation failure is an
// OutOfMemory error with the bytes asked for, not std::bad_alloc. The oracle is arithmetic on
// the sizes (2^40 * 2^40 = 2^80 > 2^63 - 1).
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>

#include "adjoint/adjoint.h"
#include "core/op_scope.h"
#include "core/tensor_factory.h"
#include "support/expect.h"

// The allocation test asks for 2^60 bytes. AddressSanitizer aborts on a request above its
// limit unless told to return null as the system allocator does; this test binary tells it so.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {
constexpr int64_t k40 = int64_t{1} << 40;
}  // namespace

TEST(TensorSize, ExpandBeyondInt64ElementsIsANamedErrorNotAZeroSum) {
  // Was: a view with numel 0 (2^80 wrapped), whose sum() returned 0.
  expect_error(
      [] {
        ones({1, 1}).expand({k40, k40}).sum();
      },
      ErrorKind::Value, {"[expand]", "[1099511627776, 1099511627776]", "float32", "too large"});
  // a large but countable view is fine: 2^40 elements of stride 0
  EXPECT_EQ(ones({1}).expand({k40}).numel(), k40);
  // its byte size must fit too (nbytes() is numel * itemsize): 2^62 float32 do not
  expect_error([] { ones({1}).expand({int64_t{1} << 62}); }, ErrorKind::Value,
               {"[expand]", "bytes"});
}

TEST(TensorSize, FactoriesRefuseShapesWhoseElementsOrBytesOverflow) {
  // Was: zeros({2^40, 2^40}) succeeded with 0 bytes and crashed on access.
  expect_error(
      [] {
        zeros({k40, k40});
      },
      ErrorKind::Value,
      {"[zeros]", "[1099511627776, 1099511627776]", "float32", "2^63 - 1 elements"});
  // Was: (2^62 - 1) * 4 wrapped to a small negative count and crashed.
  expect_error(
      [] {
        zeros({(int64_t{1} << 62) - 1, 4});
      },
      ErrorKind::Value, {"[zeros]", "float32", "too large"});
  // 2^62 elements fit int64 but 2^64 bytes do not
  expect_error([] { zeros({int64_t{1} << 62}, DType::Float32); }, ErrorKind::Value,
               {"[zeros]", "[4611686018427387904]", "float32", "bytes"});
  expect_error([] { empty({k40, k40}, DType::Float64); }, ErrorKind::Value, {"[empty]", "float64"});
  expect_error([] { full({k40, k40}, 1.0); }, ErrorKind::Value, {"[full]"});
  expect_error([] { ones({k40, k40}, DType::Int64); }, ErrorKind::Value, {"[ones]", "int64"});
  expect_error([] { rand({k40, k40}); }, ErrorKind::Value, {"[rand]"});
  expect_error([] { randn({k40, k40}); }, ErrorKind::Value, {"[randn]"});
  expect_error([] { randint(0, 5, {k40, k40}); }, ErrorKind::Value, {"[randint]"});
  expect_error([] { eye(k40 * 8, k40 * 8); }, ErrorKind::Value, {"[eye]"});
  expect_error([] { zeros({2, -1}); }, ErrorKind::Value, {"[zeros]", "negative dimension -1"});
  // an empty tensor whose strides would overflow: sizes [0, 2^40, 2^40]
  expect_error([] { zeros({0, k40, k40}); }, ErrorKind::Value, {"[zeros]", "strides"});
  EXPECT_EQ(zeros({0, k40}).numel(), 0);
}

TEST(TensorSize, BroadcastOfTwoExpandedTensorsBeyondInt64IsNamedByTheOp) {
  Tensor a = ones({1}).expand({k40, 1});
  Tensor b = ones({1}).expand({1, k40});
  expect_error([&] { (void)(a + b); }, ErrorKind::Value,
               {"[add]", "[1099511627776, 1]", "[1, 1099511627776]", "too large"});
  expect_error([&] { maximum(a, b); }, ErrorKind::Value, {"[maximum]", "too large"});
}

TEST(TensorSize, ViewToAShapeTooLargeToDescribeIsRefused) {
  // An empty tensor viewed as [0, 2^40, 2^40]: no elements, but contiguous strides of 2^80.
  // (Viewing it as [2^32, 2^32], whose product wraps to 0, is refused by Shape::numel, but
  // view's infer_shape multiplies the sizes itself first, a signed overflow that UBSan stops
  // on: that case waits for src/ops/view.cpp to check its product.)
  Tensor e = zeros({0});
  expect_error(
      [&] {
        e.view({0, k40, k40});
      },
      ErrorKind::Value, {"[0, 1099511627776, 1099511627776]", "strides"});
  expect_error([&] { e.reshape({0, k40, k40}); }, ErrorKind::Value, {"strides"});
  EXPECT_EQ(e.view({0, k40}).numel(), 0);
}

TEST(TensorSize, ShapeNumelRefusesToWrap) {
  // [2^32, 2^32] has 2^64 elements, 0 modulo 2^64: numel() used to say 0.
  const int64_t k32 = int64_t{1} << 32;
  expect_error(
      [&] {
        (void)Shape({k32, k32}).numel();
      },
      ErrorKind::Value, {"[4294967296, 4294967296]", "too large"});
  EXPECT_EQ(Shape({k32, k32, 0}).numel(), 0);
  EXPECT_EQ(Shape({k40, 1024}).numel(), k40 * 1024);
}

TEST(TensorSize, CatWhoseSizesSumBeyondInt64IsRefused) {
  // bool, so that 2^62 elements are also 2^62 bytes: a view that exists
  Tensor big = ones({1}, DType::Bool).expand({int64_t{1} << 62});
  expect_error([&] { cat({big, big}, 0); }, ErrorKind::Value, {"[cat]", "2^63 - 1"});
}

TEST(TensorSize, AllocationFailureNamesTheOpShapeDtypeAndBytes) {
  // 2^58 float32 elements: a valid shape (2^60 bytes) that no machine can allocate.
  const MemoryStats before = memory_stats();
  expect_error(
      [] { zeros({int64_t{1} << 58}); }, ErrorKind::OutOfMemory,
      {"[zeros]", "1152921504606846976 bytes", "1 EiB", "[288230376151711744]", "float32"});
  expect_error(
      [] {
        full({int64_t{1} << 29, int64_t{1} << 29}, 2.0, DType::Float64);
      },
      ErrorKind::OutOfMemory,
      {"[full]", "2305843009213693952 bytes", "[536870912, 536870912]", "float64"});
  // the failed requests are not counted as held
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);
}

TEST(TensorSize, ErrorsBelowAnOpNameTheInnermostOpScope) {
  // The name comes from the thread's current op (Note [Current op]); scopes nest.
  const Shape huge{k40, k40};
  expect_error([&] { make_empty(huge, DType::Float32); }, ErrorKind::Value, {"[empty]"});
  {
    detail::OpScope outer("outer_op");
    expect_error([&] { make_empty(huge, DType::Float32); }, ErrorKind::Value, {"[outer_op]"});
    {
      detail::OpScope inner("inner_op");
      expect_error([&] { make_empty(huge, DType::Float32); }, ErrorKind::Value, {"[inner_op]"});
      expect_error([] { make_empty({int64_t{1} << 58}, DType::Float32); }, ErrorKind::OutOfMemory,
                   {"[inner_op]"});
    }
    expect_error([&] { make_empty(huge, DType::Float32); }, ErrorKind::Value, {"[outer_op]"});
  }
  EXPECT_EQ(detail::current_op("none"), std::string("none"));
}

TEST(TensorSize, PrintingAHugeExpandedTensorReadsOnlyWhatItShows) {
  // Found by fuzz_ops: printing copied all 2^40 elements of a [1, 2^40] expand into a vector
  // first (8 TiB: std::bad_alloc, no adjoint::Error). It now reads the elements it prints.
  Tensor big = full({}, 2.5).expand({1, 1LL << 40});
  std::ostringstream os;
  os << big;
  EXPECT_EQ(os.str(),
            "tensor([[2.5, 2.5, 2.5, ..., 2.5, 2.5, 2.5]], shape=[1, 1099511627776], "
            "dtype=float32)");
  // A strided view prints the values of its contiguous copy.
  Tensor x = arange(0.0, 12.0).reshape({3, 4});
  for (const Tensor& v : {x.t(), x.slice(1, 1, 4, 2), x.select(1, 2)}) {
    std::ostringstream strided, copied;
    strided << v;
    copied << v.contiguous();
    EXPECT_EQ(strided.str(), copied.str());
  }
  std::ostringstream ints;
  ints << full({2}, static_cast<double>(1LL << 60), DType::Int64).expand({3, 2}).t();
  EXPECT_NE(ints.str().find("1152921504606846976"), std::string::npos) << ints.str();
  // Copying all of them out is a named error, not std::bad_alloc or std::length_error (2^61
  // doubles are more bytes than a std::vector can ask for, whatever the machine's memory).
  // Found by fuzz_ops: 2^40 floats (4 TiB) reached operator new, which a sanitizer build
  // aborts on instead of throwing; a request beyond the machine's memory is refused first.
  expect_error([&] { big.to_vector<float>(); }, ErrorKind::OutOfMemory,
               {"to_vector", "[1, 1099511627776]", "float32", "this machine's"});
  Tensor huge = full({}, 2.5).expand({1, (1LL << 61) - 1});
  expect_error([&] { huge.to_vector<double>(); }, ErrorKind::OutOfMemory,
               {"to_vector", "[1, 2305843009213693951]", "float32"});
}
