// save_checkpoint / load_checkpoint: parameters under their own names and an optimizer's
// state_dict under "optim.", in one safetensors file; loading checks everything before it
// copies into the existing tensors, so a bad file leaves model and optimizer untouched.
#include "adjoint/io/checkpoint.h"

#include <map>
#include <string_view>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"

namespace adjoint::io {
namespace {

bool has_prefix(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::Optimizer* optimizer, const Metadata& metadata) {
  constexpr const char* kOp = "io.save_checkpoint";
  NamedTensors all;
  all.reserve(params.size());
  for (const auto& [name, t] : params) {
    ADJOINT_CHECK(!(optimizer && has_prefix(name, kOptimizerPrefix)), Value, kOp, "'", path,
                  "': the parameter name '", name, "' would clash with the optimizer's entries (",
                  kOptimizerPrefix, "*)");
    all.emplace_back(name, t);
  }
  if (optimizer)
    for (auto& [name, t] : optimizer->state_dict()) all.emplace_back(kOptimizerPrefix + name, t);
  save_safetensors(path, all, metadata);
}

Metadata load_checkpoint(const std::string& path, const NamedTensors& params,
                         optim::Optimizer* optimizer, bool strict) {
  constexpr const char* kOp = "io.load_checkpoint";
  SafetensorsFile file = load_safetensors(path);
  std::map<std::string, const Tensor*> by_name;
  optim::StateDict optimizer_state;
  for (const auto& [name, t] : file.tensors) {
    if (has_prefix(name, kOptimizerPrefix)) {
      optimizer_state.emplace_back(name.substr(std::string_view(kOptimizerPrefix).size()), t);
    } else {
      by_name[name] = &t;
    }
  }

  // Check every parameter before touching any.
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (const auto& [name, p] : params) {
    ADJOINT_CHECK(p.defined(), Value, kOp, "'", path, "': parameter '", name, "' is undefined");
    auto it = by_name.find(name);
    ADJOINT_CHECK(it != by_name.end(), Value, kOp, "'", path, "': parameter '", name,
                  "' is not in the checkpoint");
    const Tensor& src = *it->second;
    ADJOINT_CHECK(src.shape() == p.shape() && src.dtype() == p.dtype(), Shape, kOp, "'", path,
                  "': '", name, "' is ", describe(src), " in the checkpoint but the parameter is ",
                  describe(p));
    copies.emplace_back(p, &src);
    by_name.erase(it);
  }
  if (strict && !by_name.empty())
    throw Error(ErrorKind::Value, kOp,
                "'" + path + "': the checkpoint holds '" + by_name.begin()->first +
                    "', which is not one of the given parameters (" +
                    std::to_string(by_name.size()) +
                    " unexpected in all; pass strict = false to "
                    "ignore them)");
  if (optimizer) {
    ADJOINT_CHECK(!optimizer_state.empty(), Value, kOp, "'", path,
                  "': the checkpoint has no optimizer state (no ", kOptimizerPrefix, "* entries)");
    optimizer->load_state_dict(optimizer_state);  // validates fully before changing anything
  }
  NoGradGuard no_grad;
  for (auto& [p, src] : copies) p.copy_(*src);
  return file.metadata;
}

}  // namespace adjoint::io
