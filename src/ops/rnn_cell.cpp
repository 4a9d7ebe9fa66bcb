// lstm_cell_fused: an LSTM step's gate arithmetic as one op on the fused kernel
// (src/backend/cpu/lstm_cell.cpp), whose VJP is a second op on the fused gradient kernel. See
// Note [Fused LSTM cell rules]. The composite nn::detail::lstm_gates (src/nn/rnn_gates.h) is
// the oracle the tests hold both against.
#include "adjoint/rnn_ops.h"

#include <array>
#include <vector>

#include "adjoint/error.h"
#include "backend/nn_kernels.h"
#include "core/op_fields.h"
#include "ops/common.h"
#include "ops/lstm_cell_tangent.h"

namespace adjoint {
namespace {

// Note [Fused LSTM cell rules]
// The forward op (gates, c) -> [h' | c'] saves only its inputs (5H numbers per row, fewer than
// the composite's saved activations), and its gradient op recomputes the activations from them
// in its kernel. That gradient op is a function of (grad, gates, c) alone, so its own rules are
// plain calculus on that function, written with ops: double backward and forward-over-reverse
// need no second path. Its result is flat, [d gates | dc] (Note [Packed outputs] in
// linalg_spectral.cpp), so each part is a contiguous view. With i, f, o = sigmoid and g = tanh
// of the gate blocks, σ'_x = x (1 - x), τ' = 1 - g², c' = f c + i g, t = tanh(c'),
// T = 1 - t², the gradient op computes, for (dh, dc) = grad:
//   D = dc + dh o T,  d gates = (D g σ'_i, D c σ'_f, D i τ', dh t σ'_o),  d c = D f.

// The four activated gate blocks of gates [*, 4H], with ops.
struct Gates {
  Tensor i, f, g, o;
  explicit Gates(const Tensor& gates) {
    const std::vector<Tensor> q = chunk(gates, 4, -1);
    i = sigmoid(q[0]);
    f = sigmoid(q[1]);
    g = tanh(q[2]);
    o = sigmoid(q[3]);
  }
};

// What the gradient op's rules share: the activations, their derivatives, t = tanh(c'),
// T = 1 - t², and D.
struct CellTerms {
  Gates a;
  Tensor si, sf, so, tg, t, tt, dh, dc, d;
  CellTerms(const Tensor& grad, const Tensor& gates, const Tensor& c) : a(gates) {
    si = a.i * (1.0 - a.i);
    sf = a.f * (1.0 - a.f);
    so = a.o * (1.0 - a.o);
    tg = 1.0 - a.g * a.g;
    t = tanh(a.f * c + a.i * a.g);
    tt = 1.0 - t * t;
    dh = grad.select(0, 0);
    dc = grad.select(0, 1);
    d = dc + dh * a.o * tt;
  }
};

// The parts of a flat [gates-shaped | c-shaped] tensor.
std::pair<Tensor, Tensor> unpack(const Tensor& flat, const Shape& gates, const Shape& c) {
  const int64_t n = gates.numel();
  return {flat.narrow(0, 0, n).reshape(gates), flat.narrow(0, n, c.numel()).reshape(c)};
}
Tensor pack(const Tensor& dgates, const Tensor& dc) {
  return cat({dgates.reshape({dgates.numel()}), dc.reshape({dc.numel()})}, 0);
}

struct LstmCellBackward {
  static constexpr const char* name = "lstm_cell_fused_backward";
  static constexpr Save save = Save::Inputs;

  Tensor forward(const Tensor& grad, const Tensor& gates, const Tensor& c) const {
    return kernels::lstm_cell_backward(grad, gates, c);
  }

  // For the cotangents (u_i, u_f, u_g, u_o) of d gates and p of d c, with
  // E = u_i g σ'_i + u_f c σ'_f + u_g i τ' + p f (the cotangent of D) and
  // Q = T dh (u_o σ'_o - 2 t o E) (that of c', through T and t):
  //   d/d dc = E, d/d dh = E o T + u_o t σ'_o, d/dc = u_f D σ'_f + Q f,
  //   d/da_i = σ'_i (u_g D τ' + Q g + u_i D g (1 - 2i)), d/da_f = σ'_f (u_f D c (1 - 2f) + p D + Q
  //   c), d/da_g = τ' (u_i D σ'_i - 2 u_g D i g + Q i), d/da_o = σ'_o (E dh T + u_o dh t (1 - 2o))
  std::array<Tensor, 3> vjp(const Ctx& ctx, const Tensor& u) const {
    const Tensor &grad = ctx.input(0), &gates = ctx.input(1), &c = ctx.input(2);
    const CellTerms k(grad, gates, c);
    const Gates& a = k.a;
    const auto [ua, p] = unpack(u, gates.shape(), c.shape());
    const std::vector<Tensor> uq = chunk(ua, 4, -1);
    const Tensor &ui = uq[0], &uf = uq[1], &ug = uq[2], &uo = uq[3];
    const Tensor e = ui * a.g * k.si + uf * c * k.sf + ug * a.i * k.tg + p * a.f;
    const Tensor q = k.tt * k.dh * (uo * k.so - 2.0 * k.t * a.o * e);
    std::array<Tensor, 3> out;
    if (ctx.needs_grad(0)) out[0] = stack({e * a.o * k.tt + uo * k.t * k.so, e}, 0);
    if (ctx.needs_grad(1)) {
      const Tensor di = k.si * (ug * k.d * k.tg + q * a.g + ui * k.d * a.g * (1.0 - 2.0 * a.i));
      const Tensor df = k.sf * (uf * k.d * c * (1.0 - 2.0 * a.f) + p * k.d + q * c);
      const Tensor dg = k.tg * (ui * k.d * k.si - 2.0 * ug * k.d * a.i * a.g + q * a.i);
      const Tensor d_o = k.so * (e * k.dh * k.tt + uo * k.dh * k.t * (1.0 - 2.0 * a.o));
      out[1] = cat({di, df, dg, d_o}, -1);
    }
    if (ctx.needs_grad(2)) out[2] = uf * k.d * k.sf + q * a.f;
    return out;
  }

  // Along tangents (t dh, t dc) of grad, t_a of gates and t_c of c: t_x = σ'_x t_a_x (τ' for g),
  // t c' = t_f c + f t_c + t_i g + i t_g, t t = T t c', t D = t dc + t dh o T + dh t_o T -
  // 2 dh o t (t t), and each product of the result differentiated factor by factor.
  Tensor jvp(const Ctx& ctx, const Tensor& t_grad, const Tensor& t_gates, const Tensor& t_c) const {
    const Tensor &grad = ctx.input(0), &gates = ctx.input(1), &c = ctx.input(2);
    const CellTerms k(grad, gates, c);
    const Gates& a = k.a;
    const std::vector<Tensor> ta = chunk(t_gates, 4, -1);
    const Tensor ti = k.si * ta[0], tf = k.sf * ta[1], tgt = k.tg * ta[2], to = k.so * ta[3];
    const Tensor tdh = t_grad.select(0, 0), tdc = t_grad.select(0, 1);
    const Tensor tt = k.tt * (tf * c + a.f * t_c + ti * a.g + a.i * tgt);
    const Tensor td = tdc + tdh * a.o * k.tt + k.dh * to * k.tt - 2.0 * k.dh * a.o * k.t * tt;
    const Tensor di = td * a.g * k.si + k.d * tgt * k.si + k.d * a.g * (1.0 - 2.0 * a.i) * ti;
    const Tensor df = td * c * k.sf + k.d * t_c * k.sf + k.d * c * (1.0 - 2.0 * a.f) * tf;
    const Tensor dg = td * a.i * k.tg + k.d * ti * k.tg - 2.0 * k.d * a.i * a.g * tgt;
    const Tensor d_o = tdh * k.t * k.so + k.dh * tt * k.so + k.dh * k.t * (1.0 - 2.0 * a.o) * to;
    return pack(cat({di, df, dg, d_o}, -1), td * a.f + k.d * tf);
  }

  // Batching: the vmap dim is one more leading dim of every row ([2, B, *, H] for grad); the
  // flat result [B rows' d gates | B rows' dc] is regrouped per example.
  Tensor vmap(const BatchArgs& b) const {
    const Tensor gates = b.with_batch(1), c = b.with_batch(2);
    const Tensor flat = apply(*this, b.with_batch(0).transpose(0, 1), gates, c);
    const int64_t n = gates.size(0);
    const auto [dg, dc] = unpack(flat, gates.shape(), c.shape());
    return cat({dg.reshape({n, -1}), dc.reshape({n, -1})}, 1);
  }
};

struct LstmCell {
  static constexpr const char* name = "lstm_cell_fused";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;

  Tensor forward(const Tensor& gates, const Tensor& c) const {
    return kernels::lstm_cell(gates, c);
  }

  // (d gates, d c) = lstm_cell_fused_backward(ct, gates, c): Note [Fused LSTM cell rules]
  std::array<Tensor, 2> vjp(const Ctx& ctx, const Tensor& ct) const {
    const Tensor &gates = ctx.input(0), &c = ctx.input(1);
    const Tensor flat = apply(LstmCellBackward{}, ct, gates, c);
    const auto [dg, dc] = unpack(flat, gates.shape(), c.shape());
    std::array<Tensor, 2> out;
    if (ctx.needs_grad(0)) out[0] = dg;
    if (ctx.needs_grad(1)) out[1] = dc;
    return out;
  }

  Tensor jvp(const Ctx& ctx, const Tensor& t_gates, const Tensor& t_c) const {
    return detail::lstm_cell_tangent(ctx.input(0), ctx.input(1), t_gates, t_c);
  }

  // Batching: the vmap dim is one more leading dim of the rows; the result [2, B, *, H] puts
  // it in front.
  Tensor vmap(const BatchArgs& b) const {
    return apply(*this, b.with_batch(0), b.with_batch(1)).transpose(0, 1);
  }
};

// gates [*, 4H] and c [*, H] with the same leading dims, floating, in one dtype.
std::pair<Tensor, Tensor> prepare(const Tensor& gates, const Tensor& c, const char* op) {
  ADJOINT_CHECK(gates.defined() && c.defined(), Value, op, "got an undefined gates or c");
  ADJOINT_CHECK(is_floating(gates.dtype()) && is_floating(c.dtype()), DType, op,
                "expected floating gates and c, got ", describe(gates), " and ", describe(c));
  bool ok =
      gates.dim() >= 1 && gates.dim() == c.dim() && gates.shape().back() == 4 * c.shape().back();
  for (int64_t d = 0; ok && d + 1 < c.dim(); ++d) ok = gates.size(d) == c.size(d);
  ADJOINT_CHECK(ok, Shape, op,
                "expected gates [*, 4H] and c [*, H] with the same leading dims, got ",
                describe(gates), " and ", describe(c));
  const DType dt = promote_types(gates.dtype(), c.dtype());
  return {cast_to(gates, dt), cast_to(c, dt)};
}

}  // namespace

// t c' = σ'_f t_f c + f t_c + σ'_i t_i g + i τ' t_g, t h' = σ'_o t_o tanh(c') + o T t c'
Tensor detail::lstm_cell_tangent(const Tensor& gates, const Tensor& c, const Tensor& t_gates,
                                 const Tensor& t_c) {
  const Gates a(gates);
  const std::vector<Tensor> ta = chunk(t_gates, 4, -1);
  const Tensor t = tanh(a.f * c + a.i * a.g);
  const Tensor tcn = a.f * (1.0 - a.f) * ta[1] * c + a.f * t_c + a.i * (1.0 - a.i) * ta[0] * a.g +
                     a.i * (1.0 - a.g * a.g) * ta[2];
  const Tensor th = a.o * (1.0 - a.o) * ta[3] * t + a.o * (1.0 - t * t) * tcn;
  return stack({th, tcn}, 0);
}

LSTMCellOutput lstm_cell_fused(const Tensor& gates_in, const Tensor& c_in) {
  const auto [gates, c] = prepare(gates_in, c_in, "lstm_cell_fused");
  const Tensor packed = apply(LstmCell{}, gates, c);
  return {packed.select(0, 0), packed.select(0, 1)};
}

LSTMCellOutput lstm_cell_fused_backward(const Tensor& grad_h, const Tensor& grad_c,
                                        const Tensor& gates_in, const Tensor& c_in) {
  const char* op = "lstm_cell_fused_backward";
  const auto [gates, c] = prepare(gates_in, c_in, op);
  for (const Tensor* g : {&grad_h, &grad_c})
    ADJOINT_CHECK(!g->defined() || (g->shape() == c.shape() && is_floating(g->dtype())), Shape, op,
                  "expected floating gradients shaped as c ", describe(c), ", got ", describe(*g));
  const Tensor gh = grad_h.defined() ? cast_to(grad_h, c.dtype()) : zeros_like(c);
  const Tensor gc = grad_c.defined() ? cast_to(grad_c, c.dtype()) : zeros_like(c);
  const auto [dg, dc] =
      unpack(apply(LstmCellBackward{}, stack({gh, gc}, 0), gates, c), gates.shape(), c.shape());
  return {dg, dc};
}

}  // namespace adjoint

ADJOINT_OPS_FILE(rnn_cell)
