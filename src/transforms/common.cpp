// Shared checks of the transforms; see common.h.
#include "transforms/common.h"

#include <algorithm>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

namespace adjoint::detail {

std::vector<int> resolve_argnums(const std::vector<int>& given, bool all, std::size_t n,
                                 const char* op) {
  std::vector<int> idx;
  if (all) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(static_cast<int>(i));
    return idx;
  }
  ADJOINT_CHECK(!given.empty(), Value, op, "argnums is empty: nothing to differentiate");
  for (int a : given) {
    ADJOINT_CHECK(a >= 0 && static_cast<std::size_t>(a) < n, Index, op, "argnums ", a,
                  " is out of range for a function called with ", n,
                  n == 1 ? " argument" : " arguments");
    ADJOINT_CHECK(std::find(idx.begin(), idx.end(), a) == idx.end(), Value, op, "argnums ", a,
                  " is given twice");
    idx.push_back(a);
  }
  return idx;
}

void check_differentiable(const Tensor& primal, std::size_t i, const char* op) {
  ADJOINT_CHECK(primal.defined(), Value, op, "argument ", i, " is an undefined tensor");
  ADJOINT_CHECK(is_floating(primal.dtype()), DType, op, "argument ", i, " is ", describe(primal),
                ": only floating tensors can be differentiated");
}

void check_matching(const std::vector<Tensor>& given, const std::vector<Tensor>& like,
                    const char* what, const char* of, const char* op) {
  ADJOINT_CHECK(given.size() == like.size(), Value, op, "got ", given.size(), " ", what,
                given.size() == 1 ? "" : "s", " for ", like.size(), " ", of,
                like.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < given.size(); ++i) {
    ADJOINT_CHECK(given[i].defined(), Value, op, what, " ", i, " is an undefined tensor");
    ADJOINT_CHECK(given[i].shape() == like[i].shape(), Shape, op, what, " ", i, " is ",
                  describe(given[i]), " but ", of, " ", i, " is ", describe(like[i]));
    ADJOINT_CHECK(given[i].dtype() == like[i].dtype(), DType, op, what, " ", i, " is ",
                  describe(given[i]), " but ", of, " ", i, " is ", describe(like[i]));
  }
}

void check_scalar_output(const std::vector<Tensor>& outputs, const char* op) {
  ADJOINT_CHECK(outputs.size() == 1, Value, op, "the function must return one scalar tensor, got ",
                outputs.size(), " outputs; use jacrev or vjp for several outputs");
  const Tensor& y = outputs[0];
  ADJOINT_CHECK(y.defined(), Value, op, "the function returned an undefined tensor");
  ADJOINT_CHECK(y.numel() == 1, Shape, op,
                "the function must return a scalar (one element) to take its gradient, got ",
                describe(y), "; use jacrev or vjp for non-scalar outputs");
  ADJOINT_CHECK(is_floating(y.dtype()), DType, op, "the function returned ", describe(y),
                ": only floating outputs can be differentiated");
}

void check_floating_outputs(const std::vector<Tensor>& outputs, const char* op) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ADJOINT_CHECK(outputs[i].defined(), Value, op, "output ", i, " is an undefined tensor");
    ADJOINT_CHECK(is_floating(outputs[i].dtype()), DType, op, "output ", i, " is ",
                  describe(outputs[i]), ": only floating outputs have a Jacobian");
  }
}

Tensor one_hot_like(const Tensor& like, int64_t i) {
  Tensor t = zeros(like.shape(), like.dtype());
  // Element i of the fresh contiguous tensor, set by the kernel of its device.
  kernels::fill(make_view(t, {}, {}, i), 1);
  return t;
}

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  for (int64_t d : b) s.push_back(d);
  return s;
}

}  // namespace adjoint::detail
