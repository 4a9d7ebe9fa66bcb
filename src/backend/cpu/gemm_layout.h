// How BLAS-style kernels read a matrix operand: a 2-d operand whose rows or columns are
// contiguous is passed as is, with a transpose flag and leading dimension read off its strides;
// any other is copied to a contiguous tensor first. Shared by the float (gemm.cpp) and 16-bit
// (gemm16.cpp) products.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "adjoint/tensor.h"
#include "backend/kernels.h"

namespace adjoint::kernels {

struct MatrixArg {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// How BLAS can read a rows x cols matrix with these element strides, if it can.
inline bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, MatrixArg& out) {
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
    out = {CblasNoTrans, rs};
    return true;
  }
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
    out = {CblasTrans, cs};
    return true;
  }
  if (rows == 1 && cs == 1) {  // a single row: any row stride works
    out = {CblasNoTrans, std::max<int64_t>(cols, 1)};
    return true;
  }
  if (cols == 1 && rs == 1) {
    out = {CblasTrans, std::max<int64_t>(rows, 1)};
    return true;
  }
  return false;
}

// How BLAS reads t's last two dims (rows x cols); t becomes a contiguous copy first when its
// strides do not fit.
inline MatrixArg blas_operand(Tensor& t, int64_t rows, int64_t cols) {
  const int64_t nd = t.dim();
  MatrixArg arg{};
  if (blas_layout(rows, cols, t.strides()[nd - 2], t.strides()[nd - 1], arg)) return arg;
  t = cast(t, t.dtype());
  return {CblasNoTrans, std::max<int64_t>(cols, 1)};
}

}  // namespace adjoint::kernels
