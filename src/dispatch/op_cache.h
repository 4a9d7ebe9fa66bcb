// What checkpointed regions (src/checkpoint) see of each op: the OpCache layer of the
// dispatch stack (src/dispatch/layers.cpp), on while a region runs, reports every op before it
// runs and after, so the region can log the op sequence (a recomputation must repeat it) and,
// under a selective policy, keep an op's result in forward and hand it back instead of running
// the op again in the recomputation. See Note [Op log] in src/checkpoint/region.h.
#pragma once

#include <any>
#include <optional>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"
#include "core/mode_state.h"

namespace adjoint::detail {

/// An op's result as a region keeps it: the output, the extra tensors its forward saved
/// (layer_norm's mean and rstd), and a copy of the op struct (forward may set its members).
struct KeptOpResult {
  Tensor output;
  std::vector<Tensor> extras;
  std::any op;
};

class OpCache {
 public:
  virtual ~OpCache() = default;
  /// Before an op runs. A result means: use it instead of running the op.
  virtual std::optional<KeptOpResult> before_op(const char* op) = 0;
  /// After an op ran (when before_op gave nothing): whether to keep its result.
  virtual bool after_op(const char* op, const Tensor& output) = 0;
  /// The result of the op after_op just asked to keep.
  virtual void keep_op(KeptOpResult result) = 0;
};

/// The innermost checkpointed region running on this thread, or null.
extern constinit thread_local OpCache* tls_op_cache;

/// Installs a region as the thread's op cache (or, given null, hides the enclosing one) for a
/// scope.
class OpCacheScope {
 public:
  explicit OpCacheScope(OpCache* cache) : prev_(tls_op_cache) { set(cache); }
  ~OpCacheScope() { set(prev_); }
  OpCacheScope(const OpCacheScope&) = delete;
  OpCacheScope& operator=(const OpCacheScope&) = delete;

 private:
  static void set(OpCache* cache) {
    tls_op_cache = cache;
    set_layer_active(Layer::OpCache, cache != nullptr);
  }
  OpCache* prev_;
};

}  // namespace adjoint::detail
