// What code below the dispatch stack makes that a transform must hear of: memory and random
// generators. See Note [Things made below the stack].
#pragma once

namespace adjoint {
class StorageImpl;
class Generator;
}  // namespace adjoint

namespace adjoint::detail {

// Note [Things made below the stack]
// Storage is allocated by kernels, factories and code that is no op at all (a copy into a
// fresh tensor, a checkpoint read), and generators are made and seeded by user code: none of
// it passes the dispatch stack, yet compile's tracer must know of it (a tensor whose memory was
// made while tracing by code it did not see is no constant; a generator made inside the
// function draws the same at every call). So storage and generators tell the thread's watcher,
// when one is installed, and know nothing of what it does: the tracer installs itself while
// it traces (src/compile/trace.cpp) and decides there what each event means to it (a paused
// trace still counts memory, and ignores generators).
class MadeWatcher {
 public:
  virtual void storage_made(const StorageImpl* s) = 0;
  virtual void generator_made(const Generator* gen) = 0;
  /// A generator was seeded or had its state set.
  virtual void generator_reseeded(const Generator* gen) = 0;

 protected:
  ~MadeWatcher() = default;
};

/// The thread's watcher (null when none is installed).
extern constinit thread_local MadeWatcher* tls_made_watcher;

inline void note_storage_made(const StorageImpl* s) {
  if (tls_made_watcher) [[unlikely]]
    tls_made_watcher->storage_made(s);
}
inline void note_generator_made(const Generator* gen) {
  if (tls_made_watcher) [[unlikely]]
    tls_made_watcher->generator_made(gen);
}
inline void note_generator_reseeded(const Generator* gen) {
  if (tls_made_watcher) [[unlikely]]
    tls_made_watcher->generator_reseeded(gen);
}

}  // namespace adjoint::detail
