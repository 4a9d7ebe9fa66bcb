// scaled_dot_product_attention: one op on the fused kernel (src/backend/cpu/attention.cpp),
// whose VJP is a second op on the fused backward kernel, and the matmul/softmax math path,
// which is both the public oracle (scaled_dot_product_attention_math) and what the rules that
// are not on the hot path are written with. See Note [Attention rules].
#include "adjoint/attention_ops.h"

#include <array>
#include <cmath>
#include <limits>
#include <span>

#include "backend/attention_kernels.h"
#include "core/op_fields.h"
#include "ops/backward_ops.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// Note [Attention rules]
// The forward op (q, k, v, mask, key) -> out keeps its inputs, its output and the kernel's
// log-sum-exp per query row. Its VJP is the op scaled_dot_product_attention_backward, one
// kernel for dq, dk and dv packed into one tensor (Note [Packed outputs] in
// linalg_spectral.cpp), so a backward keeps nothing of size L × S either. The rules off that
// path are written with ops on the math path, which materialises the [L, S] probabilities:
// - the JVP of the forward (forward mode through attention stores what the math path stores);
// - the VJP and JVP of the backward op, i.e. double backward and forward-over-reverse: they
//   differentiate the backward op as the function of (dO, q, k, v, mask) it is, with the
//   probabilities recomputed from q and k, so the saved output and log-sum-exp it also reads
//   get no gradient of their own (their dependence on q, k and v is in the recomputation);
// - the gradient of a float mask (the scores' gradient summed to the mask's shape).
// The math path drops the elements the kernels drop (attention_dropout_scale), so every rule
// differentiates the function the kernels compute.
constexpr const char* kName = "scaled_dot_product_attention";

double inf() { return std::numeric_limits<double>::infinity(); }

struct Attrs {
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  kernels::AttentionSpec spec() const { return {scale, causal, dropout_p}; }
};

// The dropout multipliers of the kernels for the scores shape [*b, Hq, L, S]: 1 / (1 - p) or 0.
// The key is an integer: nothing to differentiate.
struct AttentionDropoutScale {
  static constexpr const char* name = "attention_dropout_scale";
  auto fields() { return std::tie(scores, p, dtype); }
  static constexpr Save save = Save::None;
  Shape scores;
  double p = 0;
  DType dtype = DType::Float32;
  Tensor forward(const Tensor& seed) const {
    return kernels::attention_dropout_scale(seed, scores, p, dtype);
  }
  // d/dkey = 0 (an integer)
  Tensor vjp(const Ctx&, const Tensor&) const { return Tensor(); }
  Tensor jvp(const Ctx&, const Tensor&) const { return zeros(scores, dtype); }
  // Batching: the key [B, P, 2] is B P keys of a batch B times larger (Note [Attention
  // dropout] in attention.cpp), so each example draws what it would alone.
  Tensor vmap(const BatchArgs& b) const {
    const Tensor& key = b[0];
    Shape shape = scores;
    shape.insert(0, key.size(0));
    return apply(AttentionDropoutScale{shape, p, dtype},
                 key.reshape({key.size(0) * key.size(1), 2}));
  }
};

Tensor dropout_scale(const Tensor& seed, const Shape& scores, double p, DType dtype) {
  return apply(AttentionDropoutScale{scores, p, dtype}, seed);
}

/// k or v [*b, Hkv, S, X] with each head repeated for its group of query heads: [*b, Hq, S, X].
Tensor repeat_heads(const Tensor& t, int64_t heads_q) {
  const int64_t nd = t.dim(), hkv = t.size(nd - 3);
  if (hkv == heads_q) return t;
  Shape grouped = t.unsqueeze(nd - 2).shape();
  grouped[nd - 2] = heads_q / hkv;
  Shape out = t.shape();
  out[nd - 3] = heads_q;
  return t.unsqueeze(nd - 2).expand(grouped).reshape(out);
}

/// The adjoint of repeat_heads: [*b, Hq, S, X] summed over each group to [*b, Hkv, S, X].
Tensor sum_heads(const Tensor& t, int64_t heads_kv) {
  const int64_t nd = t.dim(), hq = t.size(nd - 3);
  if (hq == heads_kv) return t;
  std::vector<int64_t> grouped(t.shape().begin(), t.shape().end());
  grouped[nd - 3] = hq / heads_kv;
  grouped.insert(grouped.begin() + (nd - 3), heads_kv);
  return sum(t.reshape(Shape(grouped)), {nd - 2});
}

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

/// The scores' additive bias [.., L, S] in `dtype`: the float mask, 0 / -inf for a bool mask
/// or the causal mask; undefined without either.
Tensor score_bias(const Tensor& mask, bool causal, int64_t L, int64_t S, DType dtype) {
  if (causal) {
    const Tensor future = gt(arange(S).unsqueeze(0), arange(L).unsqueeze(1));  // j > i
    return where(future, full({}, -inf(), dtype), 0.0);
  }
  if (!mask.defined()) return Tensor();
  if (mask.dtype() == DType::Bool) return where(mask, zeros({}, dtype), -inf());
  return mask;
}

/// softmax along the last dim with every row of -inf scores 0, as PyTorch's _safe_softmax:
/// such a row is softmaxed as zeros (so no NaN reaches a gradient) and then replaced by 0.
Tensor safe_softmax(const Tensor& s) {
  if (s.size(-1) == 0) return s;  // no keys
  const Tensor dead = eq(amax(s, {-1}, true), -inf());
  const Tensor zero = zeros({}, s.dtype());
  return where(dead, zero, softmax(where(dead, zero, s), -1));
}

/// The math path's pieces: k and v with their heads repeated to q's, the probabilities P and
/// the dropout multipliers Z (undefined without dropout).
struct MathAttention {
  Tensor k, v, p, z;
  Tensor dropped(const Tensor& t) const { return z.defined() ? t * z : t; }
};

MathAttention math_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const Tensor& seed, const Attrs& a) {
  const int64_t nd = q.dim(), heads = q.size(nd - 3), L = q.size(nd - 2), S = k.size(nd - 2);
  MathAttention m;
  m.k = repeat_heads(k, heads);
  m.v = repeat_heads(v, heads);
  Tensor s = matmul(q, mT(m.k)) * a.scale;
  const Tensor bias = score_bias(mask, a.causal, L, S, q.dtype());
  if (bias.defined()) s = s + bias;
  m.p = safe_softmax(s);
  if (seed.defined() && a.dropout_p > 0)
    m.z = dropout_scale(seed, m.p.shape(), a.dropout_p, q.dtype());
  return m;
}

/// The log-sum-exp of each row of scores with ops (0 for a row masked throughout), in the
/// kernels' dtype (float32, float64 for float64): for a VJP whose forward was a batching rule.
Tensor math_lse(const Tensor& q_in, const Tensor& k_in, const Tensor& mask, const Attrs& a) {
  const DType wide = q_in.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const Tensor q = q_in.to(wide), k = repeat_heads(k_in.to(wide), q_in.size(-3));
  Tensor s = matmul(q, mT(k)) * a.scale;
  const Tensor m = mask.defined() && mask.dtype() != DType::Bool ? mask.to(wide) : mask;
  const Tensor bias = score_bias(m, a.causal, q.size(-2), k.size(-2), wide);
  if (bias.defined()) s = s + bias;
  if (s.size(-1) == 0)  // no keys: every row is masked throughout
    return zeros(Shape(std::vector<int64_t>(q.shape().begin(), q.shape().end() - 1)), wide);
  const Tensor dead = eq(amax(s, {-1}), -inf());
  return where(dead, zeros({}, wide),
               logsumexp(where(dead.unsqueeze(-1), zeros({}, wide), s), {-1}));
}

/// A key [P, 2] of a batching rule as the op on [B, *b] sees it: [B P, 2] (Note [Attention
/// dropout] in attention.cpp; an unbatched key is repeated, so every example draws alike).
Tensor fold_key(const BatchArgs& b, std::size_t i) {
  if (!b[i].defined()) return Tensor();
  const Tensor key = b.with_batch(i);
  return key.reshape({key.size(0) * key.size(1), 2});
}

// Whether `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

// Note [Attention shape rules]
// What an imported graph's attention nodes must record (Note [Checking an imported graph] in
// src/export/import.cpp), the kernels' own checks on shapes and dtypes only: q [*b, Hq, L, E],
// k [*b, Hkv, S, E] and v [*b, Hkv, S, Ev] of one rank >= 3 and one floating dtype with Hkv
// dividing Hq, a mask (bool or q's dtype) broadcasting to the scores [*b, Hq, L, S] without
// growing them, and a dropout key int64 [P, 2]. The result is [*b, Hq, L, Ev] in q's dtype.
Shape attention_output_shape(std::span<const detail::ValueSpec> in, const char* op) {
  const detail::ValueSpec &q = spec_of(in, 0, op), &k = spec_of(in, 1, op), &v = spec_of(in, 2, op);
  const std::size_t nd = q.shape.size();
  bool ok = nd >= 3 && k.shape.size() == nd && v.shape.size() == nd;
  for (std::size_t d = 0; ok && d + 3 < nd; ++d)
    ok = k.shape[d] == q.shape[d] && v.shape[d] == q.shape[d];
  ok = ok && k.shape[nd - 1] == q.shape[nd - 1] && v.shape[nd - 2] == k.shape[nd - 2] &&
       v.shape[nd - 3] == k.shape[nd - 3] && k.shape[nd - 3] > 0 &&
       q.shape[nd - 3] % k.shape[nd - 3] == 0;
  ADJOINT_CHECK(ok, Shape, op, "q ", describe(q), ", k ", describe(k), " and v ", describe(v),
                " do not fit q [*b, Hq, L, E], k [*b, Hkv, S, E], v [*b, Hkv, S, Ev] with Hq a "
                "multiple of Hkv");
  ADJOINT_CHECK(is_floating(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype, DType, op,
                "q, k and v must share a floating dtype, got ", describe(q), ", ", describe(k),
                ", ", describe(v));
  if (in.size() > 3 && in[3].defined) {
    const detail::ValueSpec& mask = in[3];
    Shape scores = q.shape;
    scores[nd - 1] = k.shape[nd - 2];
    ADJOINT_CHECK((mask.dtype == DType::Bool || mask.dtype == q.dtype) && mask.shape.size() <= nd &&
                      broadcasts_to(mask.shape, scores),
                  Shape, op, "the mask ", describe(mask), " must be bool or of q's dtype ", q.dtype,
                  " and broadcast to the scores ", scores);
  }
  if (in.size() > 4 && in[4].defined) {
    const detail::ValueSpec& key = in[4];
    ADJOINT_CHECK(key.dtype == DType::Int64 && key.shape.size() == 2 && key.shape[1] == 2, Shape,
                  op, "the dropout key must be int64 [P, 2], got ", describe(key));
  }
  Shape out = q.shape;
  out[nd - 1] = v.shape[nd - 1];
  return out;
}

struct Grads {
  Tensor dq, dk, dv;
};
/// The three parts of a packed [dq | dk | dv] (as attention_backward packs them).
Grads unpack(const Tensor& packed, const Shape& q, const Shape& k, const Shape& v) {
  const int64_t nq = q.numel(), nk = k.numel(), nv = v.numel();
  return {packed.narrow(0, 0, nq).reshape(q), packed.narrow(0, nq, nk).reshape(k),
          packed.narrow(0, nq + nk, nv).reshape(v)};
}
Tensor pack(const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  return cat({dq.reshape({dq.numel()}), dk.reshape({dk.numel()}), dv.reshape({dv.numel()})}, 0);
}

// dq, dk, dv of attention for the output's gradient g (packed), on the fused backward kernel.
// A function of (g, q, k, v, mask): out and lse are what the forward computed from them. See
// Note [Attention rules] for its own rules, on the math path.
struct ScaledDotProductAttentionBackward : Attrs {
  static constexpr const char* name = "scaled_dot_product_attention_backward";
  auto fields() { return std::tie(scale, causal, dropout_p); }
  static constexpr Save save = Save::Inputs;

  // Inputs (g, q, k, v, out, lse, mask, key): g and out of the forward's result shape, lse
  // [*b, Hq, L]; the result packs dq, dk and dv (Note [Attention shape rules]).
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    ADJOINT_CHECK(in.size() == 8, Value, name, "expected 8 inputs, got ", in.size());
    const std::array<detail::ValueSpec, 5> fwd = {in[1], in[2], in[3], in[6], in[7]};
    const Shape out = attention_output_shape(fwd, name);
    const detail::ValueSpec &g = spec_of(in, 0, name), &o = spec_of(in, 4, name);
    const detail::ValueSpec& lse = spec_of(in, 5, name);
    const detail::ValueSpec& q = in[1];
    const Shape rows(std::vector<int64_t>(q.shape.begin(), q.shape.end() - 1));
    ADJOINT_CHECK(g.shape == out && o.shape == out && lse.shape == rows, Shape, name,
                  "the output's gradient ", describe(g), ", the output ", describe(o),
                  " and the log-sum-exp ", describe(lse), " must be ", out, ", ", out, " and ",
                  rows);
    return {Shape{q.shape.numel() + in[2].shape.numel() + in[3].shape.numel()}, q.dtype};
  }

  Tensor forward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& out, const Tensor& lse, const Tensor& mask,
                 const Tensor& seed) const {
    return kernels::attention_backward(g, q, k, v, out, lse, mask, seed, spec());
  }

  // With P = softmax(S), S = scale q keᵀ + bias, Z the dropout multipliers, dP = (g veᵀ) Z,
  // D = rowsum(dP P), dS = P (dP - D), and the cotangents a, b, cv of dq, dke, dve (ke, ve: k
  // and v with their heads repeated; b, cv likewise):
  //   W = scale (a keᵀ + q bᵀ), e = rowsum(P W), R = P (W - e) Z,
  //   Y = W (dP - D) - e dP + Z (g cvᵀ), Zs = P (Y - rowsum(P Y)) (softmax_backward),
  //   d/dg = R ve + (P Z) cv, d/dq = scale (Zs ke + dS b), d/dke = scale (Zsᵀ q + dSᵀ a),
  //   d/dve = Rᵀ g, d/dmask = Zs.
  std::array<Tensor, 8> vjp(const Ctx& c, const Tensor& ct) const {
    const Tensor &g = c.input(0), &q = c.input(1), &k = c.input(2), &v = c.input(3);
    const Tensor &mask = c.input(6), &seed = c.input(7);
    const int64_t hq = q.size(-3), hkv = k.size(-3);
    const Grads cot = unpack(ct, q.shape(), k.shape(), v.shape());
    const MathAttention m = math_attention(q, k, v, mask, seed, *this);
    const Tensor b = repeat_heads(cot.dk, hq), cv = repeat_heads(cot.dv, hq);
    const Tensor dp = m.dropped(matmul(g, mT(m.v)));
    const Tensor d = sum(dp * m.p, {-1}, true);
    const Tensor ds = m.p * (dp - d);
    const Tensor w = (matmul(cot.dq, mT(m.k)) + matmul(q, mT(b))) * scale;
    const Tensor e = sum(m.p * w, {-1}, true);
    const Tensor r = m.dropped(m.p * (w - e));
    const Tensor y = w * (dp - d) - e * dp + m.dropped(matmul(g, mT(cv)));
    const Tensor zs = softmax_backward(y, m.p, -1);
    std::array<Tensor, 8> out;
    if (c.needs_grad(0)) out[0] = matmul(r, m.v) + matmul(m.dropped(m.p), cv);
    if (c.needs_grad(1)) out[1] = (matmul(zs, m.k) + matmul(ds, b)) * scale;
    if (c.needs_grad(2))
      out[2] = sum_heads((matmul(mT(zs), q) + matmul(mT(ds), cot.dq)) * scale, hkv);
    if (c.needs_grad(3)) out[3] = sum_heads(matmul(mT(r), g), hkv);
    if (c.needs_grad(6) && mask.defined() && mask.dtype() != DType::Bool) out[6] = zs;
    return out;  // out and lse: see Note [Attention rules]; the key is an integer
  }

  // The derivative of the same quantities along tangents tg, tq, tk, tv (and a float mask's):
  //   tS = scale (tq keᵀ + q tkeᵀ) + tmask, tP = P (tS - rowsum(P tS)),
  //   tdP = (tg veᵀ + g tveᵀ) Z, tD = rowsum(tdP P + dP tP), tdS = tP (dP - D) + P (tdP - tD),
  //   t dq = scale (tdS ke + dS tke), t dke = scale (tdSᵀ q + dSᵀ tq),
  //   t dve = (tP Z)ᵀ g + (P Z)ᵀ tg.
  Tensor jvp(const Ctx& c, const Tensor& tg, const Tensor& tq, const Tensor& tk, const Tensor& tv,
             const Tensor&, const Tensor&, const Tensor& tmask, const Tensor&) const {
    const Tensor &g = c.input(0), &q = c.input(1), &k = c.input(2), &v = c.input(3);
    const Tensor &mask = c.input(6), &seed = c.input(7);
    const int64_t hq = q.size(-3), hkv = k.size(-3);
    const MathAttention m = math_attention(q, k, v, mask, seed, *this);
    const Tensor tke = repeat_heads(tk, hq), tve = repeat_heads(tv, hq);
    Tensor ts = (matmul(tq, mT(m.k)) + matmul(q, mT(tke))) * scale;
    if (mask.defined() && mask.dtype() != DType::Bool && tmask.defined()) ts = ts + tmask;
    const Tensor tp = m.p * (ts - sum(m.p * ts, {-1}, true));
    const Tensor dp = m.dropped(matmul(g, mT(m.v)));
    const Tensor d = sum(dp * m.p, {-1}, true);
    const Tensor ds = m.p * (dp - d);
    const Tensor tdp = m.dropped(matmul(tg, mT(m.v)) + matmul(g, mT(tve)));
    const Tensor td = sum(tdp * m.p + dp * tp, {-1}, true);
    const Tensor tds = tp * (dp - d) + m.p * (tdp - td);
    const Tensor tdq = (matmul(tds, m.k) + matmul(ds, tke)) * scale;
    const Tensor tdk = sum_heads((matmul(mT(tds), q) + matmul(mT(ds), tq)) * scale, hkv);
    const Tensor tdv =
        sum_heads(matmul(mT(m.dropped(tp)), g) + matmul(mT(m.dropped(m.p)), tg), hkv);
    return pack(tdq, tdk, tdv);
  }

  // Batching: the vmap dim is one more leading batch dim of every tensor; the packed result
  // [B dq | B dk | B dv] is regrouped per example.
  Tensor vmap(const BatchArgs& b) const {
    const int64_t r = b.logical_dim(1);
    const Tensor q = b.with_batch(1), k = b.with_batch(2), v = b.with_batch(3);
    const Tensor mask = b[6].defined() ? b.aligned(6, r) : Tensor();
    const Tensor packed = apply(*this, b.with_batch(0), q, k, v, b.with_batch(4), b.with_batch(5),
                                mask, fold_key(b, 7));
    const int64_t n = q.size(0);
    const Grads parts = unpack(packed, q.shape(), k.shape(), v.shape());
    return cat({parts.dq.reshape({n, -1}), parts.dk.reshape({n, -1}), parts.dv.reshape({n, -1})},
               1);
  }
};

Tensor attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& seed, const Attrs& a) {
  ScaledDotProductAttentionBackward op;
  static_cast<Attrs&>(op) = a;
  return apply(op, g.dtype() == q.dtype() ? g : g.to(q.dtype()), q, k, v, out, lse, mask, seed);
}

struct ScaledDotProductAttention : Attrs {
  static constexpr const char* name = kName;
  auto fields() { return std::tie(scale, causal, dropout_p); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::InputsAndOutput;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return {attention_output_shape(in, name), spec_of(in, 0, name).dtype};
  }

  Tensor forward(Saver& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const Tensor& seed) const {
    kernels::AttentionForward r = kernels::attention_forward(q, k, v, mask, seed, spec());
    s.save(r.lse);
    return r.out;
  }

  // dq, dk, dv: the fused backward (scaled_dot_product_attention_backward); d/dmask (a float
  // mask) = dS = P (dP - rowsum(dP P)) with dP = (g veᵀ) Z, on the math path.
  std::array<Tensor, 5> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor &q = c.input(0), &k = c.input(1), &v = c.input(2);
    const Tensor &mask = c.input(3), &seed = c.input(4);
    std::array<Tensor, 5> out;
    if (c.needs_grad(0) || c.needs_grad(1) || c.needs_grad(2)) {
      // A batching rule's forward leaves no log-sum-exp (see vmap below): recomputed then.
      const Tensor lse = c.saved(0).defined() ? c.saved(0) : math_lse(q, k, mask, *this);
      const Grads d = unpack(attention_backward(g, q, k, v, c.output(), lse, mask, seed, *this),
                             q.shape(), k.shape(), v.shape());
      if (c.needs_grad(0)) out[0] = d.dq;
      if (c.needs_grad(1)) out[1] = d.dk;
      if (c.needs_grad(2)) out[2] = d.dv;
    }
    if (c.needs_grad(3) && mask.defined() && mask.dtype() != DType::Bool) {
      const MathAttention m = math_attention(q, k, v, mask, seed, *this);
      const Tensor dp = m.dropped(matmul(g, mT(m.v)));
      out[3] = m.p * (dp - sum(dp * m.p, {-1}, true));
    }
    return out;
  }

  // tS = scale (tq keᵀ + q tkeᵀ) + tmask, tP = P (tS - rowsum(P tS)),
  // t out = (tP Z) ve + (P Z) tve (on the math path: Note [Attention rules])
  Tensor jvp(const Ctx& c, const Tensor& tq, const Tensor& tk, const Tensor& tv,
             const Tensor& tmask, const Tensor&) const {
    const Tensor &q = c.input(0), &k = c.input(1), &v = c.input(2);
    const Tensor &mask = c.input(3), &seed = c.input(4);
    const int64_t hq = q.size(-3);
    const MathAttention m = math_attention(q, k, v, mask, seed, *this);
    Tensor ts = (matmul(tq, mT(m.k)) + matmul(q, mT(repeat_heads(tk, hq)))) * scale;
    if (mask.defined() && mask.dtype() != DType::Bool && tmask.defined()) ts = ts + tmask;
    const Tensor tp = m.p * (ts - sum(m.p * ts, {-1}, true));
    return matmul(m.dropped(tp), m.v) + matmul(m.dropped(m.p), repeat_heads(tv, hq));
  }

  // Batching: the vmap dim is one more leading batch dim (q, k and v share theirs; the mask
  // aligns to the scores; the key folds as Note [Attention dropout] says). The op it applies
  // records its own log-sum-exp; this node's VJP (grad of vmap) recomputes it.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    const int64_t r = b.logical_dim(0);
    const Tensor mask = b[3].defined() ? b.aligned(3, r) : Tensor();
    s.save(Tensor());
    return apply(*this, b.with_batch(0), b.with_batch(1), b.with_batch(2), mask, fold_key(b, 4));
  }
};

// What both public functions start with: q, k and v of one rank >= 3 with broadcast batch dims
// (and heads, without GQA), the mask checked, the attributes, and the dims to drop at the end.
struct Prepared {
  Tensor q, k, v, mask;
  Attrs attrs;
  int64_t added_dims = 0;
};

Prepared prepare(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& attn_mask, double dropout_p, bool is_causal,
                 std::optional<double> scale, bool enable_gqa, const char* op) {
  ADJOINT_CHECK(query.defined() && key.defined() && value.defined(), Value, op,
                "query, key and value must be defined");
  ADJOINT_CHECK(
      is_floating(query.dtype()) && key.dtype() == query.dtype() && value.dtype() == query.dtype(),
      DType, op, "query, key and value must share a floating dtype, got ", describe(query), ", ",
      describe(key), ", ", describe(value));
  ADJOINT_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2, Shape, op,
                "expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got ",
                describe(query), ", ", describe(key), ", ", describe(value));
  ADJOINT_CHECK(query.size(-1) == key.size(-1) && key.size(-2) == value.size(-2), Shape, op,
                "query [..., L, E] and key [..., S, E] must share E, and key and value S: got ",
                describe(query), ", ", describe(key), ", ", describe(value));
  ADJOINT_CHECK(dropout_p >= 0 && dropout_p <= 1, Value, op, "dropout_p must be in [0, 1], got ",
                dropout_p);
  ADJOINT_CHECK(!(is_causal && attn_mask.defined()), Value, op,
                "is_causal and an explicit attn_mask cannot be given together, got mask ",
                describe(attn_mask));
  Prepared p;
  const int64_t rank = std::max<int64_t>({3, query.dim(), key.dim(), value.dim()});
  p.added_dims = rank - std::max<int64_t>({query.dim(), key.dim(), value.dim()});
  auto lift = [rank](Tensor t) {
    while (t.dim() < rank) t = t.unsqueeze(0);
    return t;
  };
  Tensor q = lift(query), k = lift(key), v = lift(value);
  // The broadcast batch dims: those before the heads with GQA, before [L, E] without.
  const int64_t own = enable_gqa ? 3 : 2;
  auto lead = [own](const Tensor& t) {
    return Shape(std::vector<int64_t>(t.shape().begin(), t.shape().end() - own));
  };
  const Shape batch = broadcast_shapes(broadcast_shapes(lead(q), lead(k), op), lead(v), op);
  auto expand_to = [&](const Tensor& t) {
    Shape s = batch;
    for (int64_t i = rank - own; i < rank; ++i) s.push_back(t.size(i));
    return t.shape() == s ? t : t.expand(s);
  };
  p.q = expand_to(q);
  p.k = expand_to(k);
  p.v = expand_to(v);
  const int64_t hq = p.q.size(-3), hk = p.k.size(-3), hv = p.v.size(-3);
  ADJOINT_CHECK(hk == hv && hk > 0 && hq % hk == 0, Shape, op,
                "with enable_gqa the key and value heads must be equal and divide the query "
                "heads, got query ",
                describe(query), ", key ", describe(key), ", value ", describe(value));
  if (attn_mask.defined()) {
    ADJOINT_CHECK(attn_mask.dtype() == DType::Bool || attn_mask.dtype() == query.dtype(), DType, op,
                  "attn_mask must be bool or of the query's dtype ", query.dtype(), ", got ",
                  describe(attn_mask));
    Shape scores = p.q.shape();
    scores[scores.size() - 1] = p.k.size(-2);
    ADJOINT_CHECK(broadcasts_to(attn_mask.shape(), scores), Shape, op, "attn_mask ",
                  describe(attn_mask), " does not broadcast to the scores ", scores);
    p.mask = attn_mask;
  }
  p.attrs.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  p.attrs.causal = is_causal;
  p.attrs.dropout_p = dropout_p;
  return p;
}

// The dropout key (Note [Attention dropout] in attention.cpp), drawn through the dispatch stack.
Tensor draw_key(double p, Generator* gen) {
  if (p == 0) return Tensor();
  return randint(0, std::numeric_limits<int64_t>::max(), {1, 2}, gen);
}

Tensor finish(Tensor out, int64_t added_dims) {
  for (int64_t i = 0; i < added_dims; ++i) out = out.squeeze(0);
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa, Generator* gen) {
  const Prepared p =
      prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kName);
  ScaledDotProductAttention op;
  static_cast<Attrs&>(op) = p.attrs;
  return finish(apply(op, p.q, p.k, p.v, p.mask, draw_key(dropout_p, gen)), p.added_dims);
}

Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key,
                                         const Tensor& value, const Tensor& attn_mask,
                                         double dropout_p, bool is_causal,
                                         std::optional<double> scale, bool enable_gqa,
                                         Generator* gen) {
  const Prepared p = prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                             "scaled_dot_product_attention_math");
  const MathAttention m = math_attention(p.q, p.k, p.v, p.mask, draw_key(dropout_p, gen), p.attrs);
  return finish(matmul(m.dropped(m.p), m.v), p.added_dims);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(attention)
