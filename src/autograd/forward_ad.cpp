// Forward mode: nestable dual levels and dual tensors. apply<Op> propagates tangents through
// each op's JVP rule while a level is visible; see Note [Nested dual levels] in forward_ad.h.
#include "autograd/forward_ad.h"

#include <atomic>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "autograd/apply.h"

namespace adjoint {
namespace {
std::atomic<uint64_t> next_level_id{1};

// What each open level (by stack index) wrote a tangent into; see Note [Closing a dual level].
struct LevelRecord {
  std::vector<std::weak_ptr<TensorImpl>> tensors;
  std::vector<std::weak_ptr<std::vector<TangentSlot>>> copies;
};
thread_local std::vector<LevelRecord> tls_records;

int stack_index_of(uint64_t level) {
  for (int i = tls_mode.dual_levels_open - 1; i >= 0; --i)
    if (tls_mode.dual_level_ids[i] == level) return i;
  return -1;
}

void erase_level(std::vector<TangentSlot>& slots, uint64_t level) {
  std::erase_if(slots, [level](const TangentSlot& s) { return s.level == level; });
}

// The innermost visible level (its stack index and id), for make_dual, unpack_dual and
// Tensor::tangent().
bool innermost_level(int& index, uint64_t& id) {
  if (tls_mode.dual_visible == 0) return false;
  index = 31 - __builtin_clz(tls_mode.dual_visible);
  id = tls_mode.dual_level_ids[index];
  return true;
}
}  // namespace

namespace detail {

void set_tangent(const Tensor& t, uint64_t level, Tensor value) {
  auto& slots = t.impl()->meta().tangents;
  for (TangentSlot& s : slots) {
    if (s.level == level) {
      s.value = std::move(value);
      return;
    }
  }
  slots.push_back({level, std::move(value)});
  const int index = stack_index_of(level);
  if (index >= 0) tls_records[index].tensors.push_back(t.impl_ptr());
}

void track_tangent_copy(const std::shared_ptr<std::vector<TangentSlot>>& slots) {
  for (const TangentSlot& s : *slots) {
    const int index = stack_index_of(s.level);
    if (index >= 0) tls_records[index].copies.push_back(slots);
  }
}

bool other_dual_on_storage(const Tensor& t, uint64_t level) {
  const TensorImpl* self = t.impl();
  // Only this handle's tensor holds the storage: nothing else can see its values.
  if (self->storage.use_count() <= 1) return false;
  const int index = stack_index_of(level);
  if (index < 0) return false;
  bool found = false;
  // Dead entries are dropped on the way, so repeated in-place ops in a long-lived level only
  // scan the tensors still alive.
  std::erase_if(tls_records[index].tensors, [&](const std::weak_ptr<TensorImpl>& weak) {
    std::shared_ptr<TensorImpl> impl = weak.lock();
    if (!impl) return true;
    if (impl.get() == self || impl->storage != self->storage || !impl->autograd) return false;
    for (const TangentSlot& slot : impl->autograd->tangents) found |= slot.level == level;
    return false;
  });
  return found;
}

void copy_tangents(const Tensor& from, const Tensor& to, uint32_t levels) {
  for (int i = 0; i < tls_mode.dual_levels_open; ++i) {
    if (!((levels >> i) & 1u)) continue;
    const uint64_t level = tls_mode.dual_level_ids[i];
    if (const Tensor* t = tangent_at(from, level)) set_tangent(to, level, *t);
  }
}

}  // namespace detail

// A new level is visible even inside a NoForwardGradGuard or a JVP rule, where the levels
// below it stay hidden: a function transform used there works on its own level.
DualLevel::DualLevel() {
  ADJOINT_CHECK(tls_mode.dual_levels_open < kMaxDualLevels, NotImplemented, "DualLevel",
                "dual levels nest at most ", kMaxDualLevels, " deep");
  id_ = next_level_id.fetch_add(1, std::memory_order_relaxed);
  const int index = tls_mode.dual_levels_open++;
  tls_mode.dual_level_ids[index] = id_;
  tls_mode.dual_visible |= 1u << index;
  if (tls_records.size() <= static_cast<std::size_t>(index)) tls_records.resize(index + 1);
}

DualLevel::~DualLevel() {
  const int index = --tls_mode.dual_levels_open;
  tls_mode.dual_visible &= ~(1u << index);
  // Move the record out first: dropping tangents may destroy tensors and nodes, whose
  // destructors must not see a half-cleared record.
  LevelRecord record = std::move(tls_records[index]);
  tls_records[index] = LevelRecord{};
  for (auto& weak : record.copies)
    if (auto slots = weak.lock()) erase_level(*slots, id_);
  for (auto& weak : record.tensors)
    if (auto impl = weak.lock())
      if (impl->autograd) erase_level(impl->autograd->tangents, id_);
}

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  int index = 0;
  uint64_t level = 0;
  ADJOINT_CHECK(innermost_level(index, level), Autograd, "make_dual",
                "make_dual needs an active DualLevel");
  ADJOINT_CHECK(primal.defined() && tangent.defined(), Value, "make_dual",
                "primal and tangent must be defined");
  ADJOINT_CHECK(is_floating(primal.dtype()), DType, "make_dual",
                "only floating tensors can carry tangents, got ", describe(primal));
  ADJOINT_CHECK(primal.shape() == tangent.shape(), Shape, "make_dual", "tangent ",
                describe(tangent), " does not match primal ", describe(primal));
  ADJOINT_CHECK(primal.dtype() == tangent.dtype(), DType, "make_dual", "tangent ",
                describe(tangent), " does not match primal ", describe(primal));
  // As in PyTorch: replacing the tangent would either change the input (which other code may
  // hold as a dual) or silently drop it. unpack_dual(x).first is x without it.
  ADJOINT_CHECK(detail::tangent_at(primal, level) == nullptr, Autograd, "make_dual", "primal ",
                describe(primal),
                " already has a tangent at this dual level; make the dual from "
                "unpack_dual(primal).first to give it another one");
  Tensor dual = detail::alias_with_history(primal);
  detail::copy_tangents(primal, dual, detail::levels_below(index));
  detail::set_tangent(dual, level, tangent);
  return dual;
}

std::pair<Tensor, Tensor> unpack_dual(const Tensor& dual) {
  ADJOINT_CHECK(dual.defined(), Value, "unpack_dual", "called on an undefined tensor");
  Tensor primal = detail::alias_with_history(dual);
  // The primal keeps its tangents of the outer levels: it is still a dual number there.
  int index = 0;
  uint64_t level = 0;
  if (innermost_level(index, level))
    detail::copy_tangents(dual, primal, detail::levels_below(index));
  return {primal, dual.tangent()};
}

Tensor Tensor::tangent() const {
  int index = 0;
  uint64_t level = 0;
  if (!innermost_level(index, level)) return {};
  const Tensor* t = detail::tangent_at(*this, level);
  return t ? *t : Tensor();
}

}  // namespace adjoint
