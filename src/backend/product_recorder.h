// A hook on the products and convolutions a program calls, below the stack at the kernel
// table: what adjoint-bench's gemm bound records one step with (Note [The gemm bound] in
// bench/gemm_bound.cpp). Off, it costs each product a thread-local load and a branch.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

class ProductRecorder {
 public:
  virtual ~ProductRecorder() = default;
  /// `kind` ran on `operands` (with `extra`, a convolution's geometry, part of its identity);
  /// `again` runs the same call on the same tensors once more.
  virtual void record(const char* kind, std::initializer_list<const Tensor*> operands,
                      const std::string& extra, std::function<void()> again) = 0;
};

/// The thread's recorder, or null (the kernels of other threads are not recorded).
extern constinit thread_local ProductRecorder* tls_product_recorder;

}  // namespace adjoint::kernels
