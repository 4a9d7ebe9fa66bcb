// The vectorised pieces of the pooling kernels (pool_simd.cpp, Highway): one output row's run
// of columns whose windows all have the same shape, start[ow] = w0 + ow * stride. The lanes are
// consecutive output columns, each computing exactly what the scalar loop of pool.cpp computes
// for it (the same elements in the same order), so both give the same bits.
#pragma once

#include <cstdint>

namespace adjoint::kernels::simd {

/// out[ow] for ow in [0, n): the flat index h * W + w of the maximum (first among ties, NaN
/// wins) over rows h = h0 + a * hstep (a < hcount) and columns w = w0 + ow * stride + b * wstep
/// (b < kcount), all inside the plane x of width W; h * W + w must fit in 31 bits.
void max_pool_row(const float* x, int64_t W, int64_t h0, int64_t hcount, int64_t hstep, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t wstep, int64_t n, int64_t* out);
void max_pool_row(const double* x, int64_t W, int64_t h0, int64_t hcount, int64_t hstep, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t wstep, int64_t n, int64_t* out);
/// out[ow] = (sum over rows h0 .. h0 + hcount - 1, columns w0 + ow * stride + b, b < kcount,
/// row by row) / divisor.
void avg_pool_row(const float* x, int64_t W, int64_t h0, int64_t hcount, int64_t w0, int64_t stride,
                  int64_t kcount, int64_t n, float divisor, float* out);
void avg_pool_row(const double* x, int64_t W, int64_t h0, int64_t hcount, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t n, double divisor, double* out);

/// row[ow * stride + b] += v[ow] for ow in [0, n) and b in [0, kcount): average pooling's
/// transpose on one input row, each element receiving its columns' values in increasing ow.
void avg_pool_backward_row(float* row, int64_t stride, int64_t kcount, int64_t n, const float* v);
void avg_pool_backward_row(double* row, int64_t stride, int64_t kcount, int64_t n, const double* v);

}  // namespace adjoint::kernels::simd
