// libFuzzer target for import_function: the input is the bytes of a file, imported; when that
// succeeds, the function is called on inputs of the signature it records (floating inputs
// with small values, integer ones 0, a valid class index) and backward runs from the sum of
// its floating outputs. Every adjoint::Error is an accepted answer; any other exception, a
// sanitizer report or an internal error is a finding. Seeds: fuzz/corpus/import (exported
// functions, written by fuzz_seeds).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "fuzz_util.h"

namespace {

using namespace adjoint;
using adjoint::fuzz::finding;
using adjoint::fuzz::InputFile;
using adjoint::fuzz::run_expecting_errors;

// A file the importer accepts may still describe tensors of gigabytes, consistently: running
// it would be the harness's own out-of-memory, not a bug. Calls run only when every value
// the graph records fits in 64 MB together (read from the graph's JSON the importer accepted).
bool small_enough(const io::SafetensorsFile& file) {
  constexpr double kBudget = 64.0 * (1 << 20);
  const auto graph = file.metadata.find("adjoint.graph");
  if (graph == file.metadata.end()) return false;
  const nlohmann::json j = nlohmann::json::parse(graph->second, nullptr, false);
  if (j.is_discarded() || !j.contains("values")) return false;
  double bytes = 0;
  try {
    for (const nlohmann::json& v : j.at("values")) {
      double numel = 1;
      for (const nlohmann::json& d : v.at(3)) numel *= d.get<double>();
      bytes += numel * 8;
    }
  } catch (const nlohmann::json::exception&) {
    return false;  // (the importer refuses such a file first)
  }
  return bytes <= kBudget;
}

Tensor input_like(const Shape& shape, DType dtype, bool requires_grad) {
  if (!is_floating(dtype)) return zeros(shape, dtype);
  // Values in [-1, 1], different per element, in the input's dtype.
  Tensor x = (arange(shape.numel(), DType::Float64) * 0.37).sin().reshape(shape).to(dtype);
  return requires_grad ? x.requires_grad_(true) : x;
}

void call_and_backward(const ImportedFunction& f) {
  const std::vector<Shape> shapes = f.input_shapes();
  const std::vector<DType> dtypes = f.input_dtypes();
  const std::vector<bool> grads = f.input_requires_grad();
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    in.push_back(input_like(shapes[i], dtypes[i], grads[i]));
  const std::vector<Tensor> out = f(in);
  Tensor total;
  for (const Tensor& o : out) {
    if (!o.defined() || !is_floating(o.dtype()) || !o.requires_grad()) continue;
    const Tensor s = o.sum().to(DType::Float64);
    total = total.defined() ? total + s : s;
  }
  if (total.defined()) total.backward();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static InputFile input("adjoint-fuzz-import");
  input.set(data, size);
  std::optional<ImportedFunction> f;
  if (!run_expecting_errors([&] { f.emplace(import_function(input.path)); })) return 0;
  io::SafetensorsFile file;
  if (!run_expecting_errors([&] { file = io::load_safetensors(input.path); })) {
    finding("import_function accepted a file load_safetensors refuses");
  }
  if (!small_enough(file)) return 0;
  run_expecting_errors([&] { call_and_backward(*f); });
  return 0;
}
