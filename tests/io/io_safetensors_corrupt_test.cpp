// load_safetensors on broken files: each one throws an adjoint::Error of kind IO that names
// the file and says what is wrong, and none reads out of bounds (this suite runs under ASan).
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "io/io_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::io_test;

namespace {

// One valid F64 tensor "x" of two elements, for corruptions to start from.
const std::string kData = bytes_of(std::vector<double>{1.0, 2.0});

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

class Corrupt : public ::testing::Test {
 protected:
  // Writes `bytes` and expects loading to fail mentioning the path and every one of `parts`.
  void expect_rejected(const std::string& bytes, const std::vector<std::string>& parts) {
    const std::string path = dir_.file("bad.safetensors");
    write_bytes(path, bytes);
    std::vector<std::string> all = {"[io.load_safetensors]", "'" + path + "'"};
    all.insert(all.end(), parts.begin(), parts.end());
    adjoint::testing::expect_error([&] { io::load_safetensors(path); }, ErrorKind::IO, all);
  }
  void expect_header_rejected(const std::string& header, const std::string& data,
                              const std::vector<std::string>& parts) {
    expect_rejected(safetensors_bytes(header, data), parts);
  }
  TempDir dir_;
};

}  // namespace

TEST_F(Corrupt, ValidStartingPointLoads) {
  const std::string path = dir_.file("ok");
  write_bytes(path, safetensors_bytes(R"({"x":)" + entry("F64", "[2]", "[0,16]") + "}", kData));
  EXPECT_EQ(io::load_safetensors(path).tensors[0].second.to_vector<double>(),
            (std::vector<double>{1, 2}));
}

TEST_F(Corrupt, MissingFile) {
  const std::string path = dir_.file("nope.safetensors");
  adjoint::testing::expect_error([&] { io::load_safetensors(path); }, ErrorKind::IO,
                                 {"[io.load_safetensors]", path, "cannot open", "No such file"});
}

TEST_F(Corrupt, NotARegularFile) {
  adjoint::testing::expect_error([&] { io::load_safetensors(dir_.path().string()); }, ErrorKind::IO,
                                 {"[io.load_safetensors]", "not a regular file"});
}

TEST_F(Corrupt, ShorterThanTheLengthPrefix) {
  expect_rejected("", {"0 bytes", "too short"});
  expect_rejected(std::string("\x08\x00\x00\x00\x00", 5), {"5 bytes", "too short"});
}

TEST_F(Corrupt, HeaderLengthPastTheEnd) {
  expect_rejected(u64_le(9) + "{}      ", {"header length 9", "past the end", "16-byte"});
  expect_rejected(u64_le(~uint64_t{0}) + "{}", {"header length 18446744073709551615"});
  expect_rejected(u64_le(1) + "", {"header length 1"});
}

TEST_F(Corrupt, InvalidJson) {
  expect_header_rejected(R"({"x": {"dtype": "F64",)", kData, {"not valid JSON"});
  expect_header_rejected(R"({"x":1} trailing)", "", {"not valid JSON"});
  expect_header_rejected("{\"x\xff\":1}", "", {"not valid JSON"});  // not UTF-8
  expect_header_rejected(R"({/* comment */})", "", {"not valid JSON"});
  expect_rejected(u64_le(8) + std::string(8, '\0'), {"does not start with '{'"});
  expect_header_rejected(R"( {})", "", {"does not start with '{'"});
  expect_header_rejected(R"([1, 2])", "", {"does not start with '{'"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[0,16]") + "}", kData + "x",
                         {"1 trailing bytes"});
}

TEST_F(Corrupt, DuplicateKeys) {
  expect_header_rejected(
      R"({"x":)" + entry("F64", "[1]", "[0,8]") + R"(,"x":)" + entry("F64", "[1]", "[8,16]") + "}",
      kData, {"'x' twice"});
  expect_header_rejected(R"({"x":{"dtype":"F64","dtype":"F64","shape":[2],"data_offsets":[0,16]}})",
                         kData, {"'dtype' twice"});
  expect_header_rejected(R"({"__metadata__":{"a":"1","a":"2"}})", "", {"'a' twice"});
}

TEST_F(Corrupt, BadDtypes) {
  expect_header_rejected(R"({"x":)" + entry("F42", "[2]", "[0,16]") + "}", kData,
                         {"tensor 'x'", "unknown dtype \"F42\""});
  expect_header_rejected(R"({"x":)" + entry("U32", "[4]", "[0,16]") + "}", kData,
                         {"tensor 'x'", "U32", "not supported"});
  expect_header_rejected(R"({"x":{"dtype":7,"shape":[2],"data_offsets":[0,16]}})", kData,
                         {"tensor 'x'", "dtype must be a string"});
}

TEST_F(Corrupt, BadShapes) {
  expect_header_rejected(R"({"x":)" + entry("F64", "[-2]", "[0,16]") + "}", kData,
                         {"tensor 'x'", "shape entry", "non-negative integer", "-2"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[2.0]", "[0,16]") + "}", kData,
                         {"shape entry", "2.0"});
  expect_header_rejected(R"({"x":)" + entry("F64", "2", "[0,16]") + "}", kData,
                         {"shape must be an array"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[4294967296,4294967296]", "[0,16]") + "}",
                         kData, {"too large"});
  expect_header_rejected(R"({"x":)" +
                             entry("F64", "[0,4294967296,4294967296,4294967296]", "[0,0]") +
                             R"(,"y":)" + entry("F64", "[2]", "[0,16]") + "}",
                         kData, {"tensor 'x'", "too large"});
  expect_header_rejected(R"({"x":{"dtype":"F64","data_offsets":[0,16]}})", kData,
                         {"tensor 'x'", "missing \"shape\""});
  expect_header_rejected(R"({"x":[1,2]})", kData, {"tensor 'x'", "must be an object"});
}

TEST_F(Corrupt, ShapeAndOffsetsDisagree) {
  expect_header_rejected(R"({"x":)" + entry("F64", "[3]", "[0,16]") + "}", kData,
                         {"tensor 'x'", "span 16 bytes", "needs 24"});
  expect_header_rejected(R"({"x":)" + entry("F32", "[2]", "[0,16]") + "}", kData,
                         {"tensor 'x'", "needs 8"});
}

TEST_F(Corrupt, BadOffsets) {
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[8,24]") + "}", kData,
                         {"tensor 'x'", "out of range", "16 bytes"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[0]", "[16,8]") + "}", kData,
                         {"tensor 'x'", "end before they begin"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[0,16,0]") + "}", kData,
                         {"tensor 'x'", "[begin, end]"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[0,-16]") + "}", kData,
                         {"data_offsets end", "non-negative"});
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[0,18446744073709551616]") + "}", kData,
                         {"data_offsets end"});
}

TEST_F(Corrupt, OverlapsGapsAndTrailingBytes) {
  // Overlap: both tensors claim bytes [8, 16).
  expect_header_rejected(
      R"({"a":)" + entry("F64", "[2]", "[0,16]") + R"(,"b":)" + entry("F64", "[1]", "[8,16]") + "}",
      kData, {"'a' and 'b' overlap"});
  // Gap: nothing covers [0, 8).
  expect_header_rejected(R"({"b":)" + entry("F64", "[1]", "[8,16]") + "}", kData,
                         {"[0, 8)", "belong to no tensor", "'b'"});
  // Gap in the middle.
  expect_header_rejected(
      R"({"a":)" + entry("F32", "[1]", "[0,4]") + R"(,"b":)" + entry("F64", "[1]", "[8,16]") + "}",
      kData, {"[4, 8)", "no tensor"});
  // Trailing bytes after the last tensor.
  expect_header_rejected(R"({"a":)" + entry("F64", "[1]", "[0,8]") + "}", kData,
                         {"8 trailing bytes"});
  // Data but no tensors.
  expect_header_rejected("{}", kData, {"16 trailing bytes"});
  // An empty tensor inside another's bytes.
  expect_header_rejected(
      R"({"a":)" + entry("F64", "[2]", "[0,16]") + R"(,"e":)" + entry("F64", "[0]", "[4,4]") + "}",
      kData, {"overlap"});
}

TEST_F(Corrupt, BadMetadata) {
  expect_header_rejected(R"({"__metadata__":{"epoch":3}})", "",
                         {"__metadata__", "strings to strings", "'epoch'"});
  expect_header_rejected(R"({"__metadata__":["a"]})", "", {"__metadata__ must be an object"});
}

TEST_F(Corrupt, TruncatedData) {
  // A valid file cut short: the last tensor's bytes are missing.
  expect_header_rejected(R"({"x":)" + entry("F64", "[2]", "[0,16]") + "}", kData.substr(0, 12),
                         {"out of range"});
}
