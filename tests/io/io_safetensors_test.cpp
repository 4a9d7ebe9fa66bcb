// save_safetensors / load_safetensors: round trips of every dtype (0-d and empty shapes
// included) with names, order and metadata; non-contiguous inputs; a file compared byte for
// byte with one built by hand; dtypes widened on load; and atomic saves that fail cleanly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "io/io_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::io_test;
using adjoint::testing::expect_error;

namespace {

// Same dtype, shape and bytes (so NaN payloads and -0.0 count).
void expect_same_bytes(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  Tensor w = want.contiguous();
  ASSERT_TRUE(got.is_contiguous());
  if (w.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(got.raw_data(), w.raw_data(), w.nbytes()), 0);
  }
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  TempDir dir;
  Generator gen(7);
  const io::NamedTensors saved = {
      {"f32", randn({3, 4}, DType::Float32, &gen)},
      {"f64.special",
       tensor({0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-310, 1.0 / 3}, DType::Float64)},
      {"i64", tensor(std::vector<int64_t>{0, -1, std::numeric_limits<int64_t>::max(),
                                          std::numeric_limits<int64_t>::min()},
                     Shape{2, 2})},
      {"bool", tensor(std::vector<bool>{true, false, false, true, true})},
      {"scalar f32", scalar_tensor(2.5f, DType::Float32)},
      {"scalar i64", scalar_tensor(int64_t{-42}, DType::Int64)},
      {"scalar bool", scalar_tensor(true, DType::Bool)},
      {"empty", zeros({0}, DType::Float32)},
      {"empty 3d", zeros({2, 0, 3}, DType::Int64)},
      {"ünïcödé/名前", ones({2}, DType::Float64)},
  };
  const io::Metadata meta = {{"format", "pt"}, {"epoch", "3"}, {"note", "a \"quoted\" line\n"}};
  const std::string path = dir.file("all.safetensors");
  io::save_safetensors(path, saved, meta);
  io::SafetensorsFile loaded = io::load_safetensors(path);
  ASSERT_EQ(loaded.tensors.size(), saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(loaded.tensors[i].first, saved[i].first);  // same names, same order
    expect_same_bytes(loaded.tensors[i].second, saved[i].second);
    EXPECT_FALSE(loaded.tensors[i].second.requires_grad());
  }
  EXPECT_EQ(loaded.metadata, meta);
  uint64_t header_len = 0;
  std::memcpy(&header_len, read_bytes(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);  // padded, so the data starts 8-byte aligned
}

TEST(Safetensors, NoTensorsAndNoMetadata) {
  TempDir dir;
  io::save_safetensors(dir.file("e"), {});
  EXPECT_EQ(read_bytes(dir.file("e")), u64_le(8) + "{}      ");
  io::SafetensorsFile f = io::load_safetensors(dir.file("e"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
}

TEST(Safetensors, NonContiguousTensorsAreSavedByValue) {
  TempDir dir;
  Tensor base = arange(0, 24, 1, DType::Float64).reshape({4, 6});
  const io::NamedTensors saved = {
      {"transposed", base.t()},
      {"strided", base.slice(1, 1, 6, 2)},
      {"expanded", tensor({1.0, 2.0}, DType::Float32).unsqueeze(0).expand({3, 2})},
      {"offset", base.select(0, 2)},
      {"grad", base.detach().clone().requires_grad_(true) * 2},
  };
  io::save_safetensors(dir.file("v"), saved);
  io::SafetensorsFile loaded = io::load_safetensors(dir.file("v"));
  for (std::size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(loaded.tensors[i].first, saved[i].first);
    EXPECT_EQ(loaded.tensors[i].second.to_vector<double>(), saved[i].second.to_vector<double>());
    EXPECT_EQ(loaded.tensors[i].second.shape(), saved[i].second.shape());
  }
}

TEST(Safetensors, BytesMatchAHandBuiltFile) {
  TempDir dir;
  const io::NamedTensors saved = {
      {"weight", tensor({1.0, -2.5}, DType::Float32)},
      {"step", scalar_tensor(int64_t{7}, DType::Int64)},
      {"mask", tensor(std::vector<bool>{true, false, true})},
      {"empty", zeros({0}, DType::Float64)},
  };
  io::save_safetensors(dir.file("h"), saved, {{"format", "pt"}});
  // 8-byte dtypes first (step, then the empty F64), then F32, then BOOL; the header keeps the
  // given order with the metadata first.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("step":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]},)"
                             R"("empty":{"dtype":"F64","shape":[0],"data_offsets":[8,8]}})";
  const std::string data = bytes_of(std::vector<int64_t>{7}) +
                           bytes_of(std::vector<float>{1.0f, -2.5f}) +
                           std::string("\x01\x00\x01", 3);
  const std::string expected = safetensors_bytes(header, data);
  EXPECT_EQ((expected.size() - data.size()) % 8, 0u);
  EXPECT_EQ(read_bytes(dir.file("h")), expected);

  // And a hand-built file loads: names in header order, values as written.
  write_bytes(dir.file("hand"), expected);
  io::SafetensorsFile f = io::load_safetensors(dir.file("hand"));
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].first, "weight");
  EXPECT_EQ(f.tensors[0].second.to_vector<double>(), (std::vector<double>{1.0, -2.5}));
  EXPECT_EQ(f.tensors[1].second.item<int64_t>(), 7);
  EXPECT_EQ(f.tensors[2].second.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.tensors[3].second.shape(), (Shape{0}));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Safetensors, EveryTensorIsAlignedToItsElementSize) {
  TempDir dir;
  io::save_safetensors(dir.file("a"), {{"b", ones({3}, DType::Bool)},
                                       {"f", ones({3}, DType::Float32)},
                                       {"d", ones({1}, DType::Float64)},
                                       {"i", ones({2}, DType::Int64)}});
  const std::string bytes = read_bytes(dir.file("a"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]})"),
            std::string::npos);
  EXPECT_NE(header.find(R"("i":{"dtype":"I64","shape":[2],"data_offsets":[8,24]})"),
            std::string::npos);
  EXPECT_NE(header.find(R"("f":{"dtype":"F32","shape":[3],"data_offsets":[24,36]})"),
            std::string::npos);
  EXPECT_NE(header.find(R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[36,39]})"),
            std::string::npos);
}

TEST(Safetensors, SixteenBitFloatsAndNarrowIntegersLoadAsThemselves) {
  TempDir dir;
  // F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), inf. BF16: 1, -0.5.
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xBF00};
  const std::vector<int32_t> i32 = {-7, 1 << 30};
  const std::vector<int16_t> i16 = {-300};
  const std::vector<int8_t> i8 = {-5, 127};
  const std::vector<uint8_t> u8 = {250};
  const std::string header = R"({"f16":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},)"
                             R"("bf16":{"dtype":"BF16","shape":[2],"data_offsets":[10,14]},)"
                             R"("i32":{"dtype":"I32","shape":[2],"data_offsets":[14,22]},)"
                             R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[22,24]},)"
                             R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[24,26]},)"
                             R"("u8":{"dtype":"U8","shape":[],"data_offsets":[26,27]}})";
  write_bytes(dir.file("w"),
              safetensors_bytes(header, bytes_of(f16) + bytes_of(bf16) + bytes_of(i32) +
                                            bytes_of(i16) + bytes_of(i8) + bytes_of(u8)));
  io::SafetensorsFile f = io::load_safetensors(dir.file("w"));
  ASSERT_EQ(f.tensors.size(), 6u);
  EXPECT_EQ(f.tensors[0].second.dtype(), DType::Float16);
  EXPECT_EQ(f.tensors[0].second.to_vector<double>(),
            (std::vector<double>{1, -2, 65504, std::ldexp(1.0, -24), INFINITY}));
  EXPECT_EQ(f.tensors[1].second.dtype(), DType::BFloat16);
  EXPECT_EQ(f.tensors[1].second.to_vector<double>(), (std::vector<double>{1, -0.5}));
  EXPECT_EQ(f.tensors[2].second.dtype(), DType::Int32);
  EXPECT_EQ(f.tensors[2].second.to_vector<int32_t>(), i32);
  EXPECT_EQ(f.tensors[3].second.dtype(), DType::Int16);
  EXPECT_EQ(f.tensors[3].second.to_vector<int16_t>(), i16);
  EXPECT_EQ(f.tensors[4].second.dtype(), DType::Int8);
  EXPECT_EQ(f.tensors[4].second.to_vector<int8_t>(), i8);
  EXPECT_EQ(f.tensors[5].second.dtype(), DType::UInt8);
  EXPECT_EQ(f.tensors[5].second.item<uint8_t>(), 250);
}

// float16 and bfloat16 are written as F16 and BF16, two bytes each, and read back bit for bit
// (every 16-bit pattern, NaNs included).
TEST(Safetensors, SixteenBitFloatsRoundTripBitForBit) {
  TempDir dir;
  Tensor h = empty({256, 256}, DType::Float16), b = empty({65536}, DType::BFloat16);
  for (int i = 0; i < 65536; ++i) {
    h.data_ptr<Half>()[i] = Half::from_bits(static_cast<uint16_t>(i));
    b.data_ptr<BFloat16>()[i] = BFloat16::from_bits(static_cast<uint16_t>(65535 - i));
  }
  io::save_safetensors(dir.file("h"), {{"h", h}, {"b", b.slice(0, 1, 65536, 2)}});
  io::SafetensorsFile f = io::load_safetensors(dir.file("h"));
  ASSERT_EQ(f.tensors.size(), 2u);
  Tensor h2 = f.tensors[0].second, b2 = f.tensors[1].second;
  ASSERT_EQ(h2.dtype(), DType::Float16);
  ASSERT_EQ(b2.dtype(), DType::BFloat16);
  ASSERT_EQ(h2.shape(), (Shape{256, 256}));
  ASSERT_EQ(b2.shape(), (Shape{32768}));
  for (int i = 0; i < 65536; ++i) ASSERT_EQ(h2.data_ptr<Half>()[i].bits, i);
  for (int i = 0; i < 32768; ++i) ASSERT_EQ(b2.data_ptr<BFloat16>()[i].bits, 65535 - (2 * i + 1));
  const std::string bytes = read_bytes(dir.file("h"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("dtype":"F16")"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("dtype":"BF16")"), std::string::npos) << header;
}

TEST(Safetensors, BoolBytesOtherThanOneAreTrue) {
  TempDir dir;
  write_bytes(dir.file("b"),
              safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                std::string("\x00\x02\xff", 3)));
  Tensor m = io::load_safetensors(dir.file("b")).tensors[0].second;
  EXPECT_EQ(m.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(sum(m.to(DType::Int64)).item<int64_t>(), 2);
}

TEST(Safetensors, UnpaddedHeadersFromOtherWritersLoad) {
  TempDir dir;
  write_bytes(dir.file("u"),
              safetensors_bytes(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                                bytes_of(std::vector<double>{4.0}), /*pad=*/false));
  EXPECT_EQ(io::load_safetensors(dir.file("u")).tensors[0].second.item<double>(), 4.0);
}

// ---- saving: bad input and atomicity ----

TEST(SafetensorsSave, BadInputThrowsBeforeWritingAnything) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  io::save_safetensors(path, {{"w", ones({2})}});
  const std::string good = read_bytes(path);
  expect_error(
      [&] {
        io::save_safetensors(path, {{"w", ones({2})}, {"x", Tensor()}});
      },
      ErrorKind::Value, {"[io.save_safetensors]", path, "'x'", "undefined"});
  expect_error(
      [&] {
        io::save_safetensors(path, {{"w", ones({2})}, {"w", ones({1})}});
      },
      ErrorKind::Value, {"[io.save_safetensors]", "'w'", "twice"});
  expect_error(
      [&] {
        io::save_safetensors(path, {{"__metadata__", ones({2})}});
      },
      ErrorKind::Value, {"[io.save_safetensors]", "reserved"});
  expect_error(
      [&] {
        io::save_safetensors(path, {{std::string("bad\xff", 4), ones({2})}});
      },
      ErrorKind::Value, {"[io.save_safetensors]", "UTF-8"});
  expect_error(
      [&] {
        io::save_safetensors(path, {{"w", ones({2})}}, {{"k", "\xc3"}});
      },
      ErrorKind::Value, {"[io.save_safetensors]", "UTF-8"});
  EXPECT_EQ(read_bytes(path), good);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsSave, MissingDirectoryFailsCleanly) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/model.safetensors");
  expect_error(
      [&] {
        io::save_safetensors(path, {{"w", ones({2})}});
      },
      ErrorKind::IO, {"[io.save_safetensors]", path, "temporary file", "No such file"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsSave, FailedRenameRemovesTheTemporaryFile) {
  TempDir dir;
  // The target is a non-empty directory: writing succeeds, the final rename cannot.
  const std::string path = dir.file("target");
  std::filesystem::create_directories(path + "/inside");
  expect_error(
      [&] {
        io::save_safetensors(path, {{"w", ones({1000})}});
      },
      ErrorKind::IO, {"[io.save_safetensors]", path, "rename"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target"});  // no "target.tmp.*" left
  EXPECT_TRUE(std::filesystem::is_directory(path + "/inside"));
}

TEST(SafetensorsSave, OverwritesAtomicallyAndLeavesNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  io::save_safetensors(path, {{"w", ones({4}, DType::Float64)}});
  io::save_safetensors(path, {{"w", full({2}, 3.0, DType::Float64)}});
  EXPECT_EQ(io::load_safetensors(path).tensors[0].second.to_vector<double>(),
            (std::vector<double>{3, 3}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(SafetensorsSave, RelativePathInTheWorkingDirectory) {
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  io::save_safetensors("plain.safetensors", {{"x", ones({1})}});
  std::filesystem::current_path(cwd);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plain.safetensors"});
}
