// Inputs fuzz_loaders (fuzz/, docs/fuzzing.md) found to break load_safetensors, kept as tests:
// each must now give an adjoint::Error of kind IO (this suite also runs under ASan).
#include <gtest/gtest.h>

#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "io/io_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::io_test;

namespace {

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

void expect_io_error(const std::string& header, const std::vector<std::string>& parts) {
  TempDir dir;
  const std::string path = dir.file("fuzz.safetensors");
  write_bytes(path, safetensors_bytes(header, ""));
  adjoint::testing::expect_error([&] { io::load_safetensors(path); }, ErrorKind::IO, parts);
}

}  // namespace

// A deeply nested value used to overflow the stack: the error message printed it with
// nlohmann's recursive dump(). The header's nesting is now bounded while parsing.
TEST(IoFuzzRegressions, DeeplyNestedEntryIsRejected) {
  expect_io_error(R"({"t":)" + nested_arrays(200000) + "}", {"[io.load_safetensors]", "nest"});
}

TEST(IoFuzzRegressions, DeeplyNestedMetadataIsRejected) {
  expect_io_error(R"({"__metadata__":{"k":)" + nested_arrays(200000) + "}}",
                  {"[io.load_safetensors]", "nest"});
}

TEST(IoFuzzRegressions, DeeplyNestedShapeIsRejected) {
  expect_io_error(
      R"({"t":{"dtype":"F32","shape":)" + nested_arrays(200000) + R"(,"data_offsets":[0,0]}})",
      {"[io.load_safetensors]", "nest"});
}

// Nesting a valid header never needs stays accepted up to the limit, with the usual errors.
TEST(IoFuzzRegressions, ModestNestingGivesTheUsualError) {
  expect_io_error(R"({"__metadata__":{"k":[[1]]}})",
                  {"[io.load_safetensors]", "__metadata__ must map strings to strings", "[[1]]"});
}

// An error quoting a huge header value quotes the start of it, not all of it.
TEST(IoFuzzRegressions, ErrorsQuoteLongValuesShortened) {
  const std::string big(1 << 20, 'x');
  TempDir dir;
  const std::string path = dir.file("long.safetensors");
  write_bytes(path, safetensors_bytes(
                        R"({"t":{"dtype":")" + big + R"(","shape":[],"data_offsets":[0,0]}})", ""));
  try {
    io::load_safetensors(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::IO);
    EXPECT_LT(std::string(e.what()).size(), 1000u) << std::string(e.what()).substr(0, 200);
  }
}
