// The float16/bfloat16 fast paths of the elementwise kernels (elementwise_reduced.h): blocks
// converted to float32 in L1, computed with the float32 block kernels and rounded back.
#include "backend/cpu/elementwise_reduced.h"

#include <algorithm>

#include "adjoint/tensor_impl.h"
#include "backend/cpu/loops.h"
#include "backend/device_kernels.h"
#include "core/dispatch.h"
#include "core/half_convert.h"
#include "core/parallel.h"

namespace adjoint::kernels {
namespace {

// Note [Reduced-precision blocks]
// The common 16-bit case (contiguous operands and result of one shape, or a single-element b)
// does not widen whole tensors (Note [Reduced-precision kernels]): each thread converts a block
// of its range into a float32 buffer that stays in L1, runs the float32 block kernel on it and
// rounds the block into the result. The same float32 code on the same float32 values, so the
// same bits as widening the whole tensor (simd_math's tails run through zeroed buffers, so its
// results do not depend on where a block ends), without the float32 tensors and their passes
// over memory.
constexpr int64_t kConvertBlock = 1024;  // floats: 4 KiB per buffer

template <class H>
void unary_reduced_blocks(Unary k, const H* in, H* out, int64_t n, double a, double b) {
  parallel_for(n, kFlatGrain, [&](int64_t begin, int64_t end) {
    alignas(64) float buf[kConvertBlock];
    for (int64_t i = begin; i < end; i += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, end - i);
      detail::convert(in + i, buf, m);
      unary_block<float>(k, buf, buf, m, a, b);
      detail::convert(buf, out + i, m);
    }
  });
}

// y_stride 0: y is one element.
template <class H>
void binary_reduced_blocks(Binary k, const H* x, const H* y, int64_t y_stride, H* out, int64_t n) {
  parallel_for(n, kFlatGrain, [&](int64_t begin, int64_t end) {
    alignas(64) float xb[kConvertBlock], yb[kConvertBlock];
    if (y_stride == 0) std::fill_n(yb, kConvertBlock, static_cast<float>(*y));
    for (int64_t i = begin; i < end; i += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, end - i);
      detail::convert(x + i, xb, m);
      if (y_stride != 0) detail::convert(y + i, yb, m);
      binary_block<float>(k, xb, yb, xb, m);
      detail::convert(xb, out + i, m);
    }
  });
}

bool same_dense(const Tensor& t, const Tensor& out) {
  return t.dtype() == out.dtype() && t.is_contiguous() && t.shape() == out.shape();
}

}  // namespace

bool unary_reduced_blocked(Unary k, const Tensor& out, const Tensor& x, double a, double b) {
  if (!is_reduced_float(x.dtype()) || !same_dense(x, out) || !out.is_contiguous()) return false;
  dispatch_reduced_floating(x.dtype(), "unary", [&]<class H>() {
    unary_reduced_blocks(k, reinterpret_cast<const H*>(operand_data<H>(x)),
                         reinterpret_cast<H*>(operand_data<H>(out)), out.numel(), a, b);
  });
  return true;
}

bool binary_reduced_blocked(Binary k, const Tensor& out, const Tensor& x, const Tensor& y) {
  if (k >= Binary::Eq || !is_reduced_float(x.dtype()) || !same_dense(x, out) ||
      !out.is_contiguous() || y.dtype() != x.dtype())
    return false;
  const bool y_dense = same_dense(y, out);
  if (!y_dense && y.numel() != 1) return false;
  dispatch_reduced_floating(x.dtype(), "binary", [&]<class H>() {
    binary_reduced_blocks(k, reinterpret_cast<const H*>(operand_data<H>(x)),
                          reinterpret_cast<const H*>(operand_data<H>(y)), y_dense ? 1 : 0,
                          reinterpret_cast<H*>(operand_data<H>(out)), out.numel());
  });
  return true;
}

template <class H>
void add_rounded_into(float* out, const float* x, int64_t n) {
  alignas(64) float rounded[kConvertBlock];
  for (int64_t i = 0; i < n; i += kConvertBlock) {
    const int64_t m = std::min(kConvertBlock, n - i);
    detail::round_through(x + i, rounded, m, H{});  // as the 16-bit result would be
    binary_block<float>(Binary::Add, out + i, rounded, out + i, m);
  }
}
template void add_rounded_into<Half>(float*, const float*, int64_t);
template void add_rounded_into<BFloat16>(float*, const float*, int64_t);

void cpu::add_widened_into(const Tensor& out, const Tensor& x, DType dtype) {
  ADJOINT_ASSERT(out.dtype() == DType::Float32 && out.is_contiguous() && x.is_contiguous() &&
                 x.shape() == out.shape() && is_reduced_float(dtype) &&
                 (x.dtype() == DType::Float32 || x.dtype() == dtype));
  float* o = out.data_ptr<float>();
  const bool unrounded = x.dtype() == DType::Float32;
  dispatch_reduced_floating(dtype, "add_", [&]<class H>() {
    const auto* x16 = static_cast<const H*>(x.impl()->data());
    const auto* x32 = static_cast<const float*>(x.impl()->data());
    parallel_for(out.numel(), kConvertGrain, [&](int64_t begin, int64_t end) {
      if (unrounded) {
        add_rounded_into<H>(o + begin, x32 + begin, end - begin);
        return;
      }
      alignas(64) float wide[kConvertBlock];
      for (int64_t i = begin; i < end; i += kConvertBlock) {
        const int64_t m = std::min(kConvertBlock, end - i);
        detail::convert(x16 + i, wide, m);
        binary_block<float>(Binary::Add, o + i, wide, o + i, m);
      }
    });
  });
}

}  // namespace adjoint::kernels
