// The fused loop: a group of pointwise ops as one small program over blocks of elements, and
// the graph node that runs it (Note [Pointwise fusion] in fusion.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adjoint/tensor.h"
#include "backend/fused_program.h"
#include "dispatch/layer.h"

namespace adjoint::detail {

/// The program and its instructions are kernel arguments (backend/fused_program.h): compile
/// builds them, each device's executor runs them.
using Instr = kernels::FusedInstr;
using Program = kernels::FusedProgram;

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
