#include "vmap/batch_rule.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint {

Tensor BatchArgs::aligned(std::size_t i, int64_t rank) const {
  if (!batched_[i] || logical_dims_[i] == rank) return x_[i];
  Shape shape = x_[i].shape();
  for (int64_t k = logical_dims_[i]; k < rank; ++k) shape.insert(1, 1);
  return reshape(x_[i], shape);
}

Tensor BatchArgs::with_batch(std::size_t i) const {
  if (batched_[i]) return x_[i];
  Shape shape = x_[i].shape();
  shape.insert(0, size_);
  return expand(unsqueeze(x_[i], 0), shape);
}

Tensor BatchArgs::logical(std::size_t i) const {
  return batched_[i] ? detail::make_batched(x_[i], 0, level_) : x_[i];
}

namespace detail {

Tensor on_all_examples(const Tensor& x, const std::function<Tensor(const Tensor&)>& fn) {
  std::vector<int> levels;  // innermost (highest) first, as all_examples peels them
  for (const BatchedValue* b = batched_of(x); b; b = batched_of(b->value))
    levels.push_back(b->level);
  Tensor r = fn(all_examples(x));
  // all_examples put the lowest level's batch dim first: wrap from there upwards.
  for (auto it = levels.rbegin(); it != levels.rend(); ++it) r = make_batched(r, 0, *it);
  return r;
}

void throw_no_batching_rule(const char* op) {
  throw Error(ErrorKind::NotImplemented, op,
              str("vmap: ", op,
                  " has no batching rule yet, so it cannot run on a batched tensor; call it "
                  "outside vmap, or loop over the batch"));
}

}  // namespace detail
}  // namespace adjoint
