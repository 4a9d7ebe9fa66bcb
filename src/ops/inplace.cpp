// In-place ops (add_, mul_, zero_, copy_, ...). Every one bumps the storage's version, so
// nodes that saved the old values notice (see Note [Saved tensor versions]). They pass the
// dispatch stack (Note [In-place ops in the stack]), whose layers choose between the ways:
// - Nothing to record (grad mode off, or no input requires grad): the kernel writes straight
//   into the tensor, with no temporary (optimizer steps, zero_grad, gradient accumulation).
// - Recorded: the out-of-place op runs on a clone of the old value (it may save it), the
//   result is written back, and the tensor's history moves to the new node.
// - Forward mode: when the tensor or the operand has a tangent at a visible dual level, the
//   op goes the out-of-place way as well, recorded or not, and the tensor takes the result's
//   tangents. See Note [In-place ops on dual tensors] in src/autograd/forward_ad.h.
// - vmap: an operand batched by vmap sends the op the out-of-place way too, the result
//   written through the physical values (vmap/batched.h write_batched).
// - compile: while a function is traced, the out-of-place op is recorded and the tracer takes
//   its result as the tensor's new value, writing nothing (Note [In-place ops under compile]
//   in src/compile/trace.cpp).
#include <array>
#include <cmath>

#include "adjoint/error.h"
#include "autograd/view_tracking.h"
#include "core/scalar_convert.h"
#include "core/tensor_factory.h"
#include "ops/common.h"
#include "ops/inplace_call.h"
#include "vmap/batched.h"

namespace adjoint {
namespace {

bool recording_with(const Tensor& self, const Tensor* other) {
  return is_grad_enabled() && (self.requires_grad() || (other && other->requires_grad()));
}

// Whether the op changes tangents: see Note [In-place ops on dual tensors].
bool dual_with(const Tensor& self, const Tensor* other) {
  return tls_mode.dual_visible != 0 &&
         (detail::has_visible_tangent(self) || (other && detail::has_visible_tangent(*other)));
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
  detail::write_logical(self, result, op);  // through the physical values under vmap
  bump(self);
  if (recording && result.requires_grad())
    detail::take_history(self, autograd::gradient_edge(result));
  update_tangents(self, &result);
  return self;
}

// An in-place op's new value of self computed out of place (`result`), as the write would
// store it: checked, and converted to self's dtype.
Tensor new_value(const Tensor& self, const Tensor& result, const char* op) {
  ADJOINT_CHECK(result.shape() == self.shape(), Shape, op, "the result has shape ", result.shape(),
                " but the tensor being modified is ", describe(self));
  check_storable(result.dtype(), self, op);
  return cast_to(result, self.dtype());
}

// The out-of-place way: recorded when a graph is, and giving the new tangents when some
// operand is dual.
// An operand sharing memory with self (x.mul_(x), or a view of x) is read as it was before
// the write: a clone, so that what backward saves of it is not the tensor being overwritten
// (whose new history would then hold it: a reference cycle, and a version error).
template <class Compute>
Tensor& functional(Tensor& self, const Tensor* other, bool recording, const char* op,
                   Compute& compute) {
  const Tensor old_other =
      other && other->defined() && other->shares_storage(self) ? other->clone() : Tensor();
  Tensor result = compute(self.clone(), old_other.defined() ? old_other
                                        : other             ? *other
                                                            : old_other);
  return commit(self, result, recording, op);
}

// Note [In-place ops in the stack]
// While some optional layer is on, an in-place op passes the dispatch stack as an InplaceCall
// (below), and each layer handles its own part of it, in its own file:
// - Trace: records the op's value, computed out of place with ops, as a write; nothing is
//   written (OpCall::writes_in_place, run_out_of_place).
// - Observe: profiles, memory timelines and FLOP counts see add_, mul_, fill_, copy_, ..., the
//   optimizer's updates among them.
// - Autograd: a recorded op, or one whose tensors have a tangent, goes the out-of-place way
//   (the ways' autograd).
// - OpCache: passes it on; its write happens at every run of a checkpointed region.
// - Batching: an operand batched by vmap sends it the out-of-place way, written through the
//   physical values.
// - Kernel: the kernel writes the tensor.
// With every optional layer off (the eager path) no call is built: the Autograd way runs with
// the kernel right below it, as apply<Op> does. The checks (a leaf that requires grad, an
// expanded tensor, a view's rules) come first, the same whichever layers are on.

// Runs an in-place op through the stack when it is on, else its Autograd way with the kernel
// below it.
template <class Ways>
Tensor& run_inplace(Tensor& self, const Tensor* other, const char* op, Ways& ways) {
  if (detail::inplace_stack_on()) [[unlikely]] {
    const std::array<Tensor, 2> tensors{self, other ? *other : Tensor()};
    detail::InplaceCall call(op, std::span(tensors.data(), other ? 2 : 1), ways);
    (void)call.dispatch();
    return self;
  }
  ways.autograd_then([&] { ways.direct(); });
  return self;
}

// An op whose new value is compute(self, other): the arithmetic ops and clamp_.
template <class Compute, class Direct>
class UpdateWays final : public detail::InplaceWays {
 public:
  UpdateWays(Tensor& self, const Tensor* other, bool recording, const char* op, Compute& compute,
             Direct& direct)
      : self_(self),
        other_(other),
        recording_(recording),
        op_(op),
        compute_(compute),
        direct_(direct) {}
  Tensor value() override {
    return new_value(self_, compute_(self_, other_ ? *other_ : Tensor()), op_);
  }
  template <class Below>
  void autograd_then(Below below) {
    if (recording_ || dual_with(self_, other_)) {
      functional(self_, other_, recording_, op_, compute_);
    } else {
      below();
    }
  }
  void autograd(detail::OpCall& call) override {
    autograd_then([&] { (void)call.next(Layer::Autograd); });
  }
  void batched() override { functional(self_, other_, false, op_, compute_); }
  void direct() override { direct_(); }

 private:
  Tensor& self_;
  const Tensor* other_;
  bool recording_;
  const char* op_;
  Compute& compute_;
  Direct& direct_;
};

template <class Compute, class Direct>
Tensor& update(Tensor& self, const Tensor* other, const char* op, Compute compute, Direct direct) {
  const bool recording = recording_with(self, other);
  check_inplace(self, recording, op);
  UpdateWays<Compute, Direct> ways(self, other, recording, op, compute, direct);
  return run_inplace(self, other, op, ways);
}

// fill_ and zero_: the value is a constant, so nothing flows back to the old one.
class FillWays final : public detail::InplaceWays {
 public:
  FillWays(Tensor& self, Scalar v, bool recording) : self_(self), v_(v), recording_(recording) {}
  Tensor value() override { return full_like(self_, v_); }
  template <class Below>
  void autograd_then(Below below) {
    check_dual_inplace(self_, nullptr, "fill_");
    if (recording_ && detail::is_tracked_view(self_)) {
      // The view's window of the base becomes a constant (Note [Views and in-place ops]).
      commit(self_, full_like(self_, v_), true, "fill_");
      return;
    }
    if (recording_) self_.detach_();  // a tensor with history loses it
    below();
    update_tangents(self_, nullptr);  // a constant: a dual's tangent becomes zero
  }
  void autograd(detail::OpCall& call) override {
    autograd_then([&] { (void)call.next(Layer::Autograd); });
  }
  void batched() override {
    detail::write_batched(self_, full_like(self_, v_), "fill_");
    bump(self_);
  }
  void direct() override {
    kernels::fill(unique_elements(self_), v_);
    bump(self_);
  }

 private:
  Tensor& self_;
  Scalar v_;
  bool recording_;
};

// copy_: the value is the source's, so a recorded copy gives self the source's history.
class CopyWays final : public detail::InplaceWays {
 public:
  CopyWays(Tensor& self, const Tensor& src, bool recording)
      : self_(self), src_(src), recording_(recording) {}
  Tensor value() override {
    return new_value(self_, adjoint::expand(src_, self_.shape()), "copy_");
  }
  template <class Below>
  void autograd_then(Below below) {
    if (recording_ || dual_with(self_, &src_)) {
      write_value(recording_);
    } else {
      below();
    }
  }
  void autograd(detail::OpCall& call) override {
    autograd_then([&] { (void)call.next(Layer::Autograd); });
  }
  void batched() override { write_value(false); }
  void direct() override {
    kernels::copy_into(self_, unaliased(self_, src_));  // Note [Operands that overlap ...]
    bump(self_);
  }

 private:
  // The source as copy_ writes it, read before the write (a clone, recorded when recording).
  void write_value(bool recording) {
    Tensor value = cast_to(adjoint::expand(src_, self_.shape()), self_.dtype());
    if (value.shares_storage(self_)) value = value.clone();
    if (!recording) {
      commit(self_, value, false, "copy_");
      return;
    }
    check_dual_inplace(self_, &value, "copy_");  // before detach_: an error changes nothing
    if (!value.requires_grad() && !detail::is_tracked_view(self_)) self_.detach_();
    commit(self_, value, true, "copy_");
  }

  Tensor& self_;
  const Tensor& src_;
  bool recording_;
};

}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  check_alpha(result_type(*this, o), alpha, "add_");
  return update(
      *this, &o, "add_",
      [&](const Tensor& s, const Tensor& b) { return adjoint::add(s, b, alpha); },
      [&] {
        if (alpha.to_double() != 1) {
          direct_add_scaled(*this, o, alpha.to_double(), "add_");
        } else {
          direct_binary(*this, Binary::Add, o, "add_");
        }
      });
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  check_alpha(result_type(*this, o), alpha, "sub_");
  return update(
      *this, &o, "sub_",
      [&](const Tensor& s, const Tensor& b) { return adjoint::sub(s, b, alpha); },
      [&] {
        if (alpha.to_double() != 1) {
          direct_add_scaled(*this, o, -alpha.to_double(), "sub_");
        } else {
          direct_binary(*this, Binary::Sub, o, "sub_");
        }
      });
}
Tensor& Tensor::mul_(const Tensor& o) {
  return update(
      *this, &o, "mul_", [](const Tensor& s, const Tensor& b) { return adjoint::mul(s, b); },
      [&] { direct_binary(*this, Binary::Mul, o, "mul_"); });
}
Tensor& Tensor::div_(const Tensor& o) {
  return update(
      *this, &o, "div_", [](const Tensor& s, const Tensor& b) { return adjoint::div(s, b); },
      [&] {
        check_storable(kDefaultFloat, *this, "div_");  // true division gives floats
        direct_binary(*this, Binary::Div, o, "div_");
      });
}
Tensor& Tensor::add_(Scalar o) {
  return update(
      *this, nullptr, "add_", [&](const Tensor& s, const Tensor&) { return adjoint::add(s, o); },
      [&] { direct_unary(*this, Unary::AddScalar, o, "add_"); });
}
Tensor& Tensor::sub_(Scalar o) {
  if (o.is_floating()) return add_(-o.to_double());
  // Negated in unsigned arithmetic: -INT64_MIN wraps to itself, as int64 does in PyTorch.
  return add_(static_cast<int64_t>(0 - static_cast<uint64_t>(o.to_int())));
}
Tensor& Tensor::mul_(Scalar o) {
  return update(
      *this, nullptr, "mul_", [&](const Tensor& s, const Tensor&) { return adjoint::mul(s, o); },
      [&] { direct_unary(*this, Unary::MulScalar, o, "mul_"); });
}
Tensor& Tensor::div_(Scalar o) {
  return update(
      *this, nullptr, "div_", [&](const Tensor& s, const Tensor&) { return adjoint::div(s, o); },
      [&] {
        check_storable(kDefaultFloat, *this, "div_");
        direct_unary(*this, Unary::MulScalar, 1.0 / o.to_double(), "div_");
      });
}
Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  return update(
      *this, nullptr, "clamp_",
      [&](const Tensor& s, const Tensor&) { return adjoint::clamp(s, lo, hi); },
      [&] {
        ADJOINT_CHECK(lo || hi, Value, "clamp_", "at least one of min and max must be given");
        ADJOINT_CHECK(dtype() != DType::Bool, DType, "clamp_", "not supported for bool tensors (",
                      describe(*this), ")");
        auto integral = [](std::optional<double> v) {
          return !v || (detail::fits_int64(*v) && *v == std::trunc(*v));
        };
        ADJOINT_CHECK(is_floating(dtype()) || (integral(lo) && integral(hi)), DType, "clamp_",
                      "a bound that is not an integer gives a floating result, which cannot be "
                      "stored in ",
                      describe(*this));
        if (lo) kernels::unary_into(Unary::ClampMin, *this, *this, *lo);
        if (hi) kernels::unary_into(Unary::ClampMax, *this, *this, *hi);
        bump(*this);
      });
}

// fill_, zero_ and copy_ replace the value: nothing flows back to the old one, so a tensor
// with history loses it (fill_) or takes the source's (copy_).
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(Scalar v) {
  const bool recording = recording_with(*this, nullptr);
  check_inplace(*this, recording, "fill_", Overlap::Allow);
  FillWays ways(*this, v, recording);
  return run_inplace(*this, nullptr, "fill_", ways);
}
Tensor& Tensor::copy_(const Tensor& src) {
  ADJOINT_CHECK(src.defined(), Value, "copy_", "source is an undefined tensor");
  check_broadcast_into(*this, src, "copy_");
  const bool recording = recording_with(*this, &src);
  check_inplace(*this, recording, "copy_");
  CopyWays ways(*this, src, recording);
  return run_inplace(*this, &src, "copy_", ways);
}

}  // namespace adjoint
