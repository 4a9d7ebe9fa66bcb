// compile's fused programs on meta: the outputs' shapes and dtypes, after the checks every
// executor makes (Note [Fused programs are kernels] in backend/fused_program.h).
#include "backend/device_kernels.h"
#include "backend/meta/meta_util.h"

namespace adjoint::kernels {

std::shared_ptr<const PreparedFusedProgram> meta::prepare_fused_program(Device,
                                                                        const FusedProgram&) {
  return nullptr;
}

std::vector<Tensor> meta::run_fused_program(const FusedProgram& program,
                                            const PreparedFusedProgram*,
                                            std::span<const Tensor> inputs) {
  check_fused_inputs(program, inputs);
  std::vector<Tensor> outs;
  for (DType dtype : program.output_dtype) outs.push_back(result(program.shape, dtype));
  if (program.reduced_register >= 0) outs.push_back(result(program.reduced_shape, program.dtype));
  return outs;
}

}  // namespace adjoint::kernels
