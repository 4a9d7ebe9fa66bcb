// Views and in-place ops (Note [Views and in-place ops] in view_tracking.h): the two ops that
// connect a view's history to its base's, and the bookkeeping around them.
#include "autograd/view_tracking.h"

#include <algorithm>
#include <new>
#include <vector>

#include "adjoint/error.h"
#include "autograd/apply.h"
#include "backend/kernels.h"
#include "core/op_scope.h"
#include "core/tensor_factory.h"
#include "vmap/batched.h"

namespace adjoint::detail {
namespace {

// Storage positions of t's elements, in row-major logical order. An expanded view has few
// elements in memory but one position for each of numel: more than this machine's memory is
// refused as the allocation that cannot succeed (OutOfMemory), and a failed allocation becomes
// that error too, not a std::bad_alloc out of the library.
std::vector<int64_t> positions(const TensorImpl& t) {
  const int64_t memory = physical_memory_bytes();
  auto out_of_memory = [&] {
    return Error(ErrorKind::OutOfMemory, current_op("in-place"),
                 str("out of memory: the view history of a tensor of shape ", t.shape, " (",
                     t.dtype, ") maps each of its ", t.numel,
                     " elements to its base's; clone() an expanded view before using it"));
  };
  if (memory > 0 && t.numel > memory / static_cast<int64_t>(sizeof(int64_t))) throw out_of_memory();
  std::vector<int64_t> out;
  try {
    out.reserve(static_cast<std::size_t>(t.numel));
  } catch (const std::bad_alloc&) {
    throw out_of_memory();
  }
  if (t.numel == 0) return out;
  const std::size_t nd = t.shape.size();
  std::vector<int64_t> at(nd, 0);
  int64_t pos = t.offset;
  for (int64_t k = 0; k < t.numel; ++k) {
    out.push_back(pos);
    for (std::size_t d = nd; d-- > 0;) {
      if (++at[d] < t.shape[d]) {
        pos += t.strides[d];
        break;
      }
      pos -= t.strides[d] * (at[d] - 1);
      at[d] = 0;
    }
  }
  return out;
}

// For each element of `view`, the flat (row-major) index of the element of `base` at the same
// memory position: the index map of Note [Views and in-place ops].
Tensor base_index_map(const TensorImpl& base, const TensorImpl& view) {
  const std::vector<int64_t> bp = positions(base);
  const std::vector<int64_t> vp = positions(view);
  std::vector<int64_t> index(vp.size());
  if (!vp.empty()) {
    const auto [lo, hi] = std::minmax_element(bp.begin(), bp.end());
    const int64_t span = *hi - *lo + 1;
    // A base is made by an op or a factory, so its elements fill their span of memory;
    // only a leaf given strided data by set_data could leave large gaps.
    ADJOINT_CHECK(span <= 4 * static_cast<int64_t>(bp.size()) + 1024, NotImplemented, "in-place",
                  "the base of this view spans ", span, " memory slots for ", bp.size(),
                  " elements; clone() the base before taking views of it");
    std::vector<int64_t> element_at(static_cast<std::size_t>(span), -1);
    for (std::size_t i = 0; i < bp.size(); ++i)
      element_at[static_cast<std::size_t>(bp[i] - *lo)] = static_cast<int64_t>(i);
    for (std::size_t k = 0; k < vp.size(); ++k) {
      const int64_t p = vp[k] - *lo;
      ADJOINT_ASSERT(p >= 0 && p < span && element_at[static_cast<std::size_t>(p)] >= 0,
                     "a view reaches memory outside its base");
      index[k] = element_at[static_cast<std::size_t>(p)];
    }
  }
  return tensor(index, view.shape, DType::Int64);
}

// 1 where the base keeps its old value, 0 in the view's window (not differentiable).
Tensor keep_mask(int64_t base_numel, const Tensor& flat_index, DType dtype) {
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward_grad;
  Tensor window =
      index_add(zeros({base_numel}, dtype), 0, flat_index, ones({flat_index.numel()}, dtype));
  return 1.0 - window;
}

// Note [Views and in-place ops under vmap]
// Inside vmap a view and its base are wrappers whose own strides say nothing of memory
// (Note [Batched tensors]); their physical values, with the batch dim in front, are real
// strided tensors of one storage. The index map of one example is read off example 0 of each
// (the view ops that made the view did the same to every example: checked on the last one
// too), and it is what the ops below keep for their rules at the logical level, where a
// transform inside the vmap records them. Their batching rules extend it over the batch: the
// element i of example k is k * (one example's elements) + index[i] in the row-major order of
// [B, *base]. The physical write itself goes through write_batched. One vmap level: a view
// written in place under nested vmaps with a transform inside is refused by name.

// Example k's index map offset into the row-major order of [B, *example].
Tensor batched_index(const Tensor& index, int64_t batch, int64_t example_numel) {
  Shape s(static_cast<std::size_t>(index.dim()) + 1, 1);
  s[0] = batch;
  return arange(0, batch * example_numel, example_numel, TensorOptions(DType::Int64)).reshape(s) +
         index.unsqueeze(0);
}

// The view's window of the base's current value (PyTorch's AsStridedBackward): it regenerates
// a view's history from its base.
struct BaseView {
  static constexpr const char* name = "as_strided";
  static constexpr bool exportable = false;  // holds a tensor (its index map)
  static constexpr Save save = Save::None;
  Tensor index;  // base_index_map: int64, the view's shape
  Shape shape, strides;
  int64_t offset = 0;
  // Under vmap: the physical view's geometry (batch dim in front), for the batching rule.
  Shape batch_shape{}, batch_strides{};
  int64_t batch_offset = 0;
  Tensor forward(const Tensor& base) const { return make_view(base, shape, strides, offset); }
  Tensor vmap(const BatchArgs& b) const {
    const Tensor base = b.with_batch(0);
    return apply(BaseView{.index = batched_index(index, b.size(), base.numel() / b.size()),
                          .shape = batch_shape,
                          .strides = batch_strides,
                          .offset = batch_offset},
                 base);
  }
  // d/dbase: each element's gradient goes back to the base element at its memory position,
  // summed where elements share memory (an expanded view)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    const Shape& base_shape = c.input_shape(0);
    return index_add(zeros({base_shape.numel()}, TensorOptions(gy.dtype()).device(gy.device())), 0,
                     index.reshape({-1}), gy.reshape({-1}))
        .reshape(base_shape);
  }
  Tensor jvp(const Ctx&, const Tensor& tb) const {
    return index_select(tb.reshape({-1}), 0, index.reshape({-1})).reshape(shape);
  }
};

// The base after an in-place op on its view (PyTorch's CopySlices): the old base with the
// view's window replaced by `src`. The memory already holds that value when it runs.
struct ViewScatter {
  static constexpr const char* name = "copy_slices";
  static constexpr bool exportable = false;  // holds a tensor (its index map)
  static constexpr Save save = Save::None;
  Tensor index;  // base_index_map: int64, the view's (and src's) shape
  Tensor forward(const Tensor& base, const Tensor&) const { return alias_without_history(base); }
  // The base's memory holds the new values already (write_batched): the same op over the
  // batch, with the index map of every example.
  Tensor vmap(const BatchArgs& b) const {
    const Tensor base = b.with_batch(0);
    return apply(ViewScatter{batched_index(index, b.size(), base.numel() / b.size())}, base,
                 b.with_batch(1));
  }
  // d/dbase = g outside the window, 0 inside; d/dsrc = g at the window
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor flat = gy.reshape({-1}), idx = index.reshape({-1});
    Tensor gb, gs;
    if (c.needs_grad(0))
      gb = (flat * keep_mask(flat.numel(), idx, gy.dtype())).reshape(c.input_shape(0));
    if (c.needs_grad(1)) gs = index_select(flat, 0, idx).reshape(c.input_shape(1));
    return {gb, gs};
  }
  Tensor jvp(const Ctx& c, const Tensor& tb, const Tensor& ts) const {
    const Tensor flat = tb.reshape({-1}), idx = index.reshape({-1});
    return index_add(flat * keep_mask(flat.numel(), idx, tb.dtype()), 0, idx,
                     (ts.dtype() == tb.dtype() ? ts : ts.to(tb.dtype())).reshape({-1}))
        .reshape(c.input_shape(0));
  }
};

// The index map of `view` in `base` (Note [Views and in-place ops]); under vmap, one example's
// (Note [Views and in-place ops under vmap]), and the physical view for BaseView's rule.
struct ViewMap {
  Tensor index;
  Tensor physical_view;  // undefined outside vmap
};

ViewMap view_map(const Tensor& base, const Tensor& view, const char* op) {
  const std::optional<std::pair<Tensor, Tensor>> physical = physical_base_and_view(base, view, op);
  if (!physical) return {base_index_map(*base.impl(), *view.impl()), {}};
  const auto& [pb, pv] = *physical;
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward_grad;
  Tensor first = base_index_map(*pb.select(0, 0).impl(), *pv.select(0, 0).impl());
  const int64_t last = pb.size(0) - 1;
  if (last > 0) {
    const Tensor other = base_index_map(*pb.select(0, last).impl(), *pv.select(0, last).impl());
    ADJOINT_CHECK(other.to_vector<int64_t>() == first.to_vector<int64_t>(), NotImplemented, op,
                  "vmap: the examples of ", describe(view),
                  " sit differently in the tensor they view; writing into it in place is not "
                  "supported");
  }
  return {first, pv};
}

}  // namespace

void track_view(const Tensor& out, const Tensor& input) {
  TensorImpl* o = out.impl();
  const TensorImpl* in = input.impl();
  o->view_base = in->view_base ? in->view_base : input.impl_ptr();
  o->view_version = o->storage->version();
}

void regenerate_view_history(const Tensor& view) {
  TensorImpl* v = view.impl();
  v->view_version = v->storage->version();
  const Tensor base(v->view_base);
  if (base.impl()->storage != v->storage) {  // the base's data was replaced (set_data)
    v->view_base.reset();
    return;
  }
  if (!requires_grad(base)) return;
  Tensor fresh;
  {
    EnableGradGuard grad;  // a history is made whatever the caller's mode
    NoForwardGradGuard no_forward_grad;
    const ViewMap m = view_map(base, view, "in-place");
    BaseView op{.index = m.index, .shape = v->shape, .strides = v->strides, .offset = v->offset};
    if (m.physical_view.defined()) {
      op.batch_shape = m.physical_view.shape();
      op.batch_strides = m.physical_view.strides();
      op.batch_offset = m.physical_view.impl()->offset;
    }
    fresh = apply(std::move(op), base);
  }
  take_history(view, autograd::gradient_edge(fresh));
}

void check_view_inplace(const Tensor& self, bool recording, const char* op) {
  const Tensor base(self.impl()->view_base);
  if (!requires_grad(base)) return;
  ADJOINT_CHECK(self.requires_grad(), Autograd, op, "a view (", describe(self),
                ") taken in no-grad mode of a tensor that requires grad (", describe(base),
                ") is being modified in place with grad mode on; its gradient would be "
                "ambiguous. Take the view with grad mode on, or modify it under NoGradGuard");
  if (!recording) return;
  ADJOINT_CHECK(!base.is_leaf(), Autograd, op, "a view (", describe(self),
                ") of a leaf tensor that requires grad (", describe(base),
                ") cannot be modified in place; do it under NoGradGuard, or clone() the leaf "
                "first");
}

void commit_to_view(const Tensor& self, const Tensor& result) {
  const Tensor base(self.impl()->view_base);
  const Tensor base_before = alias_with_history(base);  // its history before the write
  const ViewMap m = view_map(base, self, "in-place");
  write_logical(self, result, "in-place");  // through the physical values under vmap
  self.impl()->storage->bump_version();
  Tensor scattered;
  {
    NoForwardGradGuard no_forward_grad;  // tangents of in-place ops on views: check_dual_inplace
    scattered = apply(ViewScatter{m.index}, base_before, result);
  }
  if (scattered.requires_grad()) take_history(base, autograd::gradient_edge(scattered));
  regenerate_view_history(self);
}

}  // namespace adjoint::detail
