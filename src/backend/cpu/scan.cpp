// CPU kernels of the scans along one dim (backend/kernel_lists/core.inc): cumulative sums and
// products and the first-order linear recurrence h_k = a_k h_{k-1} + b_k, which the scans'
// derivatives are written with (src/ops/scan.cpp). See Note [Scan kernels].
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/device_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Note [Scan kernels]
// x is read as [outer, n, inner] (contiguous; any other layout is copied first) and scanned along
// n, each of the outer * inner lanes on its own. The lanes are split over the pool in fixed
// chunks of up to 256 neighbouring inner positions, each chunk walking n with one accumulator
// per lane, so memory is read in order and results never depend on the thread count. Floating
// sums, products and recurrences accumulate in double (as PyTorch's CPU cumsum does for float32)
// and round once per element on the way out; integers in int64, with two's-complement wrap
// (unsigned arithmetic, so overflow is not undefined behaviour).
constexpr int64_t kLaneBlock = 256;

struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
  Lanes(const Shape& shape, int64_t dim) {
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      const int64_t s = shape[static_cast<std::size_t>(d)];
      if (d < dim) outer *= s;
      if (d == dim) n = s;
      if (d > dim) inner *= s;
    }
  }
  int64_t blocks_per_outer() const { return (inner + kLaneBlock - 1) / kLaneBlock; }
};

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <class T>
T from_acc(Acc<T> v) {
  return static_cast<T>(v);  // uint64_t to int64_t wraps (two's complement since C++20)
}

enum class Kind { Sum, Prod, Recurrence };

// Runs the scan of `kind` on lanes [o, n, inner) block by block. For Recurrence `a` is the
// coefficient and `b` the input; otherwise `b` alone is read.
template <class T>
void scan_lanes(Kind kind, const Lanes& l, const T* a, const T* b, T* out, bool reverse) {
  const int64_t blocks = l.blocks_per_outer();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(l.n * kLaneBlock, 1));
  parallel_for(l.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<Acc<T>> acc(static_cast<std::size_t>(std::min(l.inner, kLaneBlock)));
    for (int64_t job = begin; job < end; ++job) {
      const int64_t o = job / blocks, j0 = (job % blocks) * kLaneBlock;
      const int64_t width = std::min(kLaneBlock, l.inner - j0);
      const Acc<T> start = kind == Kind::Prod ? Acc<T>(1) : Acc<T>(0);
      std::fill(acc.begin(), acc.begin() + width, start);
      for (int64_t s = 0; s < l.n; ++s) {
        const int64_t k = reverse ? l.n - 1 - s : s;
        const int64_t at = (o * l.n + k) * l.inner + j0;
        const T* bk = b + at;
        T* yk = out + at;
        if (kind == Kind::Sum) {
          for (int64_t j = 0; j < width; ++j) yk[j] = from_acc<T>(acc[j] += Acc<T>(bk[j]));
        } else if (kind == Kind::Prod) {
          for (int64_t j = 0; j < width; ++j) yk[j] = from_acc<T>(acc[j] *= Acc<T>(bk[j]));
        } else {
          const T* ak = a + at;
          for (int64_t j = 0; j < width; ++j)
            yk[j] = from_acc<T>(acc[j] = Acc<T>(ak[j]) * acc[j] + Acc<T>(bk[j]));
        }
      }
    }
  });
}

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

Tensor scan(Kind kind, const Tensor& a, const Tensor& x, int64_t dim, bool reverse,
            const char* op) {
  if (is_reduced(x) || (a.defined() && is_reduced(a))) {  // Note [Reduced-precision kernels]
    return narrow_to(scan(kind, a.defined() ? widen(a) : a, widen(x), dim, reverse, op), x.dtype());
  }
  ADJOINT_ASSERT(dim >= 0 && dim < std::max<int64_t>(x.dim(), 1));
  Tensor out = make_empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Lanes l(x.shape(), dim);
  const Tensor xc = contiguous_of(x), ac = a.defined() ? contiguous_of(a) : Tensor();
  auto run = [&]<class T>() {
    scan_lanes<T>(kind, l, ac.defined() ? ac.data_ptr<T>() : nullptr, xc.data_ptr<T>(),
                  out.data_ptr<T>(), reverse);
  };
  if (kind == Kind::Recurrence) {
    ADJOINT_ASSERT(a.dtype() == x.dtype() && a.shape() == x.shape());
    dispatch_opmath_floating(x.dtype(), op, run);
  } else {
    dispatch_opmath_numeric(x.dtype(), op, run);
  }
  return out;
}

}  // namespace

Tensor cpu::cumsum(const Tensor& x, int64_t dim, bool reverse) {
  return scan(Kind::Sum, Tensor(), x, dim, reverse, "cumsum");
}
Tensor cpu::cumprod(const Tensor& x, int64_t dim, bool reverse) {
  return scan(Kind::Prod, Tensor(), x, dim, reverse, "cumprod");
}
Tensor cpu::linear_recurrence(const Tensor& a, const Tensor& b, int64_t dim, bool reverse) {
  return scan(Kind::Recurrence, a, b, dim, reverse, "linear_recurrence");
}

}  // namespace adjoint::kernels
