// Writes the seed corpora of the fuzz targets: fuzz_seeds DIR makes DIR/loaders (small
// safetensors files of every dtype the reader takes, with metadata, checkpoints with Adam and
// SGD state, a trainer checkpoint) and DIR/ops (op programs, one per family of ops and per
// mode). fuzz/corpus/ holds its output; rerun it after changing ops_program.h.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "adjoint/optim.h"
#include "gpt_trainer.h"
#include "loaders_config.h"
#include "ops_program.h"

namespace {

using namespace adjoint;
using namespace adjoint::fuzz;
namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file by hand, for the dtypes save_safetensors never writes: `header` is the
// JSON text (padded here to a multiple of 8), `data` the bytes after it.
std::string raw_safetensors(std::string header, const std::string& data) {
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string one_tensor(const char* dtype, const std::string& shape, const std::string& data) {
  return raw_safetensors(
      std::string("{\"__metadata__\":{\"source\":\"fuzz_seeds\"},\"t\":{\"dtype\":\"") + dtype +
          "\",\"shape\":" + shape + ",\"data_offsets\":[0," + std::to_string(data.size()) + "]}}",
      data);
}

void loader_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string p = dir.string() + "/";
  // The four dtypes adjoint writes, with metadata, a 0-d and an empty tensor.
  io::save_safetensors(p + "native.safetensors",
                       {{"f64", tensor({1.5, -2, 1e300}, TensorOptions(DType::Float64))},
                        {"f32", tensor({0.5, -1, 2, 3}, Shape{2, 2})},
                        {"i64", tensor(std::vector<int64_t>{-1, 0, 7})},
                        {"bool", tensor(std::vector<bool>{true, false})},
                        {"scalar", scalar_tensor(3.25)},
                        {"empty", zeros(Shape{0, 3})}},
                       {{"format", "pt"}, {"note", "seed"}});
  io::save_safetensors(p + "metadata_only.safetensors", {}, {{"k", "v"}});
  write_file(dir / "empty_header.safetensors", raw_safetensors("{}", ""));
  // The dtypes the reader widens (half floats with inf, NaN and a subnormal).
  write_file(
      dir / "f16.safetensors",
      one_tensor("F16", "[2,2]", bytes_of(std::vector<uint16_t>{0x3c00, 0x7c00, 0x7e00, 0x0001})));
  write_file(dir / "bf16.safetensors",
             one_tensor("BF16", "[3]", bytes_of(std::vector<uint16_t>{0x3f80, 0xff80, 0x0001})));
  write_file(dir / "i32.safetensors",
             one_tensor("I32", "[2]", bytes_of(std::vector<int32_t>{-2147483647 - 1, 5})));
  write_file(dir / "i16.safetensors",
             one_tensor("I16", "[1,2]", bytes_of(std::vector<int16_t>{-3, 32767})));
  write_file(dir / "i8.safetensors",
             one_tensor("I8", "[3]", bytes_of(std::vector<int8_t>{-128, 0, 127})));
  write_file(dir / "u8.safetensors", one_tensor("U8", "[]", bytes_of(std::vector<uint8_t>{255})));
  write_file(dir / "bool_bytes.safetensors",
             one_tensor("BOOL", "[3]", bytes_of(std::vector<uint8_t>{0, 1, 2})));
  // Regressions: inputs that once broke the loader (see tests/io/io_fuzz_regressions_test.cpp).
  write_file(dir / "regress_deep_nesting.safetensors",
             raw_safetensors(R"({"t":{"dtype":"F32","shape":)" + std::string(40, '[') +
                                 std::string(40, ']') + R"(,"data_offsets":[0,0]}})",
                             ""));
  // Checkpoints of the loader target's parameters, with Adam and with SGD state.
  {
    io::NamedTensors params = loaders_params();
    std::vector<Tensor> ps;
    for (auto& [n, t] : params) ps.push_back(t);
    optim::Adam adam(ps);
    for (const Tensor& t : ps) t.set_grad(ones_like(t));
    adam.step();
    io::save_checkpoint(p + "checkpoint_adam.safetensors", params, &adam, {{"epoch", "1"}});
    optim::SGD sgd(ps, {.lr = 0.1, .momentum = 0.9});
    sgd.step();
    io::save_checkpoint(p + "checkpoint_sgd.safetensors", params, &sgd);
  }
  // The trainer's checkpoint (model, AdamW state, step, data generator, configuration).
  {
    const data::ByteDataset data(std::vector<uint8_t>(64, 1), 0.5);
    tools::Trainer trainer(loaders_trainer_config(), data);
    trainer.train_step();
    trainer.save(p + "trainer.safetensors");
  }
}

// ---- op programs ----

struct In {
  DType dtype;
  bool requires_grad;
  int style;
  std::vector<int> dims;  // each 0..4
  uint8_t seed;
};

struct I {
  Op op;
  uint8_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0;
};

std::string program(uint8_t mode, uint8_t outputs, const std::vector<In>& inputs,
                    const std::vector<I>& ops) {
  std::string s;
  s += static_cast<char>(mode);
  s += static_cast<char>(outputs);
  s += static_cast<char>(inputs.size() - 1);
  for (const In& in : inputs) {
    const int dt = in.dtype == DType::Bool      ? 0
                   : in.dtype == DType::Int64   ? 1
                   : in.dtype == DType::Float32 ? 2
                                                : 3;
    s += static_cast<char>(dt | (in.requires_grad ? 4 : 0) | (in.style << 3) |
                           (static_cast<int>(in.dims.size()) << 5));
    uint16_t sizes = 0;
    for (std::size_t d = 0; d < in.dims.size(); ++d)
      sizes |= static_cast<uint16_t>(in.dims[d] << (4 * d));
    s += static_cast<char>(sizes & 0xff);
    s += static_cast<char>(sizes >> 8);
    s += static_cast<char>(in.seed);
  }
  for (const I& i : ops) {
    for (uint8_t b : {static_cast<uint8_t>(i.op), i.a0, i.a1, i.a2, i.a3, i.a4})
      s += static_cast<char>(b);
  }
  return s;
}

void op_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  int n = 0;
  auto put = [&](const char* name, uint8_t mode, uint8_t outputs, const std::vector<In>& inputs,
                 const std::vector<I>& ops) {
    char file[96];
    std::snprintf(file, sizeof file, "%02d_%s", n++, name);
    write_file(dir / file, program(mode, outputs, inputs, ops));
  };
  const uint8_t B = kModeBackward, BB = kModeBackward | kModeDoubleBackward;
  const In f23{DType::Float32, true, 1, {2, 3}, 1};
  const In d23{DType::Float64, true, 1, {2, 3}, 2};
  const In d3{DType::Float64, true, 1, {3}, 3};
  const In pos{DType::Float64, true, 3, {2, 2}, 4};
  const In i23{DType::Int64, false, 0, {2, 3}, 5};
  const In b23{DType::Bool, false, 0, {2, 3}, 6};
  const In d0{DType::Float64, true, 1, {}, 7};
  const In e03{DType::Float32, true, 1, {0, 3}, 8};
  const In d234{DType::Float64, true, 1, {2, 3, 4}, 9};

  put("unary", BB, 0, {d23},
      {{kExp}, {kTanh}, {kSigmoid}, {kSin}, {kSilu}, {kGelu, 0, 1}, {kSoftplus, 0, 1, 9}, {kErf}});
  put("unary_domain", BB, 0, {pos},
      {{kLog}, {kNeg}, {kExp}, {kSqrt}, {kRsqrt}, {kLog1p}, {kExpm1}, {kAbs}, {kSquare}});
  put("unary_pw", B, 1, {d23},
      {{kPowScalar, 0, 3},
       {kClamp, 0, 2, 1},
       {kLeakyRelu, 0, 26},
       {kRelu},
       {kSign},
       {kCos},
       {kTan}});
  put("binary_broadcast", BB, 0, {d23, d3},
      {{kAdd, 0, 1},
       {kMul, 0, 2},
       {kSub, 0, 1, 0x80, 3},
       {kDiv, 0, 3},
       {kMaximum, 0, 4},
       {kMinimum, 0, 2}});
  put("binary_fresh", B, 0, {f23},
      {{kBinaryFresh, 0, 0, 0x03, 0x80, 1},
       {kBinaryFresh, 0, 3, 0x40, 0x81, 2},
       {kScalarArith, 0, 7, 3},
       {kPow, 0, 1}});
  put("reductions", BB, 2, {d234},
      {{kSum, 0, 1},
       {kMean, 1, 1 | (1 << 2), 1},
       {kVar, 2, 2, 2},
       {kStd, 3, 0},
       {kProd, 4, 3},
       {kAmax, 5, 1},
       {kNorm, 6, 0, 0}});
  put("reductions_dim", B, 3, {d234},
      {{kMaxDim, 0, 1, 1},
       {kMinDim, 2, 2},
       {kArgmax, 3, 1, 2},
       {kLogsumexp, 4, 1},
       {kAmin, 5, 0},
       {kMaxAll, 6}});
  put("linalg", BB, 1, {d23, d3},
      {{kMatmulFresh, 1, 2, 5, 0x83},
       {kLinear, 1, 3, 1, 4, 5},
       {kDot, 2, 2},
       {kOuter, 3, 3},
       {kMatmul, 3, 4}});
  put("views", BB, 0, {d234},
      {{kReshape, 0, 2},
       {kReshape, 1, 1},
       {kPermute, 2, 1},
       {kTranspose, 3, 0, 2},
       {kSlice, 4, 1, 0x81, 0x83, 1},
       {kSelect, 5, 0, 5},
       {kNarrow, 6, 6, 2, 2},
       {kUnsqueeze, 7, 4},
       {kExpand, 0, 4, 2},
       {kSqueeze, 0, 1},
       {kFlatten, 0, 4, 8},
       {kT}});
  put("cat_split", B, 2, {d23, d23},
      {{kCat, 0, 1, 4, 1},
       {kStack, 1, 2, 5, 3, 3},
       {kSplit, 0, 1, 4},
       {kChunk, 1, 3, 5},
       {kSumTo, 2, 1, 1}});
  put("indexing", BB, 1, {d23},
      {{kIndexSelect, 0, 4, 3, 1},
       {kGather, 1, 5, 1, 2},
       {kScatterAdd, 2, 4, 0, 3, 4},
       {kIndexAdd, 3, 5, 2, 5, 6},
       {kMaskedFill, 0, 0, 1, 2},
       {kTril, 0, 4},
       {kTriu, 0, 2}});
  put("embedding", B, 0, {d23, i23}, {{kEmbedding, 1, 2, 2, 9}, {kOneHot, 1, 3}, {kSum, 1}});
  put("softmax", BB, 1, {d234},
      {{kSoftmax, 0, 8}, {kLogSoftmax, 1, 5}, {kMaskedSoftmax, 2, 8, 3, 7}});
  put("losses", B, 2, {d23, f23},
      {{kCrossEntropy, 1, 0, 1, 3},
       {kLogSoftmax, 2, 8},
       {kNllLoss, 0, 0, 0x12, 5, 6},
       {kMseLoss, 3, 0, 2, 0, 7},
       {kBceWithLogits, 4, 0, 1, 0, 8}});
  put("layer_norm", BB, 0, {d234},
      {{kLayerNorm, 0, 1, 3, 1, 2}, {kLayerNorm, 1, 2, 0}, {kDropout, 0, 1, 1}});
  put("inplace_clone", B, 1, {d23, d3},
      {{kInplaceScalar, 0, 0x80, 0, 3},
       {kInplaceTensor, 0, 0x81, 2, 2},
       {kInplaceClamp, 1, 0x80, 2, 3, 3},
       {kInplaceScalar, 0, 0x83, 4, 5},
       {kInplaceTensor, 2, 0x80, 4, 3}});
  put("inplace_leaf", B, 0, {d23, i23},
      {{kInplaceScalar, 1, 0, 0, 1},
       {kInplaceTensor, 1, 2, 4, 1},
       {kInplaceScalar, 0, 1, 2, 3},
       {kExp}});
  put("inplace_views", B, 1, {d234},
      {{kClone},
       {kInplaceScalar, 0, 1, 2, 4},
       {kInplaceScalar, 1, 2, 0, 1},
       {kInplaceClamp, 2, 3, 2, 3, 3},
       {kInplaceTensor, 3, 4, 4, 5},
       {kSum}});
  put("dtypes", B, 1, {i23, b23, d23},
      {{kTo, 2, 2},
       {kTo, 1, 1},
       {kCompare, 2, 4, 2},
       {kWhere, 1, 3, 5},
       {kLogical, 4, 5, 1},
       {kAdd, 1, 6},
       {kCompareScalar, 0, 3, 1},
       {kLogicalNot},
       {kMul, 7, 9}});
  put("int_bool_ops", 0, 2, {i23, b23},
      {{kNeg, 1},
       {kSum, 1},
       {kMaxAll, 2},
       {kArgmin, 3},
       {kDiv, 4, 5},
       {kScalarArith, 4, 2, 0x81},
       {kProd, 1}});
  put("empty_and_scalar", BB, 2, {e03, d0},
      {{kSum, 0, 1},
       {kMean, 1},
       {kExp, 1},
       {kAdd, 0, 2},
       {kSoftmax, 3, 8},
       {kMaxAll, 4},
       {kMatmulFresh, 4, 2, 2}});
  put("checkpoint", B | kModeCheckpoint | kModeCompare, 0, {d23, d3},
      {{kMul, 0, 1}, {kTanh}, {kMatmulFresh, 0, 2, 4}, {kSoftmax, 0, 8}, {kSum, 0, 1}});
  put("checkpoint_double", BB | kModeCheckpoint | kModeCompare, 1, {d23},
      {{kExp}, {kMul, 0, 1}, {kDropout, 0, 1, 1}, {kLayerNorm, 0, 1}, {kLogSoftmax, 0, 8}});
  put("checkpoint_inplace", B | kModeCheckpoint | kModeCompare, 0, {d23},
      {{kExp}, {kInplaceScalar, 0, 0, 2, 3}, {kInplaceScalar, 1, 0x80, 0, 1}, {kSum, 0}});
  put("dual", kModeDual | kModeJvpTransform, 1, {d23, d3},
      {{kMul, 0, 1}, {kExp}, {kSum, 0, 1}, {kSoftmax, 1, 8}, {kMatmulFresh, 0, 2, 3}});
  put("dual_backward", B | kModeDual, 0, {d23},
      {{kSin}, {kMul, 0, 1}, {kLogSoftmax, 0, 8}, {kVar, 0}});
  put("dual_views_inplace", kModeDual | kModeJvpTransform, 1, {d234},
      {{kClone},
       {kTranspose, 0, 0, 1},
       {kInplaceScalar, 0, 0x83, 2, 3},
       {kSlice, 0, 1, 0x80},
       {kNorm}});
  put("dual_checkpoint", B | kModeDual | kModeCheckpoint, 0, {d23},
      {{kTanh}, {kMul, 0, 1}, {kSum}});
  put("no_grad", B, kRunNoGrad << 4, {d23}, {{kExp}, {kSum}});
  put("inference", B, kRunInference << 4, {d23}, {{kExp}, {kInplaceScalar, 0, 0, 0, 1}, {kSum}});
  put("grad_mode_toggle", B, 0, {d23},
      {{kExp}, {kGradMode}, {kMul, 0, 1}, {kGradMode}, {kAdd, 0, 2}});
  put("mid_backward", B | kModeRetain, 0, {d23},
      {{kExp}, {kMidBackward, 0, 1}, {kMidBackward, 0, 0}, {kMul, 0, 1}, {kMidBackward, 0, 0}});
  put("hooks", B | kModeHooks, kOutputsAutogradGrad, {d23, d3},
      {{kMul, 0, 1}, {kHook, 0, 1}, {kRetainGrad}, {kExp}, {kHook, 0, 0}});
  put("autograd_grad_double", BB | kModeRetain, kOutputsAutogradGrad, {d23, d3},
      {{kMul, 0, 1}, {kTanh}, {kPowScalar, 0, 2}});
  put("factories", B, 2, {d23},
      {{kFactory, 0, 0, 3, 2, 1},
       {kFactory, 0, 3, 4, 1},
       {kFactory, 0, 5, 4, 3},
       {kFactory, 0, 6, 3, 3, 3},
       {kFactory, 0, 7, 2, 2},
       {kFactory, 0, 9, 3, 1, 4},
       {kFactory, 0, 2, 2, 0, 7},
       {kAdd, 0, 6}});
  put("compiled", BB, kOutputsCompile, {d23, d3},
      {{kMul, 0, 1}, {kTanh}, {kAdd, 0, 2}, {kSoftmax, 0, 8}, {kSum, 0, 1}});
  put("compiled_views_random", B, kOutputsCompile | 1, {d234},
      {{kTranspose, 0, 0, 1}, {kExp}, {kDropout, 0, 1, 1}, {kMul, 0, 1}, {kSum}});
  put("requires_grad", B, 0, {{DType::Float64, false, 1, {3}, 1}, i23},
      {{kRequiresGrad, 0, 1}, {kRequiresGrad, 1, 1}, {kExp, 1}, {kItem, 0}, {kPrint, 0}});
}

// Exported functions for the import target: an MLP (linear, gelu, permute, matmul, expand,
// cross_entropy) with its backward, reductions and views, softmax and layer norm, and one
// with dynamic sizes.
void import_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  Generator gen(7);
  auto param = [&](const Shape& s) {
    return (randn(s, DType::Float32, &gen) * 0.3).detach().requires_grad_(true);
  };
  const Tensor w1 = param({6, 4}), b1 = param({6}), w2 = param({3, 6}), b2 = param({3});
  const Tensor x = randn({5, 4}, DType::Float32, &gen).requires_grad_(true);
  const Tensor t = randint(0, 3, {5}, &gen);
  auto put = [&](const char* name, CompiledFunction f, const std::vector<Tensor>& in) {
    f(in);
    export_function(f, (dir / name).string());
  };
  put("mlp", compile([&](const std::vector<Tensor>& in) {
        const Tensor h = gelu(linear(in[0], w1, b1));
        const Tensor logits = matmul(w2, h.permute({1, 0})).permute({1, 0}) + b2.expand({5, 3});
        return std::vector<Tensor>{logits, cross_entropy(logits, in[1])};
      }),
      {x, t});
  put("views_reductions", compile([&](const std::vector<Tensor>& in) {
        const Tensor v = in[0].reshape({2, 10}).t().unsqueeze(0).squeeze(0);
        return std::vector<Tensor>{v.sum({0}), amax(v, {1}, true), in[0].transpose(0, 1).sum()};
      }),
      {x});
  put("softmax_layer_norm", compile([&](const std::vector<Tensor>& in) {
        const Tensor y = layer_norm(in[0], {4}, Tensor(), Tensor(), 1e-5);
        return std::vector<Tensor>{log_softmax(y, -1).sum(), softmax(in[0], 0).select(0, 1)};
      }),
      {x});
  CompileOptions dynamic;
  dynamic.dynamic = {{0, 0}};
  dynamic.warn = false;
  CompiledFunction family = compile(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{(tanh(linear(in[0], w1, b1)) * 2.0).sum({-1})};
      },
      dynamic);
  for (int64_t n : {3, 5}) family({randn({n, 4}, DType::Float32, &gen).requires_grad_(true)});
  export_function(family, (dir / "dynamic").string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR  (writes DIR/loaders, DIR/ops and DIR/import)\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  loader_seeds(dir / "loaders");
  op_seeds(dir / "ops");
  import_seeds(dir / "import");
  return 0;
}
