// The fused loop: a group of pointwise ops as one small program over blocks of elements, and
// the graph node that runs it (Note [Pointwise fusion] in fusion.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adjoint/tensor.h"
#include "backend/cpu/simd_math.h"
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
  /// A mul or add by a constant merged into this instruction (Note [Epilogues] in
  /// merge_scalar_steps.cpp): dst = op(...) then dst = dst * epilogue_value (or +
  /// epilogue_value), in one pass.
  kernels::ScalarStep epilogue = kernels::ScalarStep::None;
  double epilogue_value = 0;
  /// A mul or add by a constant merged into the operand it computes, of a binary instruction
  /// (Add or Mul): operand `prologue_operand` (0 for src0, 1 for src1) is read as
  /// operand * prologue_value (or + prologue_value).
  kernels::ScalarStep prologue = kernels::ScalarStep::None;
  int prologue_operand = 0;
  double prologue_value = 0;
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
  /// A sum, max or min ends the group: register `reduced_register` is reduced into one more
  /// output (below, "summed"; a max or min folds element by element where a sum adds), after the
  /// written ones, of shape `reduced_shape` (Note [Sums that end a fused loop] in
  /// fused_loop.cpp). How, as eager code sums a contiguous tensor, bit for bit:
  /// - over every dim (reduce_inner and reduce_columns 0): in chunks of 16 interleaved double sums,
  ///   the chunks in order (Note [Floating sums in chunks] in src/backend/cpu/reduce.cpp);
  /// - over trailing dims (reduce_inner > 0 elements per output): each row in those chunks;
  /// - over leading dims (reduce_columns > 0 outputs): each column in one double per chunk of
  ///   kSumChunkRows rows, row by row, then the chunks in order.
  int reduced_register = -1;
  kernels::Reduce reduce_kind = kernels::Reduce::Sum;  ///< Sum, Max or Min
  Shape reduced_shape;
  int64_t reduce_inner = 0;
  int64_t reduce_columns = 0;
};

/// Merges each mul or add by a constant into the instruction that computes its operand, when
/// nothing else reads that operand (an epilogue), or else into the one binary instruction
/// that reads its result (a prologue) (Note [Epilogues] in src/compile/merge_scalar_steps.cpp);
/// returns how many were merged.
int merge_scalar_steps(Program& p);

/// The program as text, one line per instruction, each line starting with `indent` (the
/// graph dump lists each fused node's program under it).
std::string program_text(const Program& p, const std::string& indent);

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
