// CPU kernel of a whole LSTM layer direction (backend/kernel_lists/nn.inc): every step's
// recurrent product and gate arithmetic in one call, so that the sequence costs one op, not
// two per step (Note [The LSTM sequence kernel]). The gate arithmetic is lstm_cell.cpp's, on
// the same vectorised nonlinearities and built, as it is, without FMA contraction
// (CMakeLists.txt), so that each product rounds as the separate ops of the unfused gates do.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/lstm_pieces.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/reused_product.h"
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
// q H + [j0, j1) of every row, as one single-threaded product h_{t-1} W_pᵀ added onto a copy of
// those columns of xp[t] (beta = 1), W_p being the piece's rows of W_hh gathered once per call,
// and then the cell of exactly those units, which reads nothing another piece writes: one pool
// job per step and no other synchronisation. (Four products of (j1 - j0) columns each, straight
// from W_hh, took 45 ms against 39 per forward of the lstm benchmark's layer, in one profile.) The
// pieces are fixed by the thread count (parallel_for), and every element is one product over the
// whole H, so results do not depend on scheduling. Each piece's product is made once per call
// with its rows packed once (Note [Reused right operands]: 0.6 of OpenBLAS's time per call). The
// pre-activations are kept for the gradient, which recomputes the activations from them
// (lstm_cell_backward).

using lstm::contiguous_of;
using lstm::piece_start;
using lstm::Sizes;

// W_hh's rows regrouped piece by piece: piece p's four gate blocks of its units, contiguous, so
// that its product is one call over 4 (j1 - j0) columns (Note [The LSTM sequence kernel]).
template <class T>
std::vector<T> rows_by_piece(const T* w, int64_t hidden, int64_t pieces) {
  std::vector<T> out(static_cast<std::size_t>(4 * hidden * hidden));
  T* o = out.data();
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t j0 = piece_start(hidden, p, pieces), j1 = piece_start(hidden, p + 1, pieces);
    for (int64_t q = 0; q < 4; ++q, o += (j1 - j0) * hidden)
      std::memcpy(o, w + (q * hidden + j0) * hidden,
                  static_cast<std::size_t>((j1 - j0) * hidden) * sizeof(T));
  }
  return out;
}

// The product of piece [j0, j1): local [B, 4 width] += h_prev W_pᵀ, W_p the piece's rows of
// `by_piece` (rows_by_piece), made once per call (Note [Reused right operands]).
template <class T>
ReusedProduct<T> piece_product(const Sizes& z, const T* by_piece, int64_t j0, int64_t j1) {
  const int64_t width = j1 - j0;
  return ReusedProduct<T>(z.batch, 4 * width, z.hidden, by_piece + 4 * j0 * z.hidden, z.hidden,
                          /*trans_b=*/true, z.hidden, 4 * width, /*accumulate=*/true);
}

// One step on units [j0, j1): their gate columns xp_t + h_prev W_hhᵀ in `local` [B, 4 width]
// (one product with the piece's rows), copied into gates_t's own columns for the gradient, then
// the cell.
template <class T>
void step_units(const Sizes& z, const T* xp_t, const ReusedProduct<T>& product, const T* h_prev,
                const T* c_prev, T* gates_t, T* h_t, T* c_t, int64_t j0, int64_t j1,
                std::vector<T>& local) {
  const int64_t h = z.hidden, width = j1 - j0, row = 4 * h, lrow = 4 * width;
  const auto bytes = static_cast<std::size_t>(width) * sizeof(T);
  local.resize(static_cast<std::size_t>(z.batch * lrow + 5 * width));
  T* l = local.data();
  for (int64_t r = 0; r < z.batch; ++r)
    for (int64_t q = 0; q < 4; ++q)
      std::memcpy(l + r * lrow + q * width, xp_t + r * row + q * h + j0, bytes);
  product.run(h_prev, l);
  T *i = l + z.batch * lrow, *f = i + width, *g = f + width, *o = g + width, *t = o + width;
  for (int64_t r = 0; r < z.batch; ++r) {
    const T* pre = l + r * lrow;
    for (int64_t q = 0; q < 4; ++q)
      std::memcpy(gates_t + r * row + q * h + j0, pre + q * width, bytes);
    simd_unary(Unary::Sigmoid, pre, i, 2 * width);  // i and f
    simd_unary(Unary::Tanh, pre + 2 * width, g, width);
    simd_unary(Unary::Sigmoid, pre + 3 * width, o, width);
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
    T* gates = out.gates.data_ptr<T>();
    T* hs = out.out.data_ptr<T>();
    T* cs = hs + z.steps * z.batch * z.hidden;
    const int64_t state = z.batch * z.hidden, row = 4 * z.hidden;
    const int64_t pieces = lstm::piece_count(z);
    const std::vector<T> w = rows_by_piece(wc.data_ptr<T>(), z.hidden, pieces);
    std::vector<ReusedProduct<T>> products;
    for (int64_t p = 0; p < pieces; ++p)
      products.push_back(piece_product(z, w.data(), piece_start(z.hidden, p, pieces),
                                       piece_start(z.hidden, p + 1, pieces)));
    std::vector<std::vector<T>> local(static_cast<std::size_t>(pieces));
    const T* h_prev = hc.data_ptr<T>();
    const T* c_prev = cc.data_ptr<T>();
    SingleThreadedBlas one;
    for (int64_t s = 0; s < z.steps; ++s) {
      const int64_t t = reverse ? z.steps - 1 - s : s;
      const T* xp_t = xs + t * z.batch * row;
      T* gates_t = gates + t * z.batch * row;
      T* h_t = hs + t * state;
      T* c_t = cs + t * state;
      auto piece = [&](int64_t p) {
        const int64_t j0 = piece_start(z.hidden, p, pieces);
        const int64_t j1 = piece_start(z.hidden, p + 1, pieces);
        step_units(z, xp_t, products[static_cast<std::size_t>(p)], h_prev, c_prev, gates_t, h_t,
                   c_t, j0, j1, local[static_cast<std::size_t>(p)]);
      };
      lstm::for_each_piece(pieces, piece);
      h_prev = h_t;
      c_prev = c_t;
    }
  });
  return out;
}

}  // namespace adjoint::kernels
