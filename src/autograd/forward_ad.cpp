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

// The innermost visible level, for make_dual, unpack_dual and Tensor::tangent().
bool innermost_level(uint64_t& id) {
  if (tls_mode.dual_levels == 0) return false;
  id = tls_mode.dual_level_ids[tls_mode.dual_levels - 1];
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
}

void copy_tangents_below(const Tensor& from, const Tensor& to, int below) {
  for (int i = 0; i < below; ++i) {
    const uint64_t level = tls_mode.dual_level_ids[i];
    if (const Tensor* t = tangent_at(from, level)) set_tangent(to, level, *t);
  }
}

}  // namespace detail

DualLevel::DualLevel() {
  ADJOINT_CHECK(tls_mode.dual_levels == tls_mode.dual_levels_open, Autograd, "DualLevel",
                "a dual level cannot be opened inside a JVP rule or a NoForwardGradGuard");
  ADJOINT_CHECK(tls_mode.dual_levels_open < kMaxDualLevels, NotImplemented, "DualLevel",
                "dual levels nest at most ", kMaxDualLevels, " deep");
  id_ = next_level_id.fetch_add(1, std::memory_order_relaxed);
  tls_mode.dual_level_ids[tls_mode.dual_levels_open] = id_;
  tls_mode.dual_levels = ++tls_mode.dual_levels_open;
}

DualLevel::~DualLevel() { tls_mode.dual_levels = --tls_mode.dual_levels_open; }

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  uint64_t level = 0;
  ADJOINT_CHECK(innermost_level(level), Autograd, "make_dual",
                "make_dual needs an active DualLevel");
  ADJOINT_CHECK(primal.defined() && tangent.defined(), Value, "make_dual",
                "primal and tangent must be defined");
  ADJOINT_CHECK(is_floating(primal.dtype()), DType, "make_dual",
                "only floating tensors can carry tangents, got ", describe(primal));
  ADJOINT_CHECK(primal.shape() == tangent.shape() && primal.dtype() == tangent.dtype(), Shape,
                "make_dual", "tangent ", describe(tangent), " does not match primal ",
                describe(primal));
  Tensor dual = detail::alias_with_history(primal);
  detail::copy_tangents_below(primal, dual, tls_mode.dual_levels - 1);
  detail::set_tangent(dual, level, tangent);
  return dual;
}

std::pair<Tensor, Tensor> unpack_dual(const Tensor& dual) {
  Tensor primal = detail::alias_with_history(dual);
  // The primal keeps its tangents of the outer levels: it is still a dual number there.
  detail::copy_tangents_below(dual, primal, tls_mode.dual_levels - 1);
  return {primal, dual.tangent()};
}

Tensor Tensor::tangent() const {
  uint64_t level = 0;
  if (!innermost_level(level)) return {};
  const Tensor* t = detail::tangent_at(*this, level);
  return t ? *t : Tensor();
}

}  // namespace adjoint
