// What every executor of a fused program checks of its inputs (backend/fused_program.h).
#include "backend/fused_program.h"

#include "adjoint/error.h"

namespace adjoint::kernels {

void check_fused_inputs(const FusedProgram& program, std::span<const Tensor> inputs) {
  ADJOINT_CHECK(program.dtype == DType::Float32 || program.dtype == DType::Float64, DType,
                "fused pointwise", "registers of dtype ", program.dtype,
                " (a program computes in float32 or float64)");
  ADJOINT_CHECK(inputs.size() == program.input_register.size(), Value, "fused pointwise",
                "expected ", program.input_register.size(), " inputs, got ", inputs.size());
  const Shape& shape = program.shape;
  const int64_t group_rank = static_cast<int64_t>(shape.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    ADJOINT_CHECK(x.dtype() == program.input_dtype[k], DType, "fused pointwise", "input ", k,
                  " is ", x.dtype(), " where the program reads ", program.input_dtype[k]);
    bool broadcasts = x.dim() <= group_rank;
    for (int64_t d = 1; broadcasts && d <= x.dim(); ++d) {
      const int64_t xs = x.shape()[x.dim() - d], gs = shape[group_rank - d];
      broadcasts = xs == gs || xs == 1;
    }
    ADJOINT_CHECK(broadcasts, Shape, "fused pointwise", "an input of shape ", x.shape(),
                  " does not broadcast to the group's shape ", shape,
                  " (a graph whose values disagree with its ops)");
  }
}

}  // namespace adjoint::kernels
