// The IDX readers on small files the test writes (plain and gzip-compressed, their bytes known)
// and on damaged ones (each a named IO error), then on Debian's Fashion-MNIST files when the
// dataset-fashion-mnist package is installed (skipped, saying so, otherwise).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/data/idx.h"
#include "io/io_test_util.h"

using namespace adjoint;

namespace {

using Bytes = std::vector<uint8_t>;

// An IDX file: magic 0, 0, type, rank; big-endian dims; then `data`.
Bytes idx(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes iota_bytes(std::size_t n, int step = 37) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * step) % 256);
  return b;
}

void write_plain(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gzip(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  gzclose(f);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

template <class F>
void expect_io_error(F&& f, const std::string& op, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::IO) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Idx, ReadsImagesPlainAndCompressedAsScaledFloats) {
  io_test::TempDir dir;
  const Bytes pixels = iota_bytes(3 * 2 * 5);
  const Bytes file = idx(0x08, {3, 2, 5}, pixels);
  write_plain(dir.file("plain"), file);
  write_gzip(dir.file("packed.gz"), file);
  for (const char* name : {"plain", "packed.gz"}) {
    const Tensor x = data::read_idx_images(dir.file(name));
    EXPECT_EQ(x.shape(), (Shape{3, 1, 2, 5})) << name;
    EXPECT_EQ(x.dtype(), DType::Float32);
    const std::vector<float> v = x.to_vector<float>();
    for (std::size_t i = 0; i < pixels.size(); ++i)
      EXPECT_EQ(v[i], static_cast<float>(pixels[i]) / 255.0f) << name << i;
  }
}

TEST(Idx, ReadsLabelsAsInt64) {
  io_test::TempDir dir;
  const Bytes labels{3, 0, 9, 255, 1};
  write_gzip(dir.file("labels.gz"), idx(0x08, {5}, labels));
  const Tensor y = data::read_idx_labels(dir.file("labels.gz"));
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 9, 255, 1}));
  write_plain(dir.file("none"), idx(0x08, {0}, {}));
  EXPECT_EQ(data::read_idx_labels(dir.file("none")).shape(), (Shape{0}));
}

TEST(Idx, DamagedFilesAreNamedErrors) {
  io_test::TempDir dir;
  const std::string images = "data.read_idx_images", labels = "data.read_idx_labels";
  auto img = [&](const Bytes& b) {
    write_plain(dir.file("f"), b);
    return [&] { data::read_idx_images(dir.file("f")); };
  };
  expect_io_error([&] { data::read_idx_images(dir.file("missing")); }, images, "no such file");
  expect_io_error(img(idx(0x08, {4}, iota_bytes(4))), images, "magic number 0x00000801");
  expect_io_error(img(idx(0x0D, {1, 2, 2}, Bytes(16))), images, "unsigned bytes of rank 3");
  expect_io_error(img(idx(0x08, {1, 2, 2, 2}, iota_bytes(8))), images, "magic number");
  expect_io_error(img(Bytes{'h', 'e', 'l', 'l', 'o', '!'}), images, "not an IDX file");
  expect_io_error(img(Bytes{0, 0}), images, "inside the magic number");
  expect_io_error(img(Bytes{0, 0, 8, 3, 0, 0, 0, 2, 0, 0}), images, "inside the dims");
  expect_io_error(img(idx(0x08, {2, 0, 3}, {})), images, "zero-sized images");
  expect_io_error(img(idx(0x08, {2, 2, 2}, iota_bytes(7))), images,
                  "promise 8 bytes of data, it holds 7");
  expect_io_error(img(idx(0x08, {1, 2, 2}, iota_bytes(5))), images, "bytes after the 4");
  // A header that claims far more than the file holds fails without allocating its claim.
  expect_io_error(img(idx(0x08, {1000000, 28, 28}, iota_bytes(28 * 28))), images, "truncated");
  expect_io_error(img(idx(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 28}, {})), images, "2^34");
  write_plain(dir.file("l"), idx(0x08, {2, 2, 2}, iota_bytes(8)));
  expect_io_error([&] { data::read_idx_labels(dir.file("l")); }, labels, "rank 1");
  write_plain(dir.file("l"), idx(0x08, {6}, iota_bytes(3)));
  expect_io_error([&] { data::read_idx_labels(dir.file("l")); }, labels, "truncated");
}

TEST(Idx, CutOrCorruptCompressedFilesAreNamedErrors) {
  io_test::TempDir dir;
  const Bytes file = idx(0x08, {40, 8, 8}, iota_bytes(40 * 64, 101));
  write_gzip(dir.file("whole.gz"), file);
  const Bytes gz = read_bytes(dir.file("whole.gz"));
  ASSERT_GT(gz.size(), 40u);
  // Cut in the middle of the stream, and cut just before the trailer's checksum.
  for (std::size_t keep : {gz.size() / 2, gz.size() - 4}) {
    write_plain(dir.file("cut.gz"), Bytes(gz.begin(), gz.begin() + static_cast<long>(keep)));
    expect_io_error([&] { data::read_idx_images(dir.file("cut.gz")); }, "data.read_idx_images",
                    "truncated");
  }
  Bytes flipped = gz;
  flipped[gz.size() / 2] ^= 0xFF;  // damage inside the deflate stream or caught by the CRC
  write_plain(dir.file("bad.gz"), flipped);
  expect_io_error([&] { data::read_idx_images(dir.file("bad.gz")); }, "data.read_idx_images",
                  "compressed data");
}

TEST(Idx, ReadsDebiansFashionMnist) {
  const std::string dir = data::kFashionMnistDir;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps.sh installs it)";
  for (bool train : {true, false}) {
    const data::ImageDataset d = data::read_mnist(dir, train);
    const int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(d.images.shape(), (Shape{n, 1, 28, 28}));
    EXPECT_EQ(d.labels.shape(), (Shape{n}));
    EXPECT_GE(d.images.min().item<double>(), 0);
    EXPECT_LE(d.images.max().item<double>(), 1);
    // Fashion-MNIST is balanced: n / 10 images of each of its 10 classes.
    const std::vector<int64_t> labels = d.labels.to_vector<int64_t>();
    std::vector<int64_t> count(10, 0);
    for (int64_t l : labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++count[l];
    }
    for (int64_t c : count) EXPECT_EQ(c, n / 10);
  }
}
