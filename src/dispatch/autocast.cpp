// Autocast guards, the input conversions of the policies and the per-guard cast cache.
#include "dispatch/autocast.h"

#include <unordered_map>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/tensor_impl.h"
#include "dispatch/op_cache.h"

namespace adjoint {
namespace {

// Note [The autocast cast cache]
// A parameter used by several matmuls in one forward (tied embeddings, a weight shared across
// steps of a loop) is cast to the low dtype once: the first cast is kept, keyed by the
// parameter's impl, and reused while its version is unchanged (an in-place update inside the
// guard makes a fresh cast) and while grad mode is what it was (a cast made under no_grad has
// no history and must not reach a graph). Only float32 leaves that require grad are cached, as
// in PyTorch: their casts are recorded, so every use sends its gradient back through the one
// cast node into the float32 .grad. A leaf sharing its storage with another tensor (made by
// detach().requires_grad_(), a common way to make a parameter) is cached too: PyTorch's "not a
// view" excludes differentiable views, which are never leaves here, and the version checked is
// the storage's, which a write through any alias bumps. The cache holds the parameter itself
// too, so its key cannot be reused by another tensor while the entry lives; it is cleared when the
// outermost guard ends. Inside a checkpointed region nothing is cached, so the recomputation runs
// the same casts as the first run.
struct CachedCast {
  Tensor source;  // keeps the key's impl alive
  Tensor cast;
  uint64_t version;
  bool recorded;
};

struct AutocastThreadState {
  int nesting = 0;  // guards alive, enabled or not
  bool cache_enabled = true;
  std::unordered_map<const TensorImpl*, CachedCast> cache;
};

thread_local AutocastThreadState tls_autocast;

DType low_dtype(uint8_t state) { return static_cast<DType>(state - 1); }

bool cacheable(const Tensor& x) {
  return tls_autocast.cache_enabled && detail::tls_op_cache == nullptr && x.is_leaf() &&
         x.requires_grad();
}

Tensor cast_cached(const Tensor& x, DType to) {
  if (!cacheable(x)) return x.to(to);
  const bool recorded = is_grad_enabled();
  auto it = tls_autocast.cache.find(x.impl());
  if (it != tls_autocast.cache.end() && it->second.version == x.version() &&
      it->second.recorded == recorded && it->second.cast.dtype() == to)
    return it->second.cast;
  Tensor cast = x.to(to);
  tls_autocast.cache[x.impl()] = CachedCast{x, cast, x.version(), recorded};
  return cast;
}

}  // namespace

Autocast::Autocast(DType dtype, bool enabled, bool cache_casts)
    : prev_state_(tls_mode.autocast), prev_cache_(tls_autocast.cache_enabled) {
  ADJOINT_CHECK(is_reduced_float(dtype), DType, "Autocast",
                "autocasts to float16 or bfloat16, got ", dtype);
  set_autocast_state(enabled ? static_cast<uint8_t>(1 + static_cast<uint8_t>(dtype)) : 0);
  tls_autocast.cache_enabled = cache_casts;
  ++tls_autocast.nesting;
}

Autocast::~Autocast() {
  set_autocast_state(prev_state_);
  tls_autocast.cache_enabled = prev_cache_;
  if (--tls_autocast.nesting == 0) tls_autocast.cache.clear();
}

bool is_autocast_enabled() { return tls_mode.autocast != 0; }

DType autocast_dtype() {
  return tls_mode.autocast != 0 ? low_dtype(tls_mode.autocast) : DType::BFloat16;
}

std::size_t autocast_cache_size() { return tls_autocast.cache.size(); }

namespace detail {

DType autocast_target(DType d, AutocastPolicy policy) {
  if (tls_mode.autocast == 0) return d;
  switch (policy) {
    case AutocastPolicy::Lower:
      // float64 stays float64, as in PyTorch: autocast is for float32 programs.
      return d == DType::Float32 ? low_dtype(tls_mode.autocast) : d;
    case AutocastPolicy::Float32:
      return is_reduced_float(d) ? DType::Float32 : d;
    case AutocastPolicy::Follow:
      break;
  }
  return d;
}

Tensor autocast_input(const Tensor& x, AutocastPolicy policy) {
  if (!x.defined() || tls_mode.autocast == 0) return x;
  const DType to = autocast_target(x.dtype(), policy);
  if (to == x.dtype()) return x;
  return policy == AutocastPolicy::Lower ? cast_cached(x, to) : x.to(to);
}

}  // namespace detail
}  // namespace adjoint
