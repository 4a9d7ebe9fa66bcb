// Files written by save_safetensors and save_checkpoint, read back by read_safetensors.py: an
// independent reader written from the format's specification (Python standard library only)
// that applies the reference implementation's checks and compares every value. It stands in
// for Python's `safetensors` package, which Debian 12 does not ship.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "io/io_test_util.h"

using namespace adjoint;
using namespace adjoint::io_test;

namespace {

const std::filesystem::path kReader =
    std::filesystem::path(__FILE__).parent_path() / "read_safetensors.py";

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

const char* file_dtype(DType dt) {
  switch (dt) {
    case DType::Float64:
      return "F64";
    case DType::Float32:
      return "F32";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
    case DType::Int64:
      return "I64";
    case DType::Int32:
      return "I32";
    case DType::Int16:
      return "I16";
    case DType::Int8:
      return "I8";
    case DType::UInt8:
      return "U8";
    case DType::Bool:
      return "BOOL";
  }
  return "?";
}

// What the reader must find: names, dtypes, shapes and every value (doubles printed with 17
// significant digits, which round-trip exactly; float32 values are widened exactly first).
std::string expected_json(const io::NamedTensors& tensors, const io::Metadata& metadata) {
  std::ostringstream os;
  os.precision(17);
  os << "{\"__metadata__\": {";
  bool first = true;
  for (const auto& [k, v] : metadata) {
    os << (first ? "" : ", ") << json_string(k) << ": " << json_string(v);
    first = false;
  }
  os << "}";
  for (const auto& [name, t] : tensors) {
    os << ",\n"
       << json_string(name) << ": {\"dtype\": \"" << file_dtype(t.dtype()) << "\", \"shape\": [";
    for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
    os << "], \"values\": [";
    Tensor flat = t.detach().contiguous().reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      os << (i ? ", " : "");
      Tensor e = flat.select(0, i);
      switch (t.dtype()) {
        case DType::Float64:
        case DType::Float32:
        case DType::Float16:
        case DType::BFloat16: {
          const double v = e.to(DType::Float64).item<double>();
          if (v != v) {
            os << "\"nan\"";
          } else if (std::isinf(v)) {
            os << (v > 0 ? "1e999" : "-1e999");  // Python's json reads these as infinities
          } else {
            os << v;
          }
          break;
        }
        case DType::Int64:
        case DType::Int32:
        case DType::Int16:
        case DType::Int8:
        case DType::UInt8:
          os << e.item<int64_t>();
          break;
        case DType::Bool:
          os << (e.item<bool>() ? "true" : "false");
          break;
      }
    }
    os << "]}";
  }
  os << "}\n";
  return os.str();
}

// Runs the reader on `file` against `tensors` and `metadata`; its last line goes in the
// failure message.
void expect_python_reads(const TempDir& dir, const std::string& file,
                         const io::NamedTensors& tensors, const io::Metadata& metadata) {
  const std::string want = dir.file("expected.json");
  std::ofstream(want) << expected_json(tensors, metadata);
  const std::string cmd = "python3 '" + kReader.string() + "' '" + file + "' '" + want + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("valid and equal"), std::string::npos) << output;
}

bool have_python() { return std::system("python3 -c 'import json, struct' >/dev/null 2>&1") == 0; }

}  // namespace

TEST(SafetensorsPython, ReadsEveryDtypeAndShape) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/install-deps.sh adds it)";
  TempDir dir;
  Generator gen(3);
  const io::NamedTensors tensors = {
      {"f32", randn({3, 5}, DType::Float32, &gen)},
      {"f64", randn({4}, DType::Float64, &gen) * 1e-300},
      {"i64", randint(-1000000, 1000000, {2, 3}, &gen)},
      {"i32", randint(-2000000000, 2000000000, {3}, &gen).to(DType::Int32)},
      {"i16", randint(-32768, 32768, {2, 2}, &gen).to(DType::Int16)},
      {"i8", randint(-128, 128, {5}, &gen).to(DType::Int8)},
      {"u8", randint(0, 256, {3, 1}, &gen).to(DType::UInt8)},
      {"bool", gt(randn({7}, DType::Float32, &gen), 0.0)},
      {"scalar", scalar_tensor(-2.5, DType::Float64)},
      {"empty", zeros({0, 4}, DType::Float32)},
      {"transposed view", randn({3, 2}, DType::Float32, &gen).t()},
      {"blocks.0.ünïcode", ones({2}, DType::Float32)},
      // The 16-bit floats: random values, and the edges of float16 (largest, smallest
      // subnormal, infinity, NaN) that a reader must decode bit for bit.
      {"f16", randn({2, 3}, DType::Float32, &gen).to(DType::Float16)},
      {"bf16", (randn({5}, DType::Float32, &gen) * 1e30).to(DType::BFloat16)},
      {"f16 edges", tensor({65504.0, 0x1p-24, -0x1p-14, INFINITY, NAN}).to(DType::Float16)},
      {"bf16 edges", tensor({0x1p-133, -3e38, -INFINITY, NAN}).to(DType::BFloat16)},
  };
  const io::Metadata meta = {{"format", "pt"}, {"note", "a \"quoted\"\nline"}};
  const std::string file = dir.file("tensors.safetensors");
  io::save_safetensors(file, tensors, meta);
  expect_python_reads(dir, file, tensors, meta);
}

// A real checkpoint: a small GPT and its AdamW state after one step.
TEST(SafetensorsPython, ReadsAGptCheckpointWithOptimizerState) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed (scripts/install-deps.sh adds it)";
  TempDir dir;
  Generator gen(0);
  nn::GPT model(nn::GPTConfig{32, 8, 16, 2, 1, 0.0}, &gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  Tensor idx = randint(0, 32, {2, 8}, &gen);
  model.loss(idx, idx).backward();
  opt.step();
  const io::NamedTensors params = model.named_parameters();
  const io::Metadata meta = {{"step", "1"}};
  const std::string file = dir.file("checkpoint.safetensors");
  io::save_checkpoint(file, params, &opt, meta);

  io::NamedTensors all = params;
  for (const auto& [name, t] : opt.state_dict()) all.emplace_back("optim." + name, t);
  expect_python_reads(dir, file, all, meta);
}
