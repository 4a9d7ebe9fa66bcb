// The fused loop: a group of pointwise ops as one small program over blocks of elements, and
// the graph node that runs it (Note [Pointwise fusion] in fusion.cpp).
#pragma once

#include <memory>
#include <vector>

#include "adjoint/tensor.h"
#include "dispatch/layer.h"

namespace adjoint::detail {

/// One op of the group: dst = kernel(src0[, src1[, src2]]) over a block, registers by index.
struct Instr {
  PointwiseKernel kernel;
  int dst;
  int src0;
  int src1;       // -1 for a unary kind
  int src2 = -1;  // where's third operand (src0 is its condition)
  /// The member's result dtype: a 16-bit one rounds dst to it after the op, as the op's own
  /// kernel rounds its float32 result (Note [Fusing 16-bit values and casts] in fusion.cpp).
  DType result = DType::Float32;
};

/// A group as one program over registers (one block of elements each).
struct Program {
  DType dtype;  ///< the registers' dtype: float32 (for 16-bit values too) or float64
  Shape shape;
  int num_registers = 0;
  std::vector<int> input_register;  // by fused input
  /// By fused input: `dtype`, a 16-bit float (widened as it is read) or bool (a where's
  /// condition, read as 0 or 1).
  std::vector<DType> input_dtype;
  std::vector<int> output_register;  // by fused output
  std::vector<DType> output_dtype;   // by fused output: `dtype` or a 16-bit float
  std::vector<Instr> code;
  /// A full sum ends the group: its register is summed (in double, 16 interleaved running sums
  /// per block, then the blocks in order: the same for any number of threads and on every
  /// instruction set) into the one output,
  /// of shape `reduced_shape`.
  int sum_register = -1;
  Shape reduced_shape;
  /// 0 for a full sum; else the sum runs over the trailing dims, `sum_inner` elements per
  /// output, each row summed in the eager reduction's chunks (Note [Floating sums in chunks]
  /// in src/backend/cpu/reduce.cpp).
  int64_t sum_inner = 0;
};

/// A fused group as a graph node keeps it. A replay runs `program`; under vmap or jvp the
/// members run one by one through the stack instead, on slots: the fused inputs first
/// (`num_inputs`), then one per member's result (`member_output`), the outputs being
/// `output_slot`.
std::shared_ptr<const TracedOp> make_fused_op(Program program,
                                              std::vector<std::shared_ptr<const TracedOp>> members,
                                              std::vector<std::vector<int>> member_inputs,
                                              std::vector<int> member_output,
                                              std::vector<int> output_slot, int num_inputs);

}  // namespace adjoint::detail
