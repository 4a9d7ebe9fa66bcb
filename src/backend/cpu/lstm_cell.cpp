// CPU kernels of the fused LSTM cell (backend/kernel_lists/nn.inc): one step's gate arithmetic
// and its gradient, row by row (a row is one example's 4H gates). The nonlinearities run on the
// vectorised kernels of simd_math.cpp over each row's contiguous gate blocks; the products are
// plain loops, built without FMA contraction (CMakeLists.txt) so that each rounds as the
// separate ops of nn::detail::lstm_gates do. Rows run in parallel in fixed chunks, so results do
// not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/simd_math.h"
#include "backend/device_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// About this many gate elements per parallel chunk.
constexpr int64_t kGrainElements = 16384;

// a[0, 2H) = sigmoid (i, f), a[2H, 3H) = tanh (g), a[3H, 4H) = sigmoid (o) of one row.
template <class T>
void activate(const T* pre, T* a, int64_t h) {
  simd_unary(Unary::Sigmoid, pre, a, 2 * h);
  simd_unary(Unary::Tanh, pre + 2 * h, a + 2 * h, h);
  simd_unary(Unary::Sigmoid, pre + 3 * h, a + 3 * h, h);
}

struct Rows {
  int64_t rows, h;
  explicit Rows(const Tensor& gates) : rows(0), h(gates.shape().back() / 4) {
    rows = h > 0 ? gates.numel() / (4 * h) : 0;
  }
  int64_t grain() const {
    return std::max<int64_t>(kGrainElements / std::max<int64_t>(4 * h, 1), 1);
  }
};

}  // namespace

Tensor cpu::lstm_cell(const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_cell";
  if (is_reduced(gates) || is_reduced(c))  // See Note [Reduced-precision kernels]
    return narrow_to(lstm_cell(widen(gates), widen(c)), c.dtype());
  ADJOINT_ASSERT(gates.dtype() == c.dtype() && gates.shape().back() == 4 * c.shape().back());
  const Rows r(gates);
  Shape shape = c.shape();
  shape.insert(0, 2);
  Tensor out = make_empty(shape, c.dtype());
  const Tensor g = contiguous_of(gates), cc = contiguous_of(c);
  dispatch_opmath_floating(c.dtype(), op, [&]<class T>() {
    const T* gs = g.data_ptr<T>();
    const T* cs = cc.data_ptr<T>();
    T* hs = out.data_ptr<T>();
    T* cn = hs + r.rows * r.h;
    const int64_t h = r.h;
    parallel_for(r.rows, r.grain(), [&](int64_t begin, int64_t end) {
      std::vector<T> a(static_cast<std::size_t>(4 * h)), t(static_cast<std::size_t>(h));
      for (int64_t row = begin; row < end; ++row) {
        activate(gs + row * 4 * h, a.data(), h);
        const T *i = a.data(), *f = i + h, *gg = f + h, *o = gg + h;
        const T* cp = cs + row * h;
        T* c_next = cn + row * h;
        for (int64_t j = 0; j < h; ++j) c_next[j] = f[j] * cp[j] + i[j] * gg[j];
        simd_unary(Unary::Tanh, c_next, t.data(), h);
        T* h_next = hs + row * h;
        for (int64_t j = 0; j < h; ++j) h_next[j] = o[j] * t[j];
      }
    });
  });
  return out;
}

Tensor cpu::lstm_cell_backward(const Tensor& grad, const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_cell_backward";
  if (is_reduced(grad) || is_reduced(gates) || is_reduced(c))
    return narrow_to(lstm_cell_backward(widen(grad), widen(gates), widen(c)), c.dtype());
  ADJOINT_ASSERT(grad.dtype() == c.dtype() && gates.dtype() == c.dtype() &&
                 grad.numel() == 2 * c.numel());
  const Rows r(gates);
  Tensor out = make_empty({gates.numel() + c.numel()}, c.dtype());
  const Tensor gr = contiguous_of(grad), g = contiguous_of(gates), cc = contiguous_of(c);
  dispatch_opmath_floating(c.dtype(), op, [&]<class T>() {
    const T* dhs = gr.data_ptr<T>();
    const T* dcs = dhs + r.rows * r.h;
    const T* gs = g.data_ptr<T>();
    const T* cs = cc.data_ptr<T>();
    T* das = out.data_ptr<T>();
    T* dcp = das + r.rows * 4 * r.h;
    const int64_t h = r.h;
    parallel_for(r.rows, r.grain(), [&](int64_t begin, int64_t end) {
      std::vector<T> a(static_cast<std::size_t>(4 * h)), t(static_cast<std::size_t>(h));
      for (int64_t row = begin; row < end; ++row) {
        activate(gs + row * 4 * h, a.data(), h);
        const T *i = a.data(), *f = i + h, *gg = f + h, *o = gg + h;
        const T* cp = cs + row * h;
        for (int64_t j = 0; j < h; ++j) t[j] = f[j] * cp[j] + i[j] * gg[j];
        simd_unary(Unary::Tanh, t.data(), t.data(), h);
        const T* dh = dhs + row * h;
        const T* dc = dcs + row * h;
        T* da = das + row * 4 * h;
        T* dcr = dcp + row * h;
        for (int64_t j = 0; j < h; ++j) {
          const T tc = t[j];
          const T d = dc[j] + dh[j] * o[j] * (T(1) - tc * tc);
          da[j] = d * gg[j] * (i[j] * (T(1) - i[j]));
          da[h + j] = d * cp[j] * (f[j] * (T(1) - f[j]));
          da[2 * h + j] = d * i[j] * (T(1) - gg[j] * gg[j]);
          da[3 * h + j] = dh[j] * tc * (o[j] * (T(1) - o[j]));
          dcr[j] = d * f[j];
        }
      }
    });
  });
  return out;
}

}  // namespace adjoint::kernels
