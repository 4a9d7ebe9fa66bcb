// Anomaly mode's internals (include/adjoint/anomaly.h): the creation site a node keeps, the
// module scopes nn::Module pushes, and the checks the engine and apply<Op> run while it is on.
// See Note [Anomaly mode] in anomaly.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/autograd.h"

namespace adjoint::detail {

/// The bits of ModeState::anomaly (zero: off).
enum AnomalyBits : uint8_t {
  kAnomalyOn = 1,            // record creation sites
  kAnomalyCheckNan = 2,      // backward checks node outputs
  kAnomalyCheckForward = 4,  // forward checks op outputs
};

/// Where a node's forward op was called, kept on the node while anomaly mode recorded it.
struct CreationSite {
  std::string op;             ///< the forward op, e.g. "log"
  std::string module_path;    ///< the innermost module being called ("blocks.2.attn"), or ""
  std::vector<void*> frames;  ///< return addresses, symbolized only when an error needs them
  /// "`log` called at tests/x.cpp:42 (in f()) in module blocks.2.attn".
  std::string describe() const;
};

/// Captures the current call site into `node` (when tls_mode.anomaly is set).
void note_creation(Node& node, const char* op);

/// For the engine's errors about `node`: its creation site when anomaly mode recorded it,
/// else the advice to turn anomaly mode on. Starts with "; ".
std::string creation_hint(const Node* node);

/// Throws if a gradient `node` returned holds a NaN or an infinity (backward, check_nan).
void check_node_gradients(const Node& node, const TensorList& grads);

/// Throws if `out` holds a NaN while no input did (forward, check_forward).
void check_forward_output(const char* op, const Tensor* inputs, std::size_t n, const Tensor& out);

/// The dotted path of the module `nn::Module::operator()` is running on this thread while
/// anomaly mode is on, innermost last (pushed and popped by ModuleScope).
class ModuleScope {
 public:
  explicit ModuleScope(std::string path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
};

}  // namespace adjoint::detail
