// ByteDataset: reading files and directories (duplicates once), the split, batches whose
// targets are the next bytes of their inputs, determinism by seed, and the errors.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include <fstream>

#include "adjoint/data/text.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
namespace fs = std::filesystem;

std::vector<uint8_t> counting(int n) {
  std::vector<uint8_t> b(n);
  for (int i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i % 251);
  return b;
}

TEST(ByteDataset, SplitAndBatches) {
  data::ByteDataset ds(counting(1000), 0.2);
  EXPECT_EQ(ds.train_size(), 800);
  EXPECT_EQ(ds.validation_size(), 200);
  Generator gen(7);
  data::TextBatch b = ds.batch(data::Split::Train, 4, 16, gen);
  ASSERT_EQ(b.inputs.shape(), Shape({4, 16}));
  ASSERT_EQ(b.targets.dtype(), DType::Int64);
  std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), out = b.targets.to_vector<int64_t>();
  for (int r = 0; r < 4; ++r) {
    // Find the window: the bytes count up mod 251, so the first input fixes the offset modulo
    // 251; check every position's target is the byte after its input within the split.
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(out[r * 16 + t], (in[r * 16 + t] + 1) % 251);
      if (t + 1 < 16) {
        EXPECT_EQ(in[r * 16 + t + 1], out[r * 16 + t]);
      }
    }
  }
  // Validation windows lie in the last 200 bytes: with 1000 bytes counting mod 251 those
  // are 800..999, whose values are 800 % 251 = 47 up to 999 % 251 = 246.
  Generator vgen(3);
  data::TextBatch v = ds.batch(data::Split::Validation, 8, 32, vgen);
  for (int64_t x : v.inputs.to_vector<int64_t>()) {
    EXPECT_GE(x, 47);
    EXPECT_LE(x, 246);
  }
}

TEST(ByteDataset, SameSeedSameBatch) {
  data::ByteDataset ds(counting(5000));
  Generator a(11), b(11), c(12);
  auto x = ds.batch(data::Split::Train, 8, 32, a).inputs.to_vector<int64_t>();
  auto y = ds.batch(data::Split::Train, 8, 32, b).inputs.to_vector<int64_t>();
  auto z = ds.batch(data::Split::Train, 8, 32, c).inputs.to_vector<int64_t>();
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(ByteDataset, DirectoryReadsEachTextOnce) {
  const fs::path dir = fs::temp_directory_path() / ("adjoint_ds_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "a.txt") << "hello ";
  std::ofstream(dir / "sub" / "b.txt") << "world";
  fs::create_symlink(dir / "a.txt", dir / "c.txt");  // the same text again
  data::ByteDataset ds(dir.string(), 0.0);
  const std::string text(ds.bytes().begin(), ds.bytes().end());
  EXPECT_EQ(text, "hello world");
  EXPECT_EQ(ds.files().size(), 2u);
  fs::remove_all(dir);
}

TEST(ByteDataset, Errors) {
  expect_error([] { data::ByteDataset("/no/such/corpus"); }, ErrorKind::IO,
               {"data.ByteDataset", "/no/such/corpus"});
  expect_error([] { data::ByteDataset(counting(10), 1.5); }, ErrorKind::Value,
               {"validation_fraction"});
  data::ByteDataset small(counting(20), 0.5);
  Generator gen(0);
  expect_error([&] { small.batch(data::Split::Validation, 2, 16, gen); }, ErrorKind::Value,
               {"validation split has 10 bytes", "context + 1 = 17"});
}

}  // namespace
