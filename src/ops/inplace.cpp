// In-place ops (add_, mul_, zero_, copy_, ...). Every one bumps the storage's version, so
// nodes that saved the old values notice (see Note [Saved tensor versions]).
// - Nothing to record (grad mode off, or no input requires grad): the kernel writes straight
//   into the tensor, with no temporary (optimizer steps, zero_grad, gradient accumulation).
// - Recorded: the out-of-place op runs on a clone of the old value (it may save it), the
//   result is written back, and the tensor's history moves to the new node.
// - Forward mode: when the tensor or the operand has a tangent at a visible dual level, the
//   op goes the out-of-place way as well, recorded or not, and the tensor takes the result's
//   tangents. See Note [In-place ops on dual tensors] in src/autograd/forward_ad.h.
// - compile: while a function is traced, the out-of-place op is recorded and the tracer takes
//   its result as the tensor's new value, writing nothing (Note [In-place ops under compile]
//   in src/compile/trace.cpp).
#include <cmath>

#include "adjoint/error.h"
#include "autograd/view_tracking.h"
#include "core/op_tracer.h"
#include "core/scalar_convert.h"
#include "core/tensor_factory.h"
#include "ops/common.h"
#include "vmap/batched.h"

namespace adjoint {
namespace {

bool recording_with(const Tensor& self, const Tensor* other) {
  return is_grad_enabled() && (self.requires_grad() || (other && other->requires_grad()));
}

// Whether an operand is batched by vmap: the op then goes the out-of-place way and the result
// is written through the physical values (vmap/batched.h write_batched).
bool batched_with(const Tensor& self, const Tensor* other) {
  return tls_mode.vmap_depth != 0 &&
         (detail::batch_level(self) != 0 || (other && detail::batch_level(*other) != 0));
}

// Whether the op is recorded into a traced graph as the out-of-place op and a write.
bool traced() { return detail::tracing_writes(); }

// Whether the op changes tangents: see Note [In-place ops on dual tensors].
bool dual_with(const Tensor& self, const Tensor* other) {
  return tls_mode.dual_visible != 0 &&
         (detail::has_visible_tangent(self) || (other && detail::has_visible_tangent(*other)));
}

// Whether the op goes the out-of-place way (functional, below) rather than the kernel writing
// self directly: recorded, dual, batched or traced (the header comment lists the four).
bool out_of_place(const Tensor& self, const Tensor* other) {
  return recording_with(self, other) || dual_with(self, other) || batched_with(self, other) ||
         traced();
}

// Throws, before anything is written, when the tangents self gets from `result` (zero where
// result is null or has none) would not reach the tensors that share its memory.
void check_dual_inplace(const Tensor& self, const Tensor* result, const char* op) {
  if (tls_mode.dual_visible == 0) return;
  for (int i = 0; i < tls_mode.dual_levels_open; ++i) {
    if (!detail::level_visible(i)) continue;
    const uint64_t level = tls_mode.dual_level_ids[i];
    const bool had = detail::tangent_at(self, level) != nullptr;
    if (!had && !(result && detail::tangent_at(*result, level))) continue;
    ADJOINT_CHECK(had || !self.impl()->is_view, NotImplemented, op,
                  "in-place modification of a view (", describe(self),
                  ") by an operand with a forward-mode tangent is not supported: the tensor it "
                  "views would not get the tangent; clone() the view first, or use the "
                  "out-of-place op");
    ADJOINT_CHECK(!detail::other_dual_on_storage(self, level), NotImplemented, op,
                  "in-place modification of ", describe(self),
                  " under forward-mode AD is not supported while another tensor sharing its "
                  "memory (a view of it, or the tensor it views) has a tangent at the same "
                  "dual level: that tangent would not be updated; clone() first, or use the "
                  "out-of-place op");
  }
}

// Gives self the tangents of `result` at every visible level, and a zero tangent where self
// had one and the result has none (copy_ or fill_ of a value without one, as in PyTorch).
void update_tangents(const Tensor& self, const Tensor* result) {
  if (tls_mode.dual_visible == 0) return;
  for (int i = 0; i < tls_mode.dual_levels_open; ++i) {
    if (!detail::level_visible(i)) continue;
    const uint64_t level = tls_mode.dual_level_ids[i];
    const Tensor* rt = result ? detail::tangent_at(*result, level) : nullptr;
    if (!rt && !detail::tangent_at(self, level)) continue;
    Tensor t;
    {
      // The tangent of level i carries only the levels below it (Note [Nested dual levels]).
      detail::VisibleLevels below(detail::levels_below(i));
      t = rt ? cast_to(*rt, self.dtype()) : zeros_like(self);
    }
    detail::set_tangent(self, level, std::move(t));
  }
}

// As PyTorch: an in-place op whose result depends on the old values cannot write a tensor
// whose elements share memory (an expanded tensor): each write would feed the next, and a
// [1, 2^40] expand is 2^40 writes to one element (a hang found by fuzz_ops). fill_ is allowed:
// filling is idempotent, and it writes each memory location once.
enum class Overlap { Refuse, Allow };

void check_inplace(const Tensor& self, bool recording, const char* op,
                   Overlap overlap = Overlap::Refuse) {
  ADJOINT_CHECK(self.defined(), Value, op, "called on an undefined tensor");
  ADJOINT_CHECK(overlap == Overlap::Allow || !has_internal_overlap(self), Value, op,
                "unsupported operation: ", describe(self), " (strides ", self.strides(),
                ") has elements that share one memory location (an expanded tensor), so an "
                "in-place write is ambiguous; clone() it first");
  if (!is_grad_enabled()) return;
  ADJOINT_CHECK(
      !(self.is_leaf() && self.requires_grad()), Autograd, op, "a leaf tensor that requires grad (",
      describe(self),
      ") cannot be modified in place; do it under NoGradGuard, or use the out-of-place op");
  if (detail::is_tracked_view(self)) detail::check_view_inplace(self, recording, op);
}

// As PyTorch: an in-place result may narrow within its category (float64 into float32) but
// not cross categories (a float result into an int64 tensor).
void check_storable(DType result, const Tensor& self, const char* op) {
  ADJOINT_CHECK(type_category(result) <= type_category(self.dtype()), DType, op, "the result type ",
                result, " cannot be stored in ", describe(self));
}

void check_broadcast_into(const Tensor& self, const Tensor& other, const char* op) {
  ADJOINT_CHECK(broadcast_shapes(self.shape(), other.shape(), op) == self.shape(), Shape, op,
                "the operand ", describe(other),
                " does not broadcast to the tensor being modified ", describe(self));
}

void bump(Tensor& self) { self.impl()->storage->bump_version(); }

// Note [Operands that overlap the written tensor]
// self.add_(other) where other shares memory with self, but not element for element (a shifted
// slice: a[1:].add_(a[:-1]); a transpose; a row broadcast over the rows that include it), would
// read elements the same op has already overwritten, in an order the kernel chooses. PyTorch
// refuses it. adjoint reads the operand as it was before the write, as its recording path always
// has (functional() clones an operand that shares self's storage), so the answer does not depend
// on grad mode or on the kernel's order. An operand that is self's own elements in self's layout
// (x.mul_(x)) reads each element just before writing it, and is used as it is.
Tensor unaliased(const Tensor& self, const Tensor& other) {
  if (!other.shares_storage(self) ||
      (other.shape() == self.shape() && other.strides() == self.strides() &&
       other.storage_offset() == self.storage_offset() && other.dtype() == self.dtype()))
    return other;
  return kernels::cast(other, other.dtype());  // a contiguous copy, outside any graph
}

// self = self <kind> other, written by the kernel directly.
Tensor& direct_binary(Tensor& self, Binary kind, const Tensor& other, const char* op) {
  check_broadcast_into(self, other, op);
  check_storable(result_type(self, other), self, op);
  NoGradGuard no_grad;
  kernels::binary_into(kind, self, self, unaliased(self, cast_to(other, self.dtype())));
  bump(self);
  return self;
}

// self += alpha * other in one pass (SGD's p -= lr * g is add_(g, -lr)).
Tensor& direct_add_scaled(Tensor& self, const Tensor& other, double alpha, const char* op) {
  check_broadcast_into(self, other, op);
  check_storable(result_type(self, other), self, op);
  NoGradGuard no_grad;
  kernels::add_scaled_into(self, unaliased(self, cast_to(other, self.dtype())), alpha);
  bump(self);
  return self;
}

// self = unary kind of self with parameter a, written by the kernel directly.
Tensor& direct_unary(Tensor& self, Unary kind, Scalar a, const char* op) {
  check_storable(result_type(self, a), self, op);
  kernels::unary_into(kind, self, self, a.to_double());
  bump(self);
  return self;
}

Tensor& commit(Tensor& self, const Tensor& result, bool recording, const char* op) {
  ADJOINT_CHECK(result.shape() == self.shape(), Shape, op, "the result has shape ", result.shape(),
                " but the tensor being modified is ", describe(self));
  check_storable(result.dtype(), self, op);
  check_dual_inplace(self, &result, op);
  if (recording && detail::is_tracked_view(self)) {
    // The base's history changes too: see Note [Views and in-place ops].
    detail::commit_to_view(self, result);
    update_tangents(self, &result);
    return self;
  }
  if (batched_with(self, &result)) [[unlikely]] {
    detail::write_batched(self, result, op);
  } else {
    kernels::copy_into(self, result);
  }
  bump(self);
  if (recording && result.requires_grad())
    detail::take_history(self, autograd::gradient_edge(result));
  update_tangents(self, &result);
  return self;
}

// Under compile: the out-of-place op on self itself (nothing is overwritten, so no clone is
// needed), converted to self's dtype as the write would, handed to the tracer.
Tensor& traced_write(Tensor& self, const Tensor& result, const char* op) {
  ADJOINT_CHECK(result.shape() == self.shape(), Shape, op, "the result has shape ", result.shape(),
                " but the tensor being modified is ", describe(self));
  check_storable(result.dtype(), self, op);
  detail::tls_op_tracer->record_write(self, cast_to(result, self.dtype()), op);
  return self;
}

// The out-of-place way: recorded when a graph is, and giving the new tangents when some
// operand is dual.
// An operand sharing memory with self (x.mul_(x), or a view of x) is read as it was before
// the write: a clone, so that what backward saves of it is not the tensor being overwritten
// (whose new history would then hold it: a reference cycle, and a version error).
template <class Compute>
Tensor& functional(Tensor& self, const Tensor* other, const char* op, Compute compute) {
  const bool recording = recording_with(self, other);
  check_inplace(self, recording, op);
  if (traced()) [[unlikely]]
    return traced_write(self, compute(self, other ? *other : Tensor()), op);
  const Tensor old_other =
      other && other->defined() && other->shares_storage(self) ? other->clone() : Tensor();
  Tensor result = compute(self.clone(), old_other.defined() ? old_other
                                        : other             ? *other
                                                            : old_other);
  return commit(self, result, recording, op);
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  check_alpha(result_type(*this, o), alpha, "add_");
  if (out_of_place(*this, &o))
    return functional(*this, &o, "add_",
                      [&](const Tensor& s, const Tensor& b) { return adjoint::add(s, b, alpha); });
  check_inplace(*this, false, "add_");
  if (alpha.to_double() != 1) return direct_add_scaled(*this, o, alpha.to_double(), "add_");
  return direct_binary(*this, Binary::Add, o, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  check_alpha(result_type(*this, o), alpha, "sub_");
  if (out_of_place(*this, &o))
    return functional(*this, &o, "sub_",
                      [&](const Tensor& s, const Tensor& b) { return adjoint::sub(s, b, alpha); });
  check_inplace(*this, false, "sub_");
  if (alpha.to_double() != 1) return direct_add_scaled(*this, o, -alpha.to_double(), "sub_");
  return direct_binary(*this, Binary::Sub, o, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) {
  if (out_of_place(*this, &o))
    return functional(*this, &o, "mul_",
                      [&](const Tensor& s, const Tensor& b) { return adjoint::mul(s, b); });
  check_inplace(*this, false, "mul_");
  return direct_binary(*this, Binary::Mul, o, "mul_");
}
Tensor& Tensor::div_(const Tensor& o) {
  if (out_of_place(*this, &o))
    return functional(*this, &o, "div_",
                      [&](const Tensor& s, const Tensor& b) { return adjoint::div(s, b); });
  check_inplace(*this, false, "div_");
  check_storable(kDefaultFloat, *this, "div_");  // true division gives floats
  return direct_binary(*this, Binary::Div, o, "div_");
}
Tensor& Tensor::add_(Scalar o) {
  if (out_of_place(*this, nullptr))
    return functional(*this, nullptr, "add_",
                      [&](const Tensor& s, const Tensor&) { return adjoint::add(s, o); });
  check_inplace(*this, false, "add_");
  return direct_unary(*this, Unary::AddScalar, o, "add_");
}
Tensor& Tensor::sub_(Scalar o) {
  if (o.is_floating()) return add_(-o.to_double());
  // Negated in unsigned arithmetic: -INT64_MIN wraps to itself, as int64 does in PyTorch.
  return add_(static_cast<int64_t>(0 - static_cast<uint64_t>(o.to_int())));
}
Tensor& Tensor::mul_(Scalar o) {
  if (out_of_place(*this, nullptr))
    return functional(*this, nullptr, "mul_",
                      [&](const Tensor& s, const Tensor&) { return adjoint::mul(s, o); });
  check_inplace(*this, false, "mul_");
  return direct_unary(*this, Unary::MulScalar, o, "mul_");
}
Tensor& Tensor::div_(Scalar o) {
  if (out_of_place(*this, nullptr))
    return functional(*this, nullptr, "div_",
                      [&](const Tensor& s, const Tensor&) { return adjoint::div(s, o); });
  check_inplace(*this, false, "div_");
  check_storable(kDefaultFloat, *this, "div_");
  return direct_unary(*this, Unary::MulScalar, 1.0 / o.to_double(), "div_");
}
Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  if (out_of_place(*this, nullptr))
    return functional(*this, nullptr, "clamp_",
                      [&](const Tensor& s, const Tensor&) { return adjoint::clamp(s, lo, hi); });
  check_inplace(*this, false, "clamp_");
  ADJOINT_CHECK(lo || hi, Value, "clamp_", "at least one of min and max must be given");
  ADJOINT_CHECK(dtype() != DType::Bool, DType, "clamp_", "not supported for bool tensors (",
                describe(*this), ")");
  auto integral = [](std::optional<double> v) {
    return !v || (detail::fits_int64(*v) && *v == std::trunc(*v));
  };
  ADJOINT_CHECK(is_floating(dtype()) || (integral(lo) && integral(hi)), DType, "clamp_",
                "a bound that is not an integer gives a floating result, which cannot be stored "
                "in ",
                describe(*this));
  if (lo) kernels::unary_into(Unary::ClampMin, *this, *this, *lo);
  if (hi) kernels::unary_into(Unary::ClampMax, *this, *this, *hi);
  bump(*this);
  return *this;
}

// fill_, zero_ and copy_ replace the value: nothing flows back to the old one, so a tensor
// with history loses it (fill_) or takes the source's (copy_).
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(Scalar v) {
  const bool recording = recording_with(*this, nullptr);
  check_inplace(*this, recording, "fill_", Overlap::Allow);
  if (traced()) [[unlikely]]
    return traced_write(*this, full_like(*this, v), "fill_");
  check_dual_inplace(*this, nullptr, "fill_");
  if (recording && detail::is_tracked_view(*this)) {
    // The view's window of the base becomes a constant (Note [Views and in-place ops]).
    Tensor value = full_like(*this, v);
    return commit(*this, value, true, "fill_");
  }
  if (recording) detach_();
  if (batched_with(*this, nullptr)) [[unlikely]] {
    detail::write_batched(*this, full_like(*this, v), "fill_");
    bump(*this);
    update_tangents(*this, nullptr);
    return *this;
  }
  kernels::fill(unique_elements(*this), v);
  bump(*this);
  update_tangents(*this, nullptr);  // a constant: a dual's tangent becomes zero
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  ADJOINT_CHECK(src.defined(), Value, "copy_", "source is an undefined tensor");
  check_broadcast_into(*this, src, "copy_");
  const bool recording = recording_with(*this, &src);
  check_inplace(*this, recording, "copy_");
  if (traced()) [[unlikely]]
    return traced_write(*this, adjoint::expand(src, shape()), "copy_");
  if (!recording && !dual_with(*this, &src) && !batched_with(*this, &src)) {
    kernels::copy_into(*this, unaliased(*this, src));  // Note [Operands that overlap ...]
    bump(*this);
    return *this;
  }
  // The source as copy_ writes it, read before the write (a clone, recorded when recording).
  Tensor value = cast_to(adjoint::expand(src, shape()), dtype());
  if (value.shares_storage(*this)) value = value.clone();
  if (!recording) return commit(*this, value, false, "copy_");
  check_dual_inplace(*this, &value, "copy_");  // before detach_: an error changes nothing
  if (!value.requires_grad() && !detail::is_tracked_view(*this)) detach_();
  return commit(*this, value, true, "copy_");
}

}  // namespace adjoint
