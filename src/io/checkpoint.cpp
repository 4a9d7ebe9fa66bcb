// save_checkpoint / load_checkpoint: parameters under their own names and an optimizer's
// state_dict under "optim.", in one safetensors file; loading checks everything before it
// copies into the existing tensors, so a bad file leaves model and optimizer untouched. Also
// remove_stale_temporaries, which save_checkpoint runs first.
#include "adjoint/io/checkpoint.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"

namespace adjoint::io {
namespace {

bool has_prefix(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The pid in `name` when it is exactly `prefix` + "<pid>.<n>" (both decimal), the name the
// atomic writers give their temporaries (safetensors_write.cpp, text_file.cpp). Anything else,
// another target's temporaries and files that merely look similar, gives nullopt.
std::optional<long long> temporary_owner(std::string_view name, std::string_view prefix) {
  if (!has_prefix(name, prefix)) return std::nullopt;
  const std::string_view rest = name.substr(prefix.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == rest.size()) return std::nullopt;
  auto all_digits = [](std::string_view s) {
    return s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (!all_digits(rest.substr(0, dot)) || !all_digits(rest.substr(dot + 1))) return std::nullopt;
  long long pid = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + dot, pid);
  // pid 0 and negative pids would make kill() address process groups: never "stale".
  if (ec != std::errc() || end != rest.data() + dot || pid <= 0 || pid > INT_MAX)
    return std::nullopt;
  return pid;
}

}  // namespace

std::size_t remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  std::vector<fs::path> stale;  // collected first: no removal while the directory is read
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<long long> pid = temporary_owner(it->path().filename().string(), prefix);
    // Our own pid: a save in progress on another thread of this process. kill(pid, 0) fails
    // with ESRCH only when no such process exists; EPERM means it lives under another user.
    if (!pid || *pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(*pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code type_ec;
    if (fs::is_regular_file(it->symlink_status(type_ec))) stale.push_back(it->path());
  }
  std::size_t removed = 0;
  for (const fs::path& p : stale) {
    std::error_code remove_ec;
    if (fs::remove(p, remove_ec)) ++removed;
  }
  return removed;
}

void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::Optimizer* optimizer, const Metadata& metadata) {
  save_checkpoint(path, params, optimizer ? optimizer->state_dict() : optim::StateDict{}, metadata);
}

void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::StateDict& optimizer_state, const Metadata& metadata) {
  constexpr const char* kOp = "io.save_checkpoint";
  NamedTensors all;
  all.reserve(params.size() + optimizer_state.size());
  for (const auto& [name, t] : params) {
    ADJOINT_CHECK(optimizer_state.empty() || !has_prefix(name, kOptimizerPrefix), Value, kOp, "'",
                  path, "': the parameter name '", name,
                  "' would clash with the optimizer's entries (", kOptimizerPrefix, "*)");
    all.emplace_back(name, t);
  }
  for (const auto& [name, t] : optimizer_state) all.emplace_back(kOptimizerPrefix + name, t);
  // A process killed while saving leaves its temporary (megabytes for a model) behind: the
  // next save of the same target is the natural place to drop it.
  remove_stale_temporaries(path);
  save_safetensors(path, all, metadata);
}

optim::StateDict optimizer_state_of(const SafetensorsFile& file) {
  optim::StateDict state;
  const std::string prefix = kOptimizerPrefix;
  for (const auto& [name, t] : file.tensors)
    if (has_prefix(name, kOptimizerPrefix)) state.emplace_back(name.substr(prefix.size()), t);
  return state;
}

Metadata load_checkpoint(const std::string& path, const NamedTensors& params,
                         optim::Optimizer* optimizer, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  load_checkpoint(file, path, params, optimizer, strict);
  return std::move(file.metadata);
}

void load_checkpoint(const SafetensorsFile& file, const std::string& path,
                     const NamedTensors& params, optim::Optimizer* optimizer, bool strict) {
  constexpr const char* kOp = "io.load_checkpoint";
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors)
    if (!has_prefix(name, kOptimizerPrefix)) by_name[name] = &t;
  const optim::StateDict optimizer_state = optimizer_state_of(file);

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
}

}  // namespace adjoint::io
