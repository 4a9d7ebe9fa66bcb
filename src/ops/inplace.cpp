// In-place ops (add_, mul_, zero_, copy_, ...). Each computes its result with the
// out-of-place op, writes it into the tensor's storage and bumps the storage's version, so
// nodes that saved the old values notice (see Note [Saved tensor versions]). When the op is
// recorded, the tensor's history moves to the new node, and the out-of-place op runs on a
// clone of the old value because it may save it.
#include "adjoint/error.h"
#include "ops/common.h"

namespace adjoint {
namespace {

bool recording_with(const Tensor& self, const Tensor* other) {
  return is_grad_enabled() && (self.requires_grad() || (other && other->requires_grad()));
}

void check_inplace(const Tensor& self, bool recording, const char* op) {
  ADJOINT_CHECK(self.defined(), Value, op, "called on an undefined tensor");
  if (!is_grad_enabled()) return;
  ADJOINT_CHECK(
      !(self.is_leaf() && self.requires_grad()), Autograd, op, "a leaf tensor that requires grad (",
      describe(self),
      ") cannot be modified in place; do it under NoGradGuard, or use the out-of-place op");
  ADJOINT_CHECK(!(recording && self.impl()->is_view), NotImplemented, op,
                "in-place modification of a view (", describe(self),
                ") while recording gradients is not supported yet; use the out-of-place op");
}

Tensor& commit(Tensor& self, const Tensor& result, bool recording, const char* op) {
  ADJOINT_CHECK(result.shape() == self.shape(), Shape, op, "the result has shape ", result.shape(),
                " but the tensor being modified is ", describe(self));
  ADJOINT_CHECK(promote_types(result.dtype(), self.dtype()) == self.dtype(), DType, op,
                "the result type ", result.dtype(), " cannot be stored in ", describe(self));
  kernels::copy_into(self, result);
  self.impl()->storage->bump_version();
  if (recording && result.requires_grad()) {
    AutogradMeta& m = self.impl()->meta();
    m.requires_grad = true;
    m.grad_fn = result.grad_fn();
    m.output_nr = result.impl()->autograd->output_nr;
    ADJOINT_ASSERT(m.grad_fn || result.is_leaf());
    if (!m.grad_fn) m.grad_fn = autograd::gradient_edge(result).node;  // result was a leaf
  }
  if (Tensor t = result.tangent(); t.defined())
    self.impl()->meta().tangent = cast_to(t, self.dtype());
  return self;
}

template <class Compute>
Tensor& inplace(Tensor& self, const Tensor* other, const char* op, Compute compute) {
  const bool recording = recording_with(self, other);
  check_inplace(self, recording, op);
  Tensor result = compute(recording ? self.clone() : self);
  return commit(self, result, recording, op);
}

// fill_, zero_ and copy_ replace the value, so nothing flows back to the old one.
Tensor& overwrite(Tensor& self, const Tensor& value, const Tensor* other, const char* op) {
  const bool recording = recording_with(self, other);
  check_inplace(self, recording, op);
  if (recording && !value.requires_grad()) self.detach_();
  return commit(self, value, recording, op);
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  return inplace(*this, &o, "add_", [&](const Tensor& s) { return adjoint::add(s, o, alpha); });
}
Tensor& Tensor::add_(Scalar o) {
  return inplace(*this, nullptr, "add_", [&](const Tensor& s) { return adjoint::add(s, o); });
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  return inplace(*this, &o, "sub_", [&](const Tensor& s) { return adjoint::sub(s, o, alpha); });
}
Tensor& Tensor::sub_(Scalar o) {
  return inplace(*this, nullptr, "sub_", [&](const Tensor& s) { return adjoint::sub(s, o); });
}
Tensor& Tensor::mul_(const Tensor& o) {
  return inplace(*this, &o, "mul_", [&](const Tensor& s) { return adjoint::mul(s, o); });
}
Tensor& Tensor::mul_(Scalar o) {
  return inplace(*this, nullptr, "mul_", [&](const Tensor& s) { return adjoint::mul(s, o); });
}
Tensor& Tensor::div_(const Tensor& o) {
  return inplace(*this, &o, "div_", [&](const Tensor& s) { return adjoint::div(s, o); });
}
Tensor& Tensor::div_(Scalar o) {
  return inplace(*this, nullptr, "div_", [&](const Tensor& s) { return adjoint::div(s, o); });
}
Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  return inplace(*this, nullptr, "clamp_",
                 [&](const Tensor& s) { return adjoint::clamp(s, lo, hi); });
}
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(Scalar v) {
  return overwrite(*this, full(shape(), v, dtype()), nullptr, "fill_");
}
Tensor& Tensor::copy_(const Tensor& src) {
  ADJOINT_CHECK(src.defined(), Value, "copy_", "source is an undefined tensor");
  Tensor value = cast_to(adjoint::expand(src, shape()), dtype());
  return overwrite(*this, value, &src, "copy_");
}

}  // namespace adjoint
