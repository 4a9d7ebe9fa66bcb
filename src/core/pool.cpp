// The free lists behind PoolAllocator: one per size class per thread.
#include "adjoint/detail/pool.h"

namespace adjoint::detail {
namespace {

struct Block {
  Block* next;
};

// Trivially destructible, so reaching it needs no thread-local init guard on the hot path;
// a separate guard object, made on a thread's first allocation, drains it at thread exit.
struct FreeLists {
  Block* head[kPoolClasses];
  std::size_t count[kPoolClasses];
  bool dead;        // the thread is exiting: frees go straight to the system
  bool registered;  // the drain guard exists
};

thread_local constinit FreeLists lists{};

struct DrainAtExit {
  ~DrainAtExit() {
    lists.dead = true;
    for (std::size_t c = 0; c < kPoolClasses; ++c) {
      while (Block* b = lists.head[c]) {
        lists.head[c] = b->next;
        ::operator delete(b);
      }
      lists.count[c] = 0;
    }
  }
};

void register_drain() {
  thread_local DrainAtExit drain;
  lists.registered = true;
}

}  // namespace

void* pool_allocate(std::size_t cls) {
  if (!lists.registered) [[unlikely]]
    register_drain();
  if (Block* b = lists.head[cls]) {
    lists.head[cls] = b->next;
    --lists.count[cls];
    return b;
  }
  return ::operator new(cls* kPoolGranule);
}

void pool_deallocate(void* p, std::size_t cls) {
  if (lists.dead || lists.count[cls] >= kPoolCap) {
    ::operator delete(p);
    return;
  }
  Block* b = static_cast<Block*>(p);
  b->next = lists.head[cls];
  lists.head[cls] = b;
  ++lists.count[cls];
}

}  // namespace adjoint::detail
