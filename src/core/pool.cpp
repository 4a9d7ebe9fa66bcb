// The free lists behind PoolAllocator: one per size class per thread.
#include "core/pool.h"

namespace adjoint::detail {
namespace {

struct Block {
  Block* next;
};

struct FreeLists {
  Block* head[kPoolClasses] = {};
  std::size_t count[kPoolClasses] = {};
  bool dead = false;  // set at thread exit: later frees go straight to the system
  ~FreeLists() {
    dead = true;
    for (std::size_t c = 0; c < kPoolClasses; ++c) {
      while (head[c]) {
        Block* b = head[c];
        head[c] = b->next;
        ::operator delete(b);
      }
    }
  }
};

thread_local FreeLists lists;

}  // namespace

void* pool_allocate(std::size_t cls) {
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
