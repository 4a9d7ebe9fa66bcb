// Checks and small helpers the transforms share: argnums, differentiable primals, tangents
// and cotangents that must match, one-hot seeds, and the scalar-output rule of grad.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/tensor.h"
#include "adjoint/transforms.h"

namespace adjoint::detail {

/// Throws unless primal i can be differentiated (defined and floating).
void check_differentiable(const Tensor& primal, std::size_t i, const char* op);
/// Throws unless `given` matches `like` one to one in shape and dtype; `what` names them
/// ("tangent", "cotangent") and `of` their partners ("primal", "output").
void check_matching(const std::vector<Tensor>& given, const std::vector<Tensor>& like,
                    const char* what, const char* of, const char* op);
/// Throws unless f returned exactly one floating tensor with one element.
void check_scalar_output(const std::vector<Tensor>& outputs, const char* op);
/// Throws unless every output is a defined floating tensor (Jacobians of integers are zero
/// by definition and almost always a mistake).
void check_floating_outputs(const std::vector<Tensor>& outputs, const char* op);
/// A tensor shaped and typed like `like`, zero except a one at flat index i.
Tensor one_hot_like(const Tensor& like, int64_t i);
/// like.shape + arg.shape
Shape concat_shapes(const Shape& a, const Shape& b);

}  // namespace adjoint::detail
