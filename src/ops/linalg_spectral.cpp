// Spectral decompositions: eigh and svd, and their values-only forms eigvalsh and svdvals.
// See Note [Packed outputs] for how one op returns several tensors. The rules follow PyTorch's
// (linalg_eig_backward / linalg_eig_jvp for Hermitian input, svd_backward / svd_jvp).
#include "ops/linalg_util.h"

#include "backend/kernels.h"
#include "backend/linalg_kernels.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

using linalg_detail::diag_embed;
using linalg_detail::diagonal;
using linalg_detail::eye_like;
using linalg_detail::mT;
using linalg_detail::narrow_view;
using linalg_detail::reshaped_view;
using linalg_detail::sym;
using linalg_detail::transposed_view;

// Note [Packed outputs]
// An op here has one output, and a decomposition has several. So the primitive returns them
// packed side by side in one tensor (eigh: [..., n + 1, n], the eigenvectors then a row of
// eigenvalues), and the public function hands out views of it (narrow, select), which are
// differentiable. The rules unpack the output and its cotangent or tangent the same way; a
// part the loss does not use arrives as zeros. Where PyTorch skips the terms of an undefined
// gradient, the VJPs take 0 · (1 / 0) as 0 entry by entry (gap_product, safe_quotient): the
// terms carry the 1 / (w_j - w_i) weights (and svd's 1 / S), and 0 · inf would make the
// gradient of eigh's eigenvalues (or svd's singular values) alone NaN at repeated values. This
// reads no values (a mask and where(), so compile records it), and it changes nothing where
// the weights are finite: there the full formula runs, also under forward-over-reverse, where
// a zero cotangent may still have a tangent. (At a zero gap, such a term is dropped where
// the skip-if-all-zero rule this replaced gave NaN; the derivative is not defined there.)
// eigvalsh and svdvals remain, and are cheaper.

/// 1 / (x_j - x_i) off the diagonal and 0 on it, for x [..., n]: the eigenvector (and
/// singular-vector) derivatives' weights. Infinite where two entries are equal.
Tensor inverse_gaps(const Tensor& x) {
  const Tensor e = x.unsqueeze(-2) - x.unsqueeze(-1);  // e_ij = x_j - x_i
  const Tensor id = eye_like(x, x.size(-1));
  return (1.0 - id) / (e + id);
}

/// inverse_gaps(x) ∘ p, with 0 where x_j = x_i and p_ij = 0 (see Note [Packed outputs]). The
/// skipped entries divide by 1 instead of 0, so where()'s zero gradient there stays finite.
Tensor gap_product(const Tensor& x, const Tensor& p) {
  const Tensor e = x.unsqueeze(-2) - x.unsqueeze(-1);  // e_ij = x_j - x_i
  const Tensor keep = logical_or(ne(e.detach(), 0.0), ne(p.detach(), 0.0));
  const Tensor id = eye_like(x, x.size(-1));
  const Tensor f = (1.0 - id) / (where(keep, e, 1.0) + id);
  return where(keep, f * p, 0.0);
}

/// x / d (broadcasting), with 0 where x and d are both 0 (see Note [Packed outputs]).
Tensor safe_quotient(const Tensor& x, const Tensor& d) {
  const Tensor keep = logical_or(ne(x.detach(), 0.0), ne(d.detach(), 0.0));
  return where(keep, x / where(keep, d, 1.0), 0.0);
}

Shape batch_with(const Tensor& a, std::initializer_list<int64_t> tail) {
  Shape s = linalg_detail::batch_of(a);
  for (int64_t d : tail) s.push_back(d);
  return s;
}

// A = V diag(w) Vᵀ, packed [..., n + 1, n]. See Note [Symmetric inputs] in linalg_solve.cpp.
struct Eigh {
  static constexpr const char* name = "eigh";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& a) const {
    const int64_t n = a.size(-1);
    kernels::Eigh e = kernels::eigh(a, true, name);
    Tensor packed = make_empty(batch_with(a, {n + 1, n}), a.dtype(), a.device());
    kernels::copy_into(narrow_view(packed, -2, 0, n), e.vectors);
    kernels::copy_into(narrow_view(packed, -2, n, 1),
                       reshaped_view(e.values, batch_with(a, {1, n})));
    return packed;
  }
  static Tensor vectors(const Tensor& p) { return p.narrow(-2, 0, p.size(-1)); }
  static Tensor values(const Tensor& p) { return p.select(-2, p.size(-1)); }
  // gA = sym(V (diag(gw) + F ∘ (Vᵀ gV)) Vᵀ), F_ij = 1 / (w_j - w_i)
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor v = vectors(c.output()), w = values(c.output()), gv = vectors(g);
    const Tensor inner = diag_embed(values(g)) + gap_product(w, matmul(mT(v), gv));
    return sym(matmul(matmul(v, inner), mT(v)));
  }
  // P = Vᵀ sym(dA) V: dw = diag(P), dV = V (F ∘ P)
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const Tensor v = vectors(c.output()), w = values(c.output());
    Tensor p = matmul(matmul(mT(v), sym(ta)), v);
    Tensor dv = matmul(v, inverse_gaps(w) * p);
    return cat({dv, diagonal(p).unsqueeze(-2)}, -2);
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// The eigenvalues alone: the rules recompute the eigenvectors with eigh (so that double
// backward sees how they depend on A), and need no gaps between eigenvalues.
struct Eigvalsh {
  static constexpr const char* name = "eigvalsh";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const { return kernels::eigh(a, false, name).values; }
  // gA = V diag(gw) Vᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor v = linalg::eigh(c.input(0)).eigenvectors;
    return matmul(v * g.unsqueeze(-2), mT(v));
  }
  // dw = diag(Vᵀ sym(dA) V)
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const Tensor v = linalg::eigh(c.input(0)).eigenvectors;
    return diagonal(matmul(matmul(mT(v), sym(ta)), v));
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// A = U diag(S) Vh (reduced), packed [..., k, m + 1 + n]: Uᵀ, then S as a column, then Vh.
struct Svd {
  static constexpr const char* name = "svd";
  auto fields() { return std::tie(m, n); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  int64_t m = 0, n = 0;  // A's rows and columns (set by the public function)
  Tensor forward(const Tensor& a) const {
    const int64_t k = std::min(m, n);
    kernels::Svd r = kernels::svd(a, true, name);
    Tensor packed = make_empty(batch_with(a, {k, m + 1 + n}), a.dtype(), a.device());
    kernels::copy_into(narrow_view(packed, -1, 0, m), transposed_view(r.u));
    kernels::copy_into(narrow_view(packed, -1, m, 1), reshaped_view(r.s, batch_with(a, {k, 1})));
    kernels::copy_into(narrow_view(packed, -1, m + 1, n), r.vh);
    return packed;
  }
  Tensor u(const Tensor& p) const { return mT(p.narrow(-1, 0, m)); }
  Tensor s(const Tensor& p) const { return p.select(-1, m); }
  Tensor vh(const Tensor& p) const { return p.narrow(-1, m + 1, n); }

  // With J = skew(Uᵀ gU), K = skew(Vh gV), F_ij = 1 / (S_j² - S_i²):
  // gA = U [(J S + S K) ∘ F + diag(gS)] Vh, plus (I - UUᵀ) gU S⁻¹ Vh when m > n, or
  // U S⁻¹ gVh (I - VVᵀ) when m < n.
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& p = c.output();
    const Tensor uu = u(p), ss = s(p), vvh = vh(p), gu = u(g), gvh = vh(g);
    Tensor j = matmul(mT(uu), gu);
    j = j - mT(j);
    Tensor k = matmul(vvh, mT(gvh));
    k = k - mT(k);
    const Tensor row = ss.unsqueeze(-2), col = ss.unsqueeze(-1);  // S on the right, S on the left
    // When only S is used (gU = gVh = 0) this is U diag(gS) Vh, finite at repeated values.
    Tensor inner = gap_product(ss * ss, j * row + col * k) + diag_embed(s(g));
    if (m > n) {
      Tensor gu_sinv = safe_quotient(gu, row);
      Tensor left = matmul(uu, inner) + gu_sinv - matmul(uu, matmul(mT(uu), gu_sinv));
      return matmul(left, vvh);
    }
    if (m < n) {
      Tensor sinv_gvh = safe_quotient(gvh, col);
      Tensor right = matmul(inner, vvh) + sinv_gvh - matmul(matmul(sinv_gvh, mT(vvh)), vvh);
      return matmul(uu, right);
    }
    return matmul(matmul(uu, inner), vvh);
  }
  // P = Uᵀ dA V: dS = diag(P), dU = U (F ∘ (P S + S Pᵀ)) [+ (I - UUᵀ) dA V S⁻¹ when m > n],
  // dV = V (F ∘ (S P + Pᵀ S)) [+ (I - VVᵀ) dAᵀ U S⁻¹ when m < n].
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const Tensor& p = c.output();
    const Tensor uu = u(p), ss = s(p), v = mT(vh(p));
    const Tensor row = ss.unsqueeze(-2), col = ss.unsqueeze(-1);
    const Tensor f = inverse_gaps(ss * ss);
    const Tensor ta_v = matmul(ta, v), pm = matmul(mT(uu), ta_v);
    Tensor du = matmul(uu, f * (pm * row + col * mT(pm)));
    Tensor dv = matmul(v, f * (col * pm + mT(pm) * row));
    if (m > n) du = du + (ta_v - matmul(uu, pm)) / row;
    if (m < n) {
      const Tensor ta_t_u = matmul(mT(ta), uu);
      dv = dv + (ta_t_u - matmul(v, mT(pm))) / row;
    }
    return cat({mT(du), diagonal(pm).unsqueeze(-1), mT(dv)}, -1);
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// The singular values alone; like Eigvalsh, the rules recompute U and Vh with svd.
struct Svdvals {
  static constexpr const char* name = "svdvals";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const { return kernels::svd(a, false, name).s; }
  // gA = U diag(gS) Vh
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const linalg::SvdResult r = linalg::svd(c.input(0));
    return matmul(r.u * g.unsqueeze(-2), r.vh);
  }
  // dS = diag(Uᵀ dA V)
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const linalg::SvdResult r = linalg::svd(c.input(0));
    return diagonal(matmul(matmul(mT(r.u), ta), mT(r.vh)));
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

}  // namespace

namespace linalg {

EighResult eigh(const Tensor& A) {
  linalg_detail::check_square(A, "eigh");
  const Tensor packed = apply(Eigh{}, A);
  return {Eigh::values(packed), Eigh::vectors(packed)};
}

Tensor eigvalsh(const Tensor& A) {
  linalg_detail::check_square(A, "eigvalsh");
  return apply(Eigvalsh{}, A);
}

SvdResult svd(const Tensor& A) {
  linalg_detail::check_matrix(A, "svd");
  const Svd op{A.size(-2), A.size(-1)};
  const Tensor packed = apply(op, A);
  return {op.u(packed), op.s(packed), op.vh(packed)};
}

Tensor svdvals(const Tensor& A) {
  linalg_detail::check_matrix(A, "svdvals");
  return apply(Svdvals{}, A);
}

}  // namespace linalg
}  // namespace adjoint

ADJOINT_OPS_FILE(linalg_spectral)
