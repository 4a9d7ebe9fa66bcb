// lstm_sequence: a whole LSTM layer direction as one op on one kernel
// (src/backend/cpu/lstm_sequence.cpp), with rules written with ops. See Note [LSTM sequence
// rules]. The unrolled loop of lstm_cell_fused steps (nn::LSTM with per-step gates) is the oracle
// the tests hold it against.
#include <array>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/rnn_ops.h"
#include "backend/nn_kernels.h"
#include "core/op_fields.h"
#include "ops/common.h"
#include "ops/lstm_cell_tangent.h"

namespace adjoint {
namespace {

// Note [LSTM sequence rules]
// The op maps (xp, W_hh, h0, c0) to every step's (h_t, c_t), packed [2, T, B, H]; its output is
// saved, so each step's previous state is a slice of it (or h0, c0), and the kernel's gate
// pre-activations G_t = xp[t] + h_{t-1} W_hhᵀ are saved beside it. With those, backward is
// what backpropagation through time does by hand: from the last step to the first,
//   (dG_t, dc_{t-1}) = lstm_cell_fused_backward(u_h[t] + dh_t, u_c[t] + dc_t, G_t, c_{t-1}),
//   dh_{t-1} = dG_t W_hh,
// then dxp = dG, dW_hh = Σ_t dG_tᵀ h_{t-1} as one product over all T B rows (where a loop of
// per-step products would add a [4H, H] gradient per step), and dh0, dc0 are the last carries.
// Every piece is an op, so the rule differentiates again. The saved pre-activations carry no
// history, so as batch norm's statistics (Note [Batch norm statistics in backward]) they are
// used only when nothing differentiates the rule; otherwise, and in the JVP, G is recomputed
// with ops from the inputs and the output, as one product over all steps.
// Forward mode runs the steps forward: tG_t = txp[t] + h_{t-1} tW_hhᵀ + th_{t-1} W_hhᵀ (the
// first two for all steps in one product), then the cell's tangent rule.

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

// Step t of the s-th to run.
int64_t step_of(int64_t s, int64_t steps, bool reverse) { return reverse ? steps - 1 - s : s; }

// The state each step starts from, [T, B, H]: `first` (h0 or c0) at the first step to run,
// else the state of the step run before.
Tensor previous_states(const Tensor& first, const Tensor& seq, bool reverse) {
  const int64_t steps = seq.size(0);
  const Tensor head = first.unsqueeze(0);
  return reverse ? cat({seq.narrow(0, 1, steps - 1), head}, 0)
                 : cat({head, seq.narrow(0, 0, steps - 1)}, 0);
}

// Forward mode through the steps (Note [LSTM sequence rules]): every step's (th, tc), packed
// [2, T, B, H], at pre-activations `gates` and previous cell states `c_prev`, along `direct`
// [T, B, 4H] (the part of tG_t that earlier tangents do not reach) and the first step's
// tangents h_carry, c_carry; each undefined one is zero.
Tensor sequence_tangent(const Tensor& gates, const Tensor& c_prev, const Tensor& w,
                        const Tensor& direct, Tensor h_carry, Tensor c_carry, bool reverse) {
  const int64_t steps = gates.size(0);
  std::vector<Tensor> th(static_cast<std::size_t>(steps)), tc(th.size());
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = step_of(s, steps, reverse);
    Tensor tg = direct.defined() ? direct.select(0, t) : Tensor();
    if (h_carry.defined()) tg = tg.defined() ? tg + matmul(h_carry, mT(w)) : matmul(h_carry, mT(w));
    const Tensor g_t = gates.select(0, t), c_t = c_prev.select(0, t);
    const Tensor step_tangent =
        detail::lstm_cell_tangent(g_t, c_t, tg.defined() ? tg : zeros_like(g_t),
                                  c_carry.defined() ? c_carry : zeros_like(c_t));
    h_carry = step_tangent.select(0, 0);
    c_carry = step_tangent.select(0, 1);
    th[static_cast<std::size_t>(t)] = h_carry;
    tc[static_cast<std::size_t>(t)] = c_carry;
  }
  return stack({stack(th, 0), stack(tc, 0)}, 0);
}

// Note [The fused LSTM sequence gradient]
// Where nothing differentiates lstm_sequence's rule (the saved pre-activations are used: Note
// [LSTM sequence rules]), its reverse loop runs as one op on one kernel (Note [The LSTM
// sequence gradient kernel] in src/backend/cpu/lstm_sequence_backward.cpp):
// B(u) = (dG, dh0, dc0), flat, for the cotangent u [2, T, B, H] of every step's (h, c). B is
// linear in u: it is the transpose of the sequence's Jacobian J in (xp, h0, c0). So its rules in
// u are the sequence's forward mode, v -> J v (the VJP, with ops: sequence_tangent), and B
// itself (the JVP). In its other inputs (the pre-activations, the cell states, c0, W_hh) it
// has no rules: the sequence's rule recomputes with ops whenever those would be differentiated,
// so this op never sees them differentiated, and a caller that did gets a named error.
struct LstmSequenceBackward {
  static constexpr const char* name = "lstm_sequence_backward";
  auto fields() { return std::tie(reverse); }
  static constexpr Save save = Save::Inputs;
  static constexpr bool jvp_undefined_is_zero = true;
  bool reverse = false;

  Tensor forward(const Tensor& grad, const Tensor& gates, const Tensor& cs, const Tensor& c0,
                 const Tensor& w) const {
    return kernels::lstm_sequence_backward(grad, gates, cs, c0, w, reverse);
  }

  static void check_only_grad(bool others) {
    ADJOINT_CHECK(!others, Value, name,
                  "is differentiable only in its cotangent; lstm_sequence's gradient "
                  "recomputes with ops where the gates, states or w_hh are differentiated");
  }

  std::array<Tensor, 5> vjp(const Ctx& c, const Tensor& v) const {
    check_only_grad(c.needs_grad(1) || c.needs_grad(2) || c.needs_grad(3) || c.needs_grad(4));
    const Tensor &gates = c.input(1), &cs = c.input(2), &c0 = c.input(3), &w = c.input(4);
    const int64_t n = gates.numel(), state = c0.numel();
    const Tensor vg = v.narrow(0, 0, n).reshape(gates.shape());
    const Tensor vh0 = v.narrow(0, n, state).reshape(c0.shape());
    const Tensor vc0 = v.narrow(0, n + state, state).reshape(c0.shape());
    std::array<Tensor, 5> out;
    out[0] = sequence_tangent(gates, previous_states(c0, cs, reverse), w, vg, vh0, vc0, reverse);
    return out;
  }

  Tensor jvp(const Ctx& c, const Tensor& t_grad, const Tensor& t_gates, const Tensor& t_cs,
             const Tensor& t_c0, const Tensor& t_w) const {
    check_only_grad(t_gates.defined() || t_cs.defined() || t_c0.defined() || t_w.defined());
    return apply(*this, t_grad, c.input(1), c.input(2), c.input(3), c.input(4));
  }

  Tensor vmap(const BatchArgs& b) const {
    const LstmSequenceBackward op = *this;
    return detail::each_example(
        b, [&](const std::vector<Tensor>& x) { return apply(op, x[0], x[1], x[2], x[3], x[4]); });
  }
};

struct LstmSequence {
  static constexpr const char* name = "lstm_sequence";
  auto fields() { return std::tie(reverse); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  static constexpr bool jvp_undefined_is_zero = true;
  bool reverse = false;

  Tensor forward(Saver& s, const Tensor& xp, const Tensor& w, const Tensor& h0,
                 const Tensor& c0) const {
    kernels::LstmSequenceForward r = kernels::lstm_sequence(xp, w, h0, c0, reverse);
    s.save(r.gates);
    return r.out;
  }

  int64_t step(int64_t s, int64_t steps) const { return step_of(s, steps, reverse); }
  Tensor previous(const Tensor& first, const Tensor& seq) const {
    return previous_states(first, seq, reverse);
  }

  // G = xp + h_prev W_hhᵀ, with ops.
  static Tensor gates_of(const Tensor& xp, const Tensor& w, const Tensor& h_prev) {
    return xp + matmul(h_prev, mT(w));
  }

  // Whether backward recomputes the pre-activations with ops rather than use the saved ones
  // (Note [LSTM sequence rules]).
  static bool recompute_gates(const Ctx& c) {
    bool recompute = !c.saved(0).defined();  // a batching rule's forward saves none
    for (std::size_t i = 0; i < 4; ++i) {
      const Tensor& x = c.input(i);
      recompute = recompute || c.differentiated(x) ||
                  (tls_mode.dual_visible != 0 && detail::has_visible_tangent(x));
    }
    return recompute;
  }

  // What the loop below computes, on the fused op (Note [The fused LSTM sequence gradient]).
  std::array<Tensor, 4> fused_vjp(const Ctx& c, const Tensor& u, const Tensor& h_prev) const {
    const Tensor &w = c.input(1), &c0 = c.input(3), &gates = c.saved(0);
    const Tensor flat =
        apply(LstmSequenceBackward{.reverse = reverse}, u, gates, c.output().select(0, 1), c0, w);
    const int64_t n = gates.numel(), state = c0.numel();
    const Tensor dg = flat.narrow(0, 0, n).reshape(gates.shape());
    std::array<Tensor, 4> out;
    if (c.needs_grad(0)) out[0] = dg;
    if (c.needs_grad(1)) {
      const int64_t rows = dg.size(0) * dg.size(1);
      out[1] = matmul(mT(dg.reshape({rows, dg.size(2)})), h_prev.reshape({rows, h_prev.size(2)}));
    }
    if (c.needs_grad(2)) out[2] = flat.narrow(0, n, state).reshape(c0.shape());
    if (c.needs_grad(3)) out[3] = flat.narrow(0, n + state, state).reshape(c0.shape());
    return out;
  }

  std::array<Tensor, 4> vjp(const Ctx& c, const Tensor& u) const {
    const Tensor &w = c.input(1), &h0 = c.input(2), &c0 = c.input(3);
    const Tensor h_prev = previous(h0, c.output().select(0, 0));
    if (!recompute_gates(c)) return fused_vjp(c, u, h_prev);
    const Tensor c_prev = previous(c0, c.output().select(0, 1));
    const Tensor gates = gates_of(c.input(0), w, h_prev);
    const Tensor uh = u.select(0, 0), uc = u.select(0, 1);
    const int64_t steps = gates.size(0);
    std::vector<Tensor> dgates(static_cast<std::size_t>(steps));
    Tensor dh, dc;  // what reaches the state of the step run before from the steps after it
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t t = step(s, steps);
      const Tensor gh = dh.defined() ? uh.select(0, t) + dh : uh.select(0, t);
      const Tensor gc = dc.defined() ? uc.select(0, t) + dc : uc.select(0, t);
      const LSTMCellOutput d =
          lstm_cell_fused_backward(gh, gc, gates.select(0, t), c_prev.select(0, t));
      dgates[static_cast<std::size_t>(t)] = d.h;  // the gates' gradient
      dc = d.c;
      if (s > 0 || c.needs_grad(2)) dh = matmul(d.h, w);
    }
    const Tensor dg = stack(dgates, 0);
    std::array<Tensor, 4> out;
    if (c.needs_grad(0)) out[0] = dg;
    if (c.needs_grad(1)) {
      const int64_t rows = dg.size(0) * dg.size(1);
      out[1] = matmul(mT(dg.reshape({rows, dg.size(2)})), h_prev.reshape({rows, h_prev.size(2)}));
    }
    if (c.needs_grad(2)) out[2] = dh;
    if (c.needs_grad(3)) out[3] = dc;
    return out;
  }

  // Note [LSTM sequence rules], forward mode; undefined tangents are zero.
  Tensor jvp(const Ctx& c, const Tensor& t_xp, const Tensor& t_w, const Tensor& t_h0,
             const Tensor& t_c0) const {
    const Tensor &xp = c.input(0), &w = c.input(1), &h0 = c.input(2), &c0 = c.input(3);
    const Tensor h_prev = previous(h0, c.output().select(0, 0));
    const Tensor c_prev = previous(c0, c.output().select(0, 1));
    const Tensor gates = gates_of(xp, w, h_prev);
    Tensor direct = t_xp;  // the part of tG that earlier tangents do not reach
    if (t_w.defined()) {
      const Tensor hw = matmul(h_prev, mT(t_w));
      direct = direct.defined() ? direct + hw : hw;
    }
    return sequence_tangent(gates, c_prev, w, direct, t_h0, t_c0, reverse);
  }

  // Batching: with W_hh shared, the vmap dim folds into the batch of rows ([T, V B, 4H]) and
  // the result unfolds to [V, 2, T, B, H]; a batched W_hh runs example by example. The op it
  // applies saves its own pre-activations; this node's VJP (grad of vmap) recomputes them.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(Tensor());
    const LstmSequence op = *this;
    if (b.batched(1))
      return detail::each_example(
          b, [&](const std::vector<Tensor>& x) { return apply(op, x[0], x[1], x[2], x[3]); });
    const Tensor xp = b.with_batch(0);  // [V, T, B, 4H]
    const int64_t v = xp.size(0), steps = xp.size(1), batch = xp.size(2), hidden = b[1].size(1);
    auto rows = [&](std::size_t i) { return b.with_batch(i).reshape({v * batch, hidden}); };
    const Tensor folded = xp.transpose(0, 1).reshape({steps, v * batch, 4 * hidden});
    const Tensor out = apply(op, folded, b[1], rows(2), rows(3));  // [2, T, V B, H]
    return out.reshape({2, steps, v, batch, hidden}).permute({2, 0, 1, 3, 4});
  }
};

}  // namespace

LSTMSequenceOutput lstm_sequence(const Tensor& xp_in, const Tensor& w_in, const Tensor& h0_in,
                                 const Tensor& c0_in, bool reverse) {
  const char* op = "lstm_sequence";
  const Tensor* all[] = {&xp_in, &w_in, &h0_in, &c0_in};
  for (const Tensor* x : all) {
    ADJOINT_CHECK(x->defined(), Value, op, "got an undefined xp, w_hh, h0 or c0");
    ADJOINT_CHECK(is_floating(x->dtype()), DType, op, "expected floating xp, w_hh, h0 and c0, got ",
                  describe(xp_in), ", ", describe(w_in), ", ", describe(h0_in), " and ",
                  describe(c0_in));
  }
  bool ok = xp_in.dim() == 3 && w_in.dim() == 2 && h0_in.dim() == 2 && c0_in.dim() == 2;
  const int64_t hidden = ok ? w_in.size(1) : 0;
  ok = ok && hidden > 0 && xp_in.size(0) > 0 && w_in.size(0) == 4 * hidden &&
       xp_in.size(2) == 4 * hidden && h0_in.shape() == Shape{xp_in.size(1), hidden} &&
       c0_in.shape() == h0_in.shape();
  ADJOINT_CHECK(
      ok, Shape, op, "expected xp [T, B, 4H], w_hh [4H, H], h0 and c0 [B, H] with T, H >= 1, got ",
      describe(xp_in), ", ", describe(w_in), ", ", describe(h0_in), " and ", describe(c0_in));
  DType dt = xp_in.dtype();
  for (const Tensor* x : all) dt = promote_types(dt, x->dtype());
  const Tensor packed = apply(LstmSequence{.reverse = reverse}, cast_to(xp_in, dt),
                              cast_to(w_in, dt), cast_to(h0_in, dt), cast_to(c0_in, dt));
  return {packed.select(0, 0), packed.select(0, 1)};
}

LSTMSequenceGrad lstm_sequence_backward(const Tensor& grad_h, const Tensor& grad_c,
                                        const Tensor& gates_in, const Tensor& c_in,
                                        const Tensor& c0_in, const Tensor& w_in, bool reverse) {
  const char* op = "lstm_sequence_backward";
  const Tensor* all[] = {&gates_in, &c_in, &c0_in, &w_in};
  for (const Tensor* x : all)
    ADJOINT_CHECK(x->defined() && is_floating(x->dtype()), DType, op,
                  "expected floating gates, c, c0 and w_hh, got ", describe(gates_in), ", ",
                  describe(c_in), ", ", describe(c0_in), " and ", describe(w_in));
  const Shape& c_shape = c_in.shape();
  bool ok = gates_in.dim() == 3 && w_in.dim() == 2 && c0_in.dim() == 2 && c_in.dim() == 3;
  const int64_t hidden = ok ? w_in.size(1) : 0;
  ok = ok && hidden > 0 && gates_in.size(0) > 0 && w_in.size(0) == 4 * hidden &&
       gates_in.size(2) == 4 * hidden &&
       c_shape == Shape{gates_in.size(0), gates_in.size(1), hidden} &&
       c0_in.shape() == Shape{gates_in.size(1), hidden};
  for (const Tensor* g : {&grad_h, &grad_c})
    ok = ok && (!g->defined() || (g->shape() == c_shape && is_floating(g->dtype())));
  ADJOINT_CHECK(ok, Shape, op,
                "expected grad_h and grad_c [T, B, H] (or undefined), gates [T, B, 4H], c "
                "[T, B, H], c0 [B, H] and w_hh [4H, H] with T, H >= 1, got ",
                describe(grad_h), ", ", describe(grad_c), ", ", describe(gates_in), ", ",
                describe(c_in), ", ", describe(c0_in), " and ", describe(w_in));
  DType dt = gates_in.dtype();
  for (const Tensor* x : all) dt = promote_types(dt, x->dtype());
  const Tensor c = cast_to(c_in, dt);
  const Tensor gh = grad_h.defined() ? cast_to(grad_h, dt) : zeros_like(c);
  const Tensor gc = grad_c.defined() ? cast_to(grad_c, dt) : zeros_like(c);
  const Tensor gates = cast_to(gates_in, dt), c0 = cast_to(c0_in, dt);
  const Tensor flat = apply(LstmSequenceBackward{.reverse = reverse}, stack({gh, gc}, 0), gates, c,
                            c0, cast_to(w_in, dt));
  const int64_t n = gates.numel(), state = c0.numel();
  return {flat.narrow(0, 0, n).reshape(gates.shape()), flat.narrow(0, n, state).reshape(c0.shape()),
          flat.narrow(0, n + state, state).reshape(c0.shape())};
}

}  // namespace adjoint

ADJOINT_OPS_FILE(rnn_sequence)
