// The interpreter of fuzz_ops' programs (format in ops_program.h): the parsed header, fresh
// inputs, and interpret(), which runs the instructions, each an op of the public API whose
// adjoint::Error is an accepted outcome. Definitions in ops_interpreter.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::fuzz {

/// What the run_op calls of one program did that the forward/reverse identity check must know:
/// ops after which J t and J^T c are no longer one linear map and its transpose.
struct RunInfo {
  bool linear_ok = true;  // no hook scaling a gradient, no grad-mode flip, no detach, ...
  bool float32 = false;   // some value was float32: a looser tolerance
};

// The parsed header: what the inputs are and how the program is run.
struct Program {
  uint8_t mode = 0;
  int outputs = 1;
  bool use_grad_fn = false;  // autograd::grad instead of backward
  bool compiled = false;     // also traced and replayed by compile(), against eager
  int run = 0;               // 0 normal, 1 no-grad, 2 inference
  struct Input {
    DType dtype;
    bool requires_grad;
    int style;
    Shape shape;
    uint8_t seed;
  };
  std::vector<Input> inputs;
  const uint8_t* ops = nullptr;
  std::size_t num_ops = 0;
};

Program parse(const uint8_t* data, std::size_t size);
/// Fresh inputs (every run gets its own: programs modify them in place).
std::vector<Tensor> make_inputs(const Program& p);
/// Runs the ops over `inputs`; returns the last `outputs` values.
std::vector<Tensor> interpret(const Program& p, const std::vector<Tensor>& inputs,
                              RunInfo* info = nullptr);

}  // namespace adjoint::fuzz
