// The name of the op running on this thread, for errors raised far below it: a tensor too
// large to describe or to allocate is found in core (make_empty, TensorImpl), which cannot
// know which op asked. Reading it costs nothing until an error is thrown; setting it is two
// thread-local stores per op (see Note [Current op]).
#pragma once

namespace adjoint {

// Note [Current op]
// An OpScope names the op for everything it calls; scopes nest and the innermost wins, so an
// op written with other ops reports the one that failed. apply<Op> is the natural owner of
// the scope (one per op, whatever the op), and factories that run outside apply (zeros, full,
// arange, ...) open their own. Errors read current_op(fallback): the fallback names the
// component when no op is running (a kernel called directly, Tensor::fill_).
extern constinit thread_local const char* tls_current_op;

namespace detail {

class OpScope {
 public:
  explicit OpScope(const char* op) : prev_(tls_current_op) { tls_current_op = op; }
  ~OpScope() { tls_current_op = prev_; }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* prev_;
};

inline const char* current_op(const char* fallback) {
  return tls_current_op ? tls_current_op : fallback;
}

}  // namespace detail
}  // namespace adjoint
