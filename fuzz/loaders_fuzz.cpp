// libFuzzer target for the file loaders: the input is the bytes of a file, handed to
// io::load_safetensors, then (when that accepts it) round-tripped through save_safetensors, and
// given to io::load_checkpoint (into a model's parameters and an Adam or SGD optimizer) and to
// the trainer's Trainer::resume and load_model (tools/gpt_trainer.cpp), which read metadata.
// Every adjoint::Error is an accepted answer; any other exception, sanitizer report or
// mismatch is a finding. Seeds: fuzz/corpus/loaders (fuzz_seeds writes them).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "adjoint/optim.h"
#include "fuzz_util.h"
#include "gpt_trainer.h"
#include "loaders_config.h"

namespace {

using namespace adjoint;
using adjoint::fuzz::finding;
using adjoint::fuzz::InputFile;
using adjoint::fuzz::run_expecting_errors;

// save_safetensors writes a temporary file beside its target and renames it: a real directory
// (tmpfs when there is one), private to this process, removed at exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    namespace fs = std::filesystem;
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = base / ("adjoint-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    path = d.string();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0);
}

// What the loader promises for any file it accepts; then save + load gives it back exactly.
void check_loaded(const io::SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors) {
    ADJOINT_FUZZ_CHECK(t.defined() && t.is_contiguous());
    ADJOINT_FUZZ_CHECK(t.nbytes() == static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
    if (t.dtype() == DType::Bool) {
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) ADJOINT_FUZZ_CHECK(p[i] <= 1);
    }
  }
  const std::string path = scratch_dir() + "/roundtrip.safetensors";
  bool saved = run_expecting_errors([&] { io::save_safetensors(path, f.tensors, f.metadata); });
  if (!saved) return;  // e.g. a tensor named "__metadata__"... (rejected on save only)
  io::SafetensorsFile back;
  if (!run_expecting_errors([&] { back = io::load_safetensors(path); }))
    finding("load_safetensors rejects what save_safetensors wrote");
  ADJOINT_FUZZ_CHECK(back.metadata == f.metadata);
  ADJOINT_FUZZ_CHECK(back.tensors.size() == f.tensors.size());
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    ADJOINT_FUZZ_CHECK(back.tensors[i].first == f.tensors[i].first);
    ADJOINT_FUZZ_CHECK(same_bytes(back.tensors[i].second, f.tensors[i].second));
  }
}

// load_checkpoint into the parameters of fuzz::loaders_params() and an optimizer over them.
void load_into_params(const std::string& path, bool adam, bool strict) {
  io::NamedTensors params = fuzz::loaders_params();
  std::vector<Tensor> plist;
  for (auto& [n, t] : params) plist.push_back(t);
  std::unique_ptr<optim::Optimizer> opt;
  if (adam) {
    opt = std::make_unique<optim::Adam>(plist);
  } else {
    opt = std::make_unique<optim::SGD>(plist, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  run_expecting_errors([&] { io::load_checkpoint(path, params, opt.get(), strict); });
  run_expecting_errors([&] { io::load_checkpoint(path, params, nullptr, strict); });
}

// The trainer's metadata parsing, known to throw std::invalid_argument / out_of_range for
// data_gen fields that are not numbers (std::stoull in Trainer::resume); see Note in
// docs/fuzzing.md. With ADJOINT_FUZZ_AVOID_KNOWN, such files skip resume.
bool stoull_safe(const io::Metadata& m) {
  for (const char* key : {"data_gen.s0", "data_gen.s1", "data_gen.seed"}) {
    auto it = m.find(key);
    if (it == m.end()) continue;
    const std::string& v = it->second;
    if (v.empty() || v.size() > 19) return false;
    for (char c : v)
      if (c < '0' || c > '9') return false;
  }
  return true;
}

// load_model builds an nn::GPT of the size its metadata asks for: sizes past a small bound
// would only measure the allocator, so they are not tried (small, zero and negative are).
bool model_small(const io::Metadata& m) {
  for (const char* key : {"vocab", "context", "d_model", "heads", "layers"}) {
    auto it = m.find(key);
    if (it == m.end()) continue;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (errno == 0 && end != it->second.c_str() && (v > 64 || v < -64)) return false;
  }
  return true;
}

void fuzz_trainer(const std::string& path, const io::Metadata& metadata) {
  static const data::ByteDataset data(std::vector<uint8_t>(64, 1), 0.5);
  if (!fuzz::avoid("trainer-stoull") || stoull_safe(metadata)) {
    tools::Trainer trainer(fuzz::loaders_trainer_config(), data);
    run_expecting_errors([&] { trainer.resume(path); });
  }
  if (model_small(metadata)) run_expecting_errors([&] { tools::load_model(path); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  adjoint::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static InputFile input("adjoint-fuzz-input");
  input.set(data, size);
  io::SafetensorsFile file;
  if (!run_expecting_errors([&] { file = io::load_safetensors(input.path); })) return 0;
  check_loaded(file);
  for (bool strict : {true, false}) {
    load_into_params(input.path, /*adam=*/true, strict);
    load_into_params(input.path, /*adam=*/false, strict);
  }
  fuzz_trainer(input.path, file.metadata);
  return 0;
}
