// prod's derivative as a kernel: out_i = prod_{j != i} x_j over each slice of the reduced dims
// (Note [Prod gradient without division] in src/ops/reduce_stats.cpp gives the same values
// with ops, for the derivatives of this one).
#include <algorithm>

#include "backend/cpu/opmath.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Row-major offsets of every index of `dims` (sizes of `shape`, strides of `strides`), in the
// order of the flattened reduced dims.
std::vector<int64_t> offsets_over(const Shape& shape, const Shape& strides,
                                  const std::vector<int64_t>& dims) {
  std::vector<int64_t> out{0};
  for (int64_t d : dims) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<std::size_t>(shape[d]));
    for (int64_t base : out)
      for (int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * strides[d]);
    out = std::move(next);
  }
  return out;
}

}  // namespace

// One prefix pass and one suffix pass per slice, accumulated in double as prod's kernel is: O(n)
// multiplies and no division, so zeros are exact.
Tensor cpu::exclusive_products(const Tensor& x, const std::vector<int64_t>& dims) {
  const char* op = "prod";
  if (is_reduced(x)) return narrow_to(exclusive_products(widen(x), dims), x.dtype());
  const Tensor xc = x.is_contiguous() ? x : cast(x, x.dtype());
  Tensor out = make_empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Shape& shape = xc.shape();
  const Shape strides = xc.strides();
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < xc.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(d);
  const std::vector<int64_t> inner = offsets_over(shape, strides, dims);
  const std::vector<int64_t> slices = offsets_over(shape, strides, kept);
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    T* o = out.data_ptr<T>();
    std::vector<double> prefix(inner.size());
    for (int64_t base : slices) {
      double acc = 1;
      for (std::size_t k = 0; k < inner.size(); ++k) {
        prefix[k] = acc;
        acc *= static_cast<double>(xs[base + inner[k]]);
      }
      acc = 1;
      for (std::size_t k = inner.size(); k-- > 0;) {
        o[base + inner[k]] = static_cast<T>(prefix[k] * acc);
        acc *= static_cast<double>(xs[base + inner[k]]);
      }
    }
  });
  return out;
}

}  // namespace adjoint::kernels
