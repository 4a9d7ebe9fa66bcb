// CPU kernel of a whole LSTM layer direction (backend/kernel_lists/nn.inc): every step's
// recurrent product and gate arithmetic in one call, so that the sequence costs one op, not
// two per step (Note [The LSTM sequence kernel]). The gate arithmetic is lstm_cell.cpp's, on
// the same vectorised nonlinearities and built, as it is, without FMA contraction
// (CMakeLists.txt), so that each product rounds as the separate ops of the unfused gates do.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/single_threaded_blas.h"
#include "backend/device_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Note [The LSTM sequence kernel]
// Step t needs all of h_{t-1}, so the steps run one after another; within a step the work is
// split by hidden units. A piece owning units [j0, j1) computes the four gate columns
// q H + [j0, j1) of every row (four single-threaded products h_{t-1} W_hh[rows]ᵀ added onto a
// copy of xp[t], beta = 1), and then the cell of exactly those units, which reads nothing
// another piece writes: one pool job per step and no other synchronisation. The pieces are
// fixed by the thread count (parallel_for), and every element is one product over the whole
// H, so results do not depend on scheduling. The pre-activations are kept for the gradient,
// which recomputes the activations from them (lstm_cell_backward).

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// c[m, n] += a[m, k] b[n, k]ᵀ, row-major, on the calling thread.
void add_product(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc) {
  sgemm(false, true, m, n, k, a, lda, b, ldb, 1.0f, c, ldc);
}
void add_product(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                 int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0, a, lda, b, ldb, 1.0, c, ldc);
}

struct Sizes {
  int64_t steps, batch, hidden;
};

// One step on units [j0, j1): gates = xp_t + h_prev W_hhᵀ on their columns, then the cell.
template <class T>
void step_units(const Sizes& z, const T* xp_t, const T* w, const T* h_prev, const T* c_prev,
                T* gates_t, T* h_t, T* c_t, int64_t j0, int64_t j1) {
  const int64_t h = z.hidden, width = j1 - j0, row = 4 * h;
  for (int64_t r = 0; r < z.batch; ++r)
    for (int64_t q = 0; q < 4; ++q)
      std::memcpy(gates_t + r * row + q * h + j0, xp_t + r * row + q * h + j0,
                  static_cast<std::size_t>(width) * sizeof(T));
  for (int64_t q = 0; q < 4; ++q)
    add_product(z.batch, width, h, h_prev, h, w + (q * h + j0) * h, h, gates_t + q * h + j0, row);
  std::vector<T> a(static_cast<std::size_t>(5 * width));
  T *i = a.data(), *f = i + width, *g = f + width, *o = g + width, *t = o + width;
  for (int64_t r = 0; r < z.batch; ++r) {
    const T* pre = gates_t + r * row + j0;
    simd_unary(Unary::Sigmoid, pre, i, width);
    simd_unary(Unary::Sigmoid, pre + h, f, width);
    simd_unary(Unary::Tanh, pre + 2 * h, g, width);
    simd_unary(Unary::Sigmoid, pre + 3 * h, o, width);
    const T* cp = c_prev + r * h + j0;
    T* cn = c_t + r * h + j0;
    for (int64_t j = 0; j < width; ++j) cn[j] = f[j] * cp[j] + i[j] * g[j];
    simd_unary(Unary::Tanh, cn, t, width);
    T* hn = h_t + r * h + j0;
    for (int64_t j = 0; j < width; ++j) hn[j] = o[j] * t[j];
  }
}

}  // namespace

LstmSequenceForward cpu::lstm_sequence(const Tensor& xp, const Tensor& w_hh, const Tensor& h0,
                                       const Tensor& c0, bool reverse) {
  const char* op = "lstm_sequence";
  if (is_reduced(xp) || is_reduced(w_hh) || is_reduced(h0) || is_reduced(c0)) {
    // See Note [Reduced-precision kernels]
    LstmSequenceForward wide = lstm_sequence(widen(xp), widen(w_hh), widen(h0), widen(c0), reverse);
    return {narrow_to(wide.out, xp.dtype()), narrow_to(wide.gates, xp.dtype())};
  }
  ADJOINT_ASSERT(xp.dim() == 3 && w_hh.dim() == 2 && h0.dim() == 2 && c0.shape() == h0.shape());
  const Sizes z{xp.size(0), h0.size(0), h0.size(1)};
  ADJOINT_ASSERT(xp.size(1) == z.batch && xp.size(2) == 4 * z.hidden &&
                 w_hh.size(0) == 4 * z.hidden && w_hh.size(1) == z.hidden);
  LstmSequenceForward out;
  out.out = make_empty({2, z.steps, z.batch, z.hidden}, xp.dtype());
  out.gates = make_empty(xp.shape(), xp.dtype());
  if (out.gates.numel() == 0) return out;
  const Tensor xc = contiguous_of(xp), wc = contiguous_of(w_hh), hc = contiguous_of(h0),
               cc = contiguous_of(c0);
  dispatch_opmath_floating(xp.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    const T* w = wc.data_ptr<T>();
    T* gates = out.gates.data_ptr<T>();
    T* hs = out.out.data_ptr<T>();
    T* cs = hs + z.steps * z.batch * z.hidden;
    const int64_t state = z.batch * z.hidden, row = 4 * z.hidden;
    // About 64 K multiply-adds per piece at least, and whole cache lines of units.
    const int64_t grain = std::max<int64_t>(16, 65536 / std::max<int64_t>(z.batch * row, 1));
    const T* h_prev = hc.data_ptr<T>();
    const T* c_prev = cc.data_ptr<T>();
    SingleThreadedBlas one;
    for (int64_t s = 0; s < z.steps; ++s) {
      const int64_t t = reverse ? z.steps - 1 - s : s;
      const T* xp_t = xs + t * z.batch * row;
      T* gates_t = gates + t * z.batch * row;
      T* h_t = hs + t * state;
      T* c_t = cs + t * state;
      parallel_for(z.hidden, grain, [&](int64_t j0, int64_t j1) {
        step_units(z, xp_t, w, h_prev, c_prev, gates_t, h_t, c_t, j0, j1);
      });
      h_prev = h_t;
      c_prev = c_t;
    }
  });
  return out;
}

}  // namespace adjoint::kernels
