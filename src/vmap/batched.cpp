#include "vmap/batched.h"

#include <algorithm>

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "backend/kernels.h"
#include "core/op_scope.h"

namespace adjoint::detail {

namespace {
thread_local int next_level_id = 0;
}  // namespace

std::vector<VmapLevel>& vmap_levels() {
  thread_local std::vector<VmapLevel> levels;
  return levels;
}

VmapLevelGuard::VmapLevelGuard(int64_t size, Randomness randomness) : id_(++next_level_id) {
  vmap_levels().push_back(VmapLevel{id_, size, randomness});
  set_vmap_depth(tls_mode.vmap_depth + 1);
}

VmapLevelGuard::~VmapLevelGuard() {
  vmap_levels().pop_back();
  set_vmap_depth(tls_mode.vmap_depth - 1);
}

Tensor make_batched(Tensor value, int64_t bdim, int level) {
  Shape logical = value.shape();
  logical.erase(static_cast<std::size_t>(bdim));
  const TensorImpl& phys = *value.impl();
  auto impl = make_pooled<TensorImpl>(phys.storage, logical, phys.dtype);
  impl->is_view = phys.is_view;
  impl->inference = phys.inference;
  impl->batched = std::make_shared<const BatchedValue>(BatchedValue{std::move(value), bdim, level});
  return Tensor(std::move(impl));
}

namespace {
const VmapLevel* open_level(int id) {
  for (const VmapLevel& l : vmap_levels())
    if (l.id == id) return &l;
  return nullptr;
}

[[noreturn]] void throw_escaped(const char* op, const TensorImpl& t) {
  throw Error(ErrorKind::Value, op,
              str("got a tensor batched by a vmap that has already returned (logical shape ",
                  t.shape, ", ", t.dtype,
                  "): it escaped the function being vmapped, for example through a captured "
                  "variable"));
}
}  // namespace

int top_batch_level(std::span<const Tensor> inputs, const char* op) {
  const Tensor* top = nullptr;
  for (const Tensor& x : inputs)
    if (batch_level(x) > (top ? batch_level(*top) : 0)) top = &x;
  if (!top) return 0;
  const int level = batch_level(*top);
  if (!open_level(level)) throw_escaped(op, *top->impl());
  return level;
}

int64_t level_size(int level) {
  const VmapLevel* l = open_level(level);
  ADJOINT_CHECK(l != nullptr, Internal, "vmap", "level ", level, " is not open");
  return l->size;
}

Tensor move_dim(const Tensor& x, int64_t from, int64_t to) {
  if (from == to) return x;
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != from) order.push_back(d);
  order.insert(order.begin() + to, from);
  return permute(x, order);
}

Tensor all_examples(Tensor t) {
  // Each level's value is a tensor of the level below (batched there, or physical).
  while (const BatchedValue* b = batched_of(t)) t = move_dim(b->value, b->bdim, 0);
  return t;
}

Tensor batch_front(const Tensor& t, int level) {
  const BatchedValue* b = batched_of(t);
  if (!b || b->level != level) return t;
  return move_dim(b->value, b->bdim, 0);
}

namespace {
Tensor draw_at(std::size_t depth, const Shape& shape, const char* op,
               const std::function<Tensor(const Shape&)>& draw) {
  if (depth == 0) {
    // The factory itself, without coming back here.
    struct NoVmap {
      int depth = tls_mode.vmap_depth;
      NoVmap() { set_vmap_depth(0); }
      ~NoVmap() { set_vmap_depth(depth); }
    } no_vmap;
    return draw(shape);
  }
  const VmapLevel level = vmap_levels()[depth - 1];
  switch (level.randomness) {
    case Randomness::Same:
      return draw_at(depth - 1, shape, op, draw);
    case Randomness::Different: {
      Shape batch = shape;
      batch.insert(0, level.size);
      return make_batched(draw_at(depth - 1, batch, op, draw), 0, level.id);
    }
    case Randomness::Error:
      break;
  }
  throw Error(ErrorKind::Value, op,
              str(op,
                  " inside vmap: random values would be ambiguous; pass VmapOptions with "
                  "randomness = Randomness::Different (each example draws its own) or "
                  "Randomness::Same (every example sees the same)"));
}
}  // namespace

Tensor draw_random(const Shape& shape, const char* op,
                   const std::function<Tensor(const Shape&)>& draw) {
  return draw_at(vmap_levels().size(), shape, op, draw);
}

void write_logical(const Tensor& self, const Tensor& value, const char* op) {
  if (tls_mode.vmap_depth != 0 && (batch_level(self) != 0 || batch_level(value) != 0))
      [[unlikely]] {
    write_batched(self, value, op);
  } else {
    kernels::copy_into(self, value);
  }
}

std::optional<std::pair<Tensor, Tensor>> physical_base_and_view(const Tensor& base,
                                                                const Tensor& view,
                                                                const char* op) {
  const int level = batch_level(view);
  if (level == 0 && batch_level(base) == 0) return std::nullopt;
  ADJOINT_CHECK(batch_level(base) == level, NotImplemented, op, "vmap: ", describe(view),
                " is batched differently from the tensor it views (", describe(base),
                "); writing into it in place is not supported");
  Tensor pb = batch_front(base, level), pv = batch_front(view, level);
  ADJOINT_CHECK(batch_level(pb) == 0 && batch_level(pv) == 0, NotImplemented, op,
                "vmap: an in-place write into a view of ", describe(base),
                " recorded by a transform inside nested vmaps is not supported yet");
  return std::pair{std::move(pb), std::move(pv)};
}

void check_grad_fits_leaf(const Tensor& grad, const Tensor& leaf) {
  if (batch_level(grad) > batch_level(leaf))
    throw Error(ErrorKind::Autograd, "backward",
                str("inside vmap, the gradient of ", describe(leaf),
                    ", which is not batched, is a different value for every example, and .grad "
                    "cannot hold it; take per-example gradients with grad() or vjp() inside "
                    "vmap, or call backward() outside it"));
}

void write_batched(const Tensor& self, const Tensor& value, const char* op) {
  const int level = std::max(batch_level(self), batch_level(value));
  ADJOINT_CHECK(batch_level(self) == level, Value, op, "vmap: in-place ", op,
                " would write a batched value into ", describe(self),
                ", which is not batched (every example would overwrite the same memory); use the "
                "out-of-place op, or make the tensor batched too");
  Tensor target = batch_front(self, level);
  target.copy_(batch_front(value, level));
}

void throw_batched_data_access(const TensorImpl& t) {
  if (!open_level(t.batched->level)) throw_escaped(current_op("vmap"), t);
  throw Error(ErrorKind::NotImplemented, current_op("vmap"),
              str("vmap: this op has no batching rule, so it cannot run on a batched tensor "
                  "(logical shape ",
                  t.shape, ", ", t.dtype,
                  "); reading the values of a batched tensor (item, to_vector, data_ptr) is not "
                  "possible inside vmap either"));
}

}  // namespace adjoint::detail
