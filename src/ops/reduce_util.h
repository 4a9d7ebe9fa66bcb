// Helpers for reductions: dim lists, keepdim shapes, and broadcasting a reduced gradient back.
#pragma once

#include <vector>

#include "ops/common.h"

namespace adjoint {

/// Wraps, checks for duplicates and sorts `dims`; an empty list means every dim.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
/// The shape a reduction over `dims` (normalized, as normalize_dims gives them) makes of `x`,
/// checked as the public functions check their dims: an imported reduction's `infer` (Note
/// [Checking an imported graph] in src/export/import.cpp). The dtype is left to the kernel.
detail::OutputSpec reduced_spec(const detail::ValueSpec& x, const std::vector<int64_t>& dims,
                                bool keepdim, const char* op);
/// `in` with the reduced dims set to 1.
Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims);
/// A gradient of a reduction, reshaped to keepdim form and expanded to the input's shape.
Tensor expand_reduced(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims,
                      bool keepdim);

}  // namespace adjoint
