// Helpers shared by the op families: type promotion (PyTorch's result_type), promotion of
// integer inputs for ops that need floats, and reading a Scalar as a double.
#pragma once

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

namespace adjoint {

using detail::PointwiseKernel;
using kernels::Binary;
using kernels::Unary;

/// For pointwise ops whose derivative is a factor f'(x): VJP = gy * f'(x), JVP = tx * f'(x).
/// Derived provides factor(const Ctx&) (static or member) computed from what it saved.
template <class Derived>
struct Pointwise {
  static constexpr Batching batching = Batching::Pointwise;  // one rule: see vmap/batch_rule.h
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return gy * static_cast<const Derived*>(this)->factor(c);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return tx * static_cast<const Derived*>(this)->factor(c);
  }
};

/// A value an imported graph records, described as describe(Tensor) describes a tensor.
inline std::string describe(const detail::ValueSpec& v) {
  return v.defined ? detail::str(v.shape, " (", v.dtype, ")") : "undefined tensor";
}
/// An op's `infer` (Note [Checking an imported graph] in src/export/import.cpp): input i of
/// `in`, which must be defined.
inline const detail::ValueSpec& spec_of(std::span<const detail::ValueSpec> in, std::size_t i,
                                        const char* op) {
  ADJOINT_CHECK(i < in.size() && in[i].defined, Value, op, "input ", i, " is undefined or missing");
  return in[i];
}

/// A constant made on CPU from C++ values (an index list, a mask), given to `like`'s device:
/// on meta only its shape and dtype travel.
inline Tensor on_device_of(const Tensor& constant, const Tensor& like) {
  return constant.device() == like.device() ? constant : constant.to(like.device());
}

/// Category used by promotion: bool 0, integer 1, floating 2.
inline int type_category(DType d) { return static_cast<int>(dtype_info(d).kind); }

/// Result dtype of a binary op on two tensors. Dimensioned tensors decide over 0-d tensors,
/// unless a 0-d tensor is of a higher category (torch.result_type).
inline DType result_type(const Tensor& a, const Tensor& b) {
  const bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 == b0) return promote_types(a.dtype(), b.dtype());
  const Tensor& dimmed = a0 ? b : a;
  const Tensor& zero_d = a0 ? a : b;
  if (type_category(zero_d.dtype()) > type_category(dimmed.dtype())) return zero_d.dtype();
  return dimmed.dtype();
}

/// Result dtype of a tensor with a number: the number only matters when of a higher category.
inline DType result_type(const Tensor& a, Scalar s) {
  if (type_category(s.kind()) <= type_category(a.dtype())) return a.dtype();
  return s.is_floating() ? kDefaultFloat : DType::Int64;
}

/// x itself if floating, else x converted to the default float dtype.
inline Tensor to_floating(const Tensor& x) {
  return is_floating(x.dtype()) ? x : x.to(kDefaultFloat);
}

/// a + b where both are defined, else whichever is (undefined when neither): JVP rules that
/// take undefined tangents (jvp_undefined_is_zero in autograd/apply.h) add their terms so.
inline Tensor sum_defined(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}

/// PyTorch's alpha_check for add/sub(a, b, alpha) whose result has dtype `result`: a floating
/// alpha would need a floating result, a bool alpha a bool one.
inline void check_alpha(DType result, Scalar alpha, const char* op) {
  ADJOINT_CHECK(alpha.kind() != DType::Bool || result == DType::Bool, DType, op,
                "boolean alpha only supported for boolean results");
  ADJOINT_CHECK(is_floating(result) || !alpha.is_floating(), DType, op,
                "for integral input tensors, argument alpha must not be a floating point number, "
                "got alpha = ",
                alpha.to_double(), " with ", result, " inputs");
}

/// x converted to dtype (no-op when equal).
inline Tensor cast_to(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : x.to(dtype); }

}  // namespace adjoint
