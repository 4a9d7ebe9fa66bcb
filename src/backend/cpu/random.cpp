// Factory fills: arange and the random distributions, drawn sequentially from the generator
// so the same seed gives the same tensor whatever the thread count.
#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"

namespace adjoint::kernels {

// The 16-bit floats are filled in float32 and rounded once (Note [Reduced-precision kernels]):
// the same draws from the generator as a float32 tensor of that shape.
template <class Fill>
void fill_widened(const Tensor& dst, Fill fill) {
  Tensor wide = widen(dst);
  fill(wide);
  copy_into(dst, wide);
}

void cpu::arange(const Tensor& dst, double start, double step) {
  if (is_reduced(dst)) return fill_widened(dst, [&](const Tensor& w) { arange(w, start, step); });
  dispatch_opmath_numeric(dst.dtype(), "arange", [&]<class T>() {
    T* p = dst.data_ptr<T>();
    for (int64_t i = 0; i < dst.numel(); ++i)
      p[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
}

void cpu::uniform(const Tensor& dst, double low, double high, Generator& gen) {
  if (is_reduced(dst))
    return fill_widened(dst, [&](const Tensor& w) { uniform(w, low, high, gen); });
  dispatch_opmath_floating(dst.dtype(), "rand", [&]<class T>() {
    T* p = dst.data_ptr<T>();
    for (int64_t i = 0; i < dst.numel(); ++i)
      p[i] = static_cast<T>(low + (high - low) * gen.next_double());
  });
}

void cpu::normal(const Tensor& dst, double mean, double std, Generator& gen) {
  if (is_reduced(dst))
    return fill_widened(dst, [&](const Tensor& w) { normal(w, mean, std, gen); });
  dispatch_opmath_floating(dst.dtype(), "randn", [&]<class T>() {
    T* p = dst.data_ptr<T>();
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = static_cast<T>(mean + std * gen.next_normal());
  });
}

void cpu::randint(const Tensor& dst, int64_t low, int64_t high, Generator& gen) {
  int64_t* p = dst.data_ptr<int64_t>();
  const uint64_t range = static_cast<uint64_t>(high - low);
  for (int64_t i = 0; i < dst.numel(); ++i)
    p[i] = low + static_cast<int64_t>(gen.next_u64() % range);
}

}  // namespace adjoint::kernels
