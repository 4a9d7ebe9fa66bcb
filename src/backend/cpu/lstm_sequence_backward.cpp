// CPU kernel of lstm_sequence's gradient where nothing differentiates it (backend/kernel_lists/
// nn.inc): the reverse loop of backpropagation through time in one call, split by hidden units
// as the forward is (Note [The LSTM sequence gradient kernel]). The cell's gradient arithmetic is
// lstm_cell.cpp's lstm_cell_backward, unit by unit, built as it is without FMA contraction.
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
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

using lstm::piece_start;
using lstm::Sizes;

// Note [The LSTM sequence gradient kernel]
// Going back from the last step run, each step needs dh = dG_{t'} W_hh of the step after it
// (t'), all of whose gate gradients dG_{t'} every unit's dh reads. So a pool job per step does,
// for the piece owning units [j0, j1): first dh[:, j0:j1] = dG_{t'} W_hh[:, j0:j1], one product
// with that column block of W_hh packed once per call (Note [Reused right operands]); then the
// cell gradient of step t on exactly those units, which needs dh, dc, the gates and the previous
// cell states of those units only and writes dG_t's columns q H + [j0, j1). The job's end is the
// only synchronisation: the next step's products read all of dG_t. One more job makes dh0 from the
// first step run. As in the forward, the pieces are fixed by the thread count and each element is
// one product over all 4H, so results do not depend on scheduling.

template <class T>
struct Buffers {
  std::vector<T> a, tanh_c;  // one row's activations of the piece's units, and tanh(c_t)
};

// The cell gradient of one step on units [j0, j1) of every row (lstm_cell_backward's formulas):
// with gh = u_h + dh, gc = u_c + dc and c = f c_prev + i g, D = gc + gh o (1 - tanh(c)²), dG = (D g
// i(1-i), D c_prev f(1-f), D i (1-g²), gh tanh(c) o(1-o)), and dc becomes D f.
template <class T>
void cell_units(const Sizes& z, const T* gates_t, const T* c_prev, const T* uh_t, const T* uc_t,
                const T* dh, T* dc, T* dg_t, int64_t j0, int64_t j1, Buffers<T>& b) {
  const int64_t h = z.hidden, width = j1 - j0, row = 4 * h;
  b.a.resize(static_cast<std::size_t>(4 * width));
  b.tanh_c.resize(static_cast<std::size_t>(width));
  T *i = b.a.data(), *f = i + width, *g = f + width, *o = g + width, *tc = b.tanh_c.data();
  for (int64_t r = 0; r < z.batch; ++r) {
    const T* pre = gates_t + r * row + j0;
    simd_unary(Unary::Sigmoid, pre, i, width);
    simd_unary(Unary::Sigmoid, pre + h, f, width);
    simd_unary(Unary::Tanh, pre + 2 * h, g, width);
    simd_unary(Unary::Sigmoid, pre + 3 * h, o, width);
    const int64_t at = r * h + j0;
    const T* cp = c_prev + at;
    // c_t again from the gates, as lstm_cell_backward does, rather than read from the forward's
    // states: the same bits where those came from these gates, and one function of its inputs
    // (the gates and the previous states) wherever they come from.
    for (int64_t j = 0; j < width; ++j) tc[j] = f[j] * cp[j] + i[j] * g[j];
    simd_unary(Unary::Tanh, tc, tc, width);
    T* da = dg_t + r * row + j0;
    for (int64_t j = 0; j < width; ++j) {
      const T gh = dh ? uh_t[at + j] + dh[at + j] : uh_t[at + j];
      const T gc = uc_t[at + j] + dc[at + j];
      const T t = tc[j];
      const T d = gc + gh * o[j] * (T(1) - t * t);
      da[j] = d * g[j] * (i[j] * (T(1) - i[j]));
      da[h + j] = d * cp[j] * (f[j] * (T(1) - f[j]));
      da[2 * h + j] = d * i[j] * (T(1) - g[j] * g[j]);
      da[3 * h + j] = gh * t * (o[j] * (T(1) - o[j]));
      dc[at + j] = d * f[j];
    }
  }
}

}  // namespace

Tensor cpu::lstm_sequence_backward(const Tensor& grad, const Tensor& gates, const Tensor& cs,
                                   const Tensor& c0, const Tensor& w_hh, bool reverse) {
  const char* op = "lstm_sequence_backward";
  if (is_reduced(grad) || is_reduced(gates) || is_reduced(cs) || is_reduced(c0) ||
      is_reduced(w_hh))  // See Note [Reduced-precision kernels]
    return narrow_to(lstm_sequence_backward(widen(grad), widen(gates), widen(cs), widen(c0),
                                            widen(w_hh), reverse),
                     gates.dtype());
  ADJOINT_ASSERT(gates.dim() == 3 && c0.dim() == 2 && w_hh.dim() == 2 && grad.dim() == 4);
  const Sizes z{gates.size(0), c0.size(0), c0.size(1)};
  ADJOINT_ASSERT(gates.size(1) == z.batch && gates.size(2) == 4 * z.hidden &&
                 cs.shape() == Shape({z.steps, z.batch, z.hidden}) &&
                 grad.shape() == Shape({2, z.steps, z.batch, z.hidden}) &&
                 w_hh.size(0) == 4 * z.hidden && w_hh.size(1) == z.hidden);
  const int64_t state = z.batch * z.hidden, row = 4 * z.hidden;
  Tensor out = make_empty({z.steps * z.batch * row + 2 * state}, gates.dtype());
  if (state == 0) return out;
  const Tensor gr = lstm::contiguous_of(grad), gc = lstm::contiguous_of(gates),
               cc = lstm::contiguous_of(cs), c0c = lstm::contiguous_of(c0),
               wc = lstm::contiguous_of(w_hh);
  dispatch_opmath_floating(gates.dtype(), op, [&]<class T>() {
    const T* uh = gr.data_ptr<T>();
    const T* uc = uh + z.steps * state;
    const T* g = gc.data_ptr<T>();
    const T* c = cc.data_ptr<T>();
    const T* w = wc.data_ptr<T>();
    T* dg = out.data_ptr<T>();
    T* dh0 = dg + z.steps * z.batch * row;
    T* dc0 = dh0 + state;
    const int64_t pieces = lstm::piece_count(z);
    std::vector<ReusedProduct<T>> products;
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t j0 = piece_start(z.hidden, p, pieces),
                    j1 = piece_start(z.hidden, p + 1, pieces);
      // dh[:, j0:j1] = dG [B, 4H] W_hh[:, j0:j1], written into a [B, H] buffer.
      products.emplace_back(z.batch, j1 - j0, row, w + j0, z.hidden, /*trans_b=*/false, row,
                            z.hidden, /*accumulate=*/false);
    }
    std::vector<Buffers<T>> buffers(static_cast<std::size_t>(pieces));
    std::vector<T> dh(static_cast<std::size_t>(state));
    std::memset(dc0, 0, static_cast<std::size_t>(state) * sizeof(T));  // dc runs in dc0's place
    auto step = [&](int64_t s) { return reverse ? z.steps - 1 - s : s; };
    SingleThreadedBlas one;
    // Job k runs step s = T - 1 - k (k < T) after the product for the step after it (k > 0).
    for (int64_t k = 0; k <= z.steps; ++k) {
      const int64_t s = z.steps - 1 - k;
      const T* dg_after = k > 0 ? dg + step(s + 1) * z.batch * row : nullptr;
      T* dh_here = k == z.steps ? dh0 : dh.data();
      lstm::for_each_piece(pieces, [&](int64_t p) {
        const int64_t j0 = piece_start(z.hidden, p, pieces);
        const int64_t j1 = piece_start(z.hidden, p + 1, pieces);
        const auto pi = static_cast<std::size_t>(p);
        if (dg_after) products[pi].run(dg_after, dh_here + j0);
        if (k == z.steps) return;
        const int64_t t = step(s);
        const T* c_prev = s == 0 ? c0c.data_ptr<T>() : c + step(s - 1) * state;
        cell_units(z, g + t * z.batch * row, c_prev, uh + t * state, uc + t * state,
                   dg_after ? dh.data() : nullptr, dc0, dg + t * z.batch * row, j0, j1,
                   buffers[pi]);
      });
    }
  });
  return out;
}

}  // namespace adjoint::kernels
