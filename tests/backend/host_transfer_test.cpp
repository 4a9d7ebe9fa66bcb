// The host transfers of Note [Host transfers] (src/backend/host_transfer.h): the kernels
// copy_to_host and copy_from_host on contiguous and strided tensors, one element of a huge
// expanded tensor, the chunked streams, and the refusals (meta, wrong dtype or count). The
// oracle is the strided index arithmetic written out in the test, against Tensor::to_vector.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/host_transfer.h"
#include "backend/kernels.h"
#include "backend/optim_kernels.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

// [rows, cols] float64 with element (i, j) = 100 i + j.
Tensor grid(int64_t rows, int64_t cols) {
  std::vector<double> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(100.0 * i + j);
  return tensor(v, Shape{rows, cols}, TensorOptions(DType::Float64));
}

TEST(HostTransfer, CopiesAStridedTensorOutRowMajor) {
  const Tensor t = grid(3, 5).transpose(0, 1);  // [5, 3], (j, i) = 100 i + j
  ASSERT_FALSE(t.is_contiguous());
  std::vector<double> got(15);
  kernels::copy_to_host(t, got.data());
  for (int64_t j = 0; j < 5; ++j)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(got[j * 3 + i], 100.0 * i + j) << j << ", " << i;
  EXPECT_EQ(detail::host_values<double>(t, "test"), got);
}

TEST(HostTransfer, CopiesIntoAStridedViewOnlyItsElements) {
  const Tensor base = zeros({4, 6}, DType::Int64);
  const Tensor every_other = base.slice(1, 0, 6, 2);  // columns 0, 2, 4
  const std::vector<int64_t> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  detail::write_host_values<int64_t>(every_other, in, "test");
  const std::vector<int64_t> all = base.to_vector<int64_t>();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(all[i * 6 + j], j % 2 == 0 ? in[i * 3 + j / 2] : 0) << i << ", " << j;
}

TEST(HostTransfer, ReadsOneElementOfAHugeExpandedTensor) {
  const Tensor row = tensor(std::vector<float>{1.5f, -2.0f, 3.25f}, Shape{3, 1});
  const Tensor huge = row.expand({3, int64_t{1} << 40});  // 3 values in memory, 3 * 2^40 shown
  EXPECT_EQ(detail::host_value<float>(huge, 0, "test"), 1.5f);
  EXPECT_EQ(detail::host_value<float>(huge, (int64_t{1} << 40) + 7, "test"), -2.0f);
  EXPECT_EQ(detail::host_value<float>(huge, 3 * (int64_t{1} << 40) - 1, "test"), 3.25f);
  std::ostringstream os;
  os << huge;  // summarised: only the shown elements are copied
  EXPECT_NE(os.str().find("3.25"), std::string::npos) << os.str();
}

TEST(HostTransfer, BoolTensorsReadAsBytes) {
  const Tensor mask = tensor(std::vector<bool>{true, false, true});
  EXPECT_EQ(detail::host_values<uint8_t>(mask, "test"), (std::vector<uint8_t>{1, 0, 1}));
  const Tensor tri = ones({3, 3}).tril();
  EXPECT_EQ(tri.to_vector<float>(), (std::vector<float>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
}

TEST(HostTransfer, StreamsInBoundedChunksBothWays) {
  // 2.5 chunks of float32, plus an odd tail, so the last chunk is short.
  const int64_t n = static_cast<int64_t>(detail::kHostChunkBytes / 4) * 5 / 2 + 3;
  const Tensor x = arange(0, static_cast<double>(n), 1, TensorOptions(DType::Float32));
  std::vector<char> bytes;
  int chunks = 0;
  detail::stream_to_host(x, [&](const char* p, std::size_t len) {
    EXPECT_LE(len, detail::kHostChunkBytes);
    bytes.insert(bytes.end(), p, p + len);
    ++chunks;
  });
  EXPECT_EQ(chunks, 3);
  ASSERT_EQ(bytes.size(), x.nbytes());
  const std::vector<float> want = x.to_vector<float>();
  EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0);

  const Tensor y = empty({n}, DType::Float32);
  std::size_t at = 0;
  detail::stream_from_host(y, [&](char* p, std::size_t len) {
    std::memcpy(p, bytes.data() + at, len);
    at += len;
  });
  EXPECT_EQ(at, bytes.size());
  EXPECT_EQ(y.to_vector<float>(), want);
}

TEST(HostTransfer, StreamsAStridedTensorRowMajor) {
  const Tensor t = grid(4, 3).transpose(0, 1);
  std::vector<double> got;
  detail::stream_to_host(t, [&](const char* p, std::size_t len) {
    const auto* d = reinterpret_cast<const double*>(p);
    got.insert(got.end(), d, d + len / sizeof(double));
  });
  EXPECT_EQ(got, t.to_vector<double>());
}

TEST(HostTransfer, RefusesMetaWrongDtypeAndWrongCount) {
  const Tensor m = empty({2, 3}, TensorOptions().device(kMeta));
  expect_error([&] { (void)detail::host_values<float>(m, "test"); }, ErrorKind::Device,
               {"meta", "[2, 3]"});
  const Tensor f = zeros({4});
  expect_error([&] { (void)detail::host_values<double>(f, "unit_op"); }, ErrorKind::DType,
               {"unit_op", "float64", "float32"});
  const std::vector<float> three = {1, 2, 3};
  expect_error([&] { detail::write_host_values<float>(f, three, "unit_op"); }, ErrorKind::Shape,
               {"unit_op", "3 values", "4"});
}

TEST(HostTransfer, MetaRunsTheOptimizerOpByOp) {
  EXPECT_FALSE(kernels::adam_step_exact(kMeta));
  // Data given to meta keeps its shape and dtype only.
  const Tensor t = tensor(std::vector<double>{1, 2, 3, 4}, Shape{2, 2},
                          TensorOptions(DType::Float64).device(kMeta));
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.dtype(), DType::Float64);
}

}  // namespace
