// Compile's fused pointwise programs as kernels: what a group of pointwise ops computes per
// element, as a small program over registers, and each device's executor of it (Note [Fused
// programs are kernels]).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "adjoint/device.h"
#include "adjoint/tensor.h"
#include "backend/kernels.h"

namespace adjoint::kernels {

// Note [Fused programs are kernels]
// compile's fusion (src/compile/fusion.cpp) turns a group of pointwise ops, optionally ended by
// a sum, max or min, into a FusedProgram: device-free data, like a kernel's arguments. Running
// it is a kernel of the table (kernel_lists/fused.inc): the CPU's executor interprets it over
// blocks of elements in the first-level cache (src/backend/cpu/fused_program.cpp), meta gives
// the outputs' shapes and dtypes, and a CUDA table would generate one kernel per program. What
// an executor works out once per program (the CPU fetches each instruction's vectorised kernel)
// is a PreparedFusedProgram, which the graph's node keeps across runs.

/// How a pointwise op computes each element, for compile's fusion: one unary kind with its
/// scalar parameters, or one binary kind whose operands broadcast, on one floating dtype. An
/// op struct that is pointwise says so with a member `PointwiseKernel fusion() const`, beside
/// its forward.
struct PointwiseKernel {
  bool is_binary = false;
  Unary unary = Unary::Neg;
  Binary binary = Binary::Add;
  double a = 0, b = 0;
  /// where(cond, x, y): cond (a bool input, read as 0 or 1) picks x where it is not zero.
  bool is_where = false;
  /// A cast between floating dtypes of one opmath dtype (float32 and the 16-bit floats): the
  /// value is copied, and the rounding every 16-bit result gets in a fused loop does the rest.
  bool is_cast = false;
  static PointwiseKernel of(Unary k, double a = 0, double b = 0) {
    return {false, k, Binary::Add, a, b};
  }
  static PointwiseKernel of(Binary k) { return {true, Unary::Neg, k, 0, 0}; }
  static PointwiseKernel where() {
    PointwiseKernel k;
    k.is_where = true;
    return k;
  }
  static PointwiseKernel cast() {
    PointwiseKernel k;
    k.is_cast = true;
    return k;
  }
};

/// One op of the group: dst = kernel(src0[, src1[, src2]]) over a block, registers by index.
struct FusedInstr {
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
  ScalarStep epilogue = ScalarStep::None;
  double epilogue_value = 0;
  /// A mul or add by a constant merged into the operand it computes, of a binary instruction
  /// (Add or Mul): operand `prologue_operand` (0 for src0, 1 for src1) is read as
  /// operand * prologue_value (or + prologue_value).
  ScalarStep prologue = ScalarStep::None;
  int prologue_operand = 0;
  double prologue_value = 0;
};

/// A group as one program over registers (one block of elements each).
struct FusedProgram {
  DType dtype;  ///< the registers' dtype: float32 (for 16-bit values too) or float64
  Shape shape;
  int num_registers = 0;
  std::vector<int> input_register;  // by fused input
  /// By fused input: `dtype`, a 16-bit float (widened as it is read) or bool (a where's
  /// condition, read as 0 or 1).
  std::vector<DType> input_dtype;
  std::vector<int> output_register;  // by fused output
  std::vector<DType> output_dtype;   // by fused output: `dtype` or a 16-bit float
  std::vector<FusedInstr> code;
  /// A sum, max or min ends the group: register `reduced_register` is reduced into one more
  /// output (below, "summed"; a max or min folds element by element where a sum adds), after the
  /// written ones, of shape `reduced_shape` (Note [Sums that end a fused loop] in
  /// src/backend/cpu/fused_program.cpp). How, as eager code sums a contiguous tensor, bit for
  /// bit:
  /// - over every dim (reduce_inner and reduce_columns 0): in chunks of 16 interleaved double sums,
  ///   the chunks in order (Note [Floating sums in chunks] in src/backend/cpu/reduce.cpp);
  /// - over trailing dims (reduce_inner > 0 elements per output): each row in those chunks;
  /// - over leading dims (reduce_columns > 0 outputs): each column in one double per chunk of
  ///   kSumChunkRows rows, row by row, then the chunks in order.
  int reduced_register = -1;
  Reduce reduce_kind = Reduce::Sum;  ///< Sum, Max or Min
  Shape reduced_shape;
  int64_t reduce_inner = 0;
  int64_t reduce_columns = 0;
};

/// What one device's executor worked out for one program, kept across runs (Note [Fused
/// programs are kernels]); `device` says whose it is.
struct PreparedFusedProgram {
  explicit PreparedFusedProgram(DeviceType d) : device(d) {}
  virtual ~PreparedFusedProgram() = default;
  DeviceType device;
};

/// An error naming the fused op unless `inputs` are the program's: one per input register, each
/// of its input dtype and broadcasting to its shape. Every executor checks first: the program
/// comes from a graph, and a graph read from a file (export) could say anything.
void check_fused_inputs(const FusedProgram& program, std::span<const Tensor> inputs);

#include "backend/kernel_lists/fused.inc"

}  // namespace adjoint::kernels
