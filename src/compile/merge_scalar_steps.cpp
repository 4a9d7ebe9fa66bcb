// A fused loop's multiplies and adds by constants merged into their neighbours' passes.
#include <algorithm>

#include "backend/cpu/simd_math.h"  // which steps the CPU's executor's vectorised kernels take
#include "compile/fused_loop.h"

namespace adjoint::detail {

// Note [Epilogues]
// Zen 4 stores one 512-bit vector per two cycles, and a simple instruction of a fused loop (an
// add, a multiply by a constant) costs just that: each pass over a block is bound by its
// stores, so the number of passes sets the time. A multiply or add by a constant (a scalar
// step, kernels::ScalarStep) is merged into a neighbouring pass where nothing is lost:
// - as an epilogue of the instruction that computes its operand, when it is that value's only
//   reader: the kernel applies it to each result in registers before its one store;
// - else as a prologue of the one instruction that reads its result, when that is an add or a
//   multiply: the kernel applies it to that operand as it loads it.
// The bits are those of the separate passes: the kernels round after each operation, as the
// separate kernels do (simd_math.cpp is compiled without contraction into fused multiply-adds).
// A step is merged only when its result is of the registers' dtype (a 16-bit result is rounded
// between the two), and only into an instruction that has a vectorised kernel for it.
// pointwise-chain's tanh-GELU: its 9 forward instructions become 5 and its 18 backward ones 10.

namespace {

using kernels::ScalarStep;

// The instruction as a scalar step, or None.
ScalarStep step_of(const Program& p, const Instr& in) {
  const PointwiseKernel& k = in.kernel;
  if (k.is_binary || k.is_cast || k.is_where || in.result != p.dtype ||
      in.epilogue != ScalarStep::None)  // (a step with an epilogue of its own is two steps)
    return ScalarStep::None;
  if (k.unary == kernels::Unary::MulScalar) return ScalarStep::MulScalar;
  if (k.unary == kernels::Unary::AddScalar) return ScalarStep::AddScalar;
  return ScalarStep::None;
}

bool reads(const Instr& in, int r) { return in.src0 == r || in.src1 == r || in.src2 == r; }
bool touches(const Instr& in, int r) { return in.dst == r || reads(in, r); }

// The first instruction after `from` that reads or writes register r, or code.size().
std::size_t next_touch(const Program& p, int r, std::size_t from) {
  std::size_t j = from + 1;
  while (j < p.code.size() && !touches(p.code[j], r)) ++j;
  return j;
}

// Whether nothing reads register r's value after instruction j (the program's end reads its
// outputs and its summed register).
bool dead_after(const Program& p, int r, std::size_t j) {
  for (std::size_t k = j + 1; k < p.code.size(); ++k) {
    if (reads(p.code[k], r)) return false;
    if (p.code[k].dst == r) return true;
  }
  return r != p.reduced_register && std::find(p.output_register.begin(), p.output_register.end(),
                                              r) == p.output_register.end();
}

// Merges the steps that follow an instruction as epilogues.
int merge_epilogues(Program& p) {
  int merged = 0;
  for (std::size_t i = 0; i < p.code.size(); ++i) {
    const Instr& in = p.code[i];
    const PointwiseKernel& k = in.kernel;
    if (k.is_cast || k.is_where || in.result != p.dtype || in.epilogue != ScalarStep::None ||
        !(k.is_binary ? kernels::simd_binary_handles(k.binary)
                      : kernels::simd_unary_handles(k.unary, k.a)))
      continue;
    // The next instruction to touch r must be the step, reading r alone.
    const int r = in.dst;
    const std::size_t j = next_touch(p, r, i);
    if (j == p.code.size()) continue;
    const Instr& step = p.code[j];
    const ScalarStep e = step_of(p, step);
    if (e == ScalarStep::None || step.src0 != r) continue;
    // And r's value must have no reader after it: the step writes r back, or r is dead after it
    // and the step's register is left alone until then (instruction i now writes there).
    if (step.dst != r) {
      bool free = dead_after(p, r, j);
      for (std::size_t m = i + 1; free && m < j; ++m) free = !touches(p.code[m], step.dst);
      if (!free) continue;
    }
    p.code[i].dst = step.dst;
    p.code[i].epilogue = e;
    p.code[i].epilogue_value = step.kernel.a;
    p.code.erase(p.code.begin() + static_cast<std::ptrdiff_t>(j));
    ++merged;
  }
  return merged;
}

// Merges the steps whose result only an add or a multiply reads as prologues of it.
int merge_prologues(Program& p) {
  int merged = 0;
  for (std::size_t j = 0; j < p.code.size();) {
    const Instr& step = p.code[j];
    const ScalarStep s = step_of(p, step);
    const int r = step.dst, operand = step.src0;
    const std::size_t k = s == ScalarStep::None ? p.code.size() : next_touch(p, r, j);
    bool ok = k < p.code.size();
    if (ok) {
      const Instr& user = p.code[k];
      ok = user.kernel.is_binary && kernels::simd_binary_takes_prologue(user.kernel.binary) &&
           user.prologue == ScalarStep::None && (user.src0 == r) != (user.src1 == r) &&
           (user.dst == r || dead_after(p, r, k));
      // The user reads the step's operand instead: it must still hold it.
      for (std::size_t m = j + 1; ok && m < k; ++m) ok = p.code[m].dst != operand;
    }
    if (!ok) {
      ++j;
      continue;
    }
    Instr& user = p.code[k];
    user.prologue_operand = user.src0 == r ? 0 : 1;
    (user.prologue_operand == 0 ? user.src0 : user.src1) = operand;
    user.prologue = s;
    user.prologue_value = step.kernel.a;
    p.code.erase(p.code.begin() + static_cast<std::ptrdiff_t>(j));
    ++merged;
  }
  return merged;
}

}  // namespace

int merge_scalar_steps(Program& p) { return merge_epilogues(p) + merge_prologues(p); }

}  // namespace adjoint::detail
