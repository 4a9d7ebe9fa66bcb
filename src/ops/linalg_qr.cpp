// The reduced QR decomposition and least squares. The primitive is QR of a tall (or square)
// A, m >= n, with PyTorch's rules (linalg_qr_backward / linalg_qr_jvp); a wide A and lstsq
// are written with it and with solve_triangular.
#include <cmath>

#include "ops/linalg_util.h"

#include "backend/host_transfer.h"
#include "backend/kernels.h"
#include "backend/linalg_kernels.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

using linalg_detail::mT;
using linalg_detail::narrow_view;

// A = Q R for A [..., m, n], m >= n, packed [..., m + n, n]: Q's rows, then R's. See Note
// [Packed outputs] in linalg_spectral.cpp.
struct Qr {
  static constexpr const char* name = "qr";
  auto fields() { return std::tie(m, n); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  int64_t m = 0, n = 0;
  Tensor forward(const Tensor& a) const {
    kernels::Qr r = kernels::qr(a, name);
    Shape shape = linalg_detail::batch_of(a);
    shape.push_back(m + n);
    shape.push_back(n);
    Tensor packed = make_empty(shape, a.dtype(), a.device());
    kernels::copy_into(narrow_view(packed, -2, 0, m), r.q);
    kernels::copy_into(narrow_view(packed, -2, m, n), r.r);
    return packed;
  }
  Tensor q(const Tensor& p) const { return p.narrow(-2, 0, m); }
  Tensor r(const Tensor& p) const { return p.narrow(-2, m, n); }
  /// X R⁻¹ for the upper-triangular R: (R⁻ᵀ Xᵀ)ᵀ.
  static Tensor right_solve(const Tensor& x, const Tensor& r) {
    return mT(linalg::solve_triangular(mT(r), mT(x), /*upper=*/false));
  }
  // N = gR Rᵀ - Qᵀ gQ: gA = (gQ + Q (triu(N) + triu(N, 1)ᵀ)) R⁻ᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor qq = q(c.output()), rr = r(c.output()), gq = q(g);
    const Tensor nn = matmul(r(g), mT(rr)) - matmul(mT(qq), gq);
    const Tensor x = gq + matmul(qq, nn.triu() + mT(nn.triu(1)));
    return mT(linalg::solve_triangular(rr, mT(x), /*upper=*/true));
  }
  // C = dA R⁻¹, B = Qᵀ C, Ω = tril(B, -1) - tril(B, -1)ᵀ (= Qᵀ dQ):
  // dR = (B - Ω) R, dQ = C - Q (B - Ω)
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const Tensor qq = q(c.output()), rr = r(c.output());
    const Tensor cc = right_solve(ta, rr), b = matmul(mT(qq), cc);
    const Tensor b_minus_omega = b.triu() + mT(b.tril(-1));
    return cat({cc - matmul(qq, b_minus_omega), matmul(b_minus_omega, rr)}, -2);
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// Passes the triangular R [..., k, k] of A's QR through, and throws unless every |R[i, i]| is
// above max(m, n) eps max_j |R[j, j]| in its matrix: A has full rank k numerically. Rounding
// keeps an exactly dependent column's R[i, i] near eps rather than 0, so solve_triangular
// would not notice and the solution would be noise of size 1 / eps. An op, so that the check
// reads R in its forward, below the tracer: a compiled lstsq checks each call's values and
// raises eager's error. The solve reads its output, so dead-code elimination keeps it.
struct CheckFullRank {
  static constexpr const char* name = "lstsq";
  static constexpr const char* export_name = "lstsq_check_full_rank";
  auto fields() { return std::tie(a_shape); }
  static constexpr Save save = Save::None;
  Shape a_shape;  // A's (logical) shape, for the message and the tolerance
  Tensor forward(const Tensor& r) const {
    const int64_t k = r.size(-1);
    Tensor out = make_empty(r.shape(), r.dtype(), r.device());
    kernels::copy_into(out, r);
    if (k == 0 || r.numel() == 0) return out;
    // |R[i, i]| [..., k]: the diagonal is a view with stride stride(-2) + stride(-1).
    Shape shape = r.shape(), strides = r.strides();
    shape.resize(shape.size() - 1);
    strides[strides.size() - 2] += strides[strides.size() - 1];
    strides.resize(strides.size() - 1);
    const Tensor d = kernels::cast(
        kernels::unary(kernels::Unary::Abs, make_view(r, shape, strides, r.storage_offset())),
        DType::Float64);
    const std::vector<double> v = detail::host_values<double>(d, name);
    const double eps = dtype_eps(r.dtype());
    const int64_t m = a_shape[a_shape.size() - 2], n = a_shape.back();
    const double scale = static_cast<double>(std::max(m, n)) * eps;
    for (int64_t b = 0; b * k < d.numel(); ++b) {
      double top = 0;
      for (int64_t i = 0; i < k; ++i) top = std::max(top, v[b * k + i]);
      for (int64_t i = 0; i < k; ++i)
        // Written so that NaN and inf pass: such an A gives a NaN solution, not a rank error.
        ADJOINT_CHECK(!(v[b * k + i] <= scale * top) || !std::isfinite(top), Value, name,
                      "A is rank deficient: |R[", i, ", ", i, "]| = ", v[b * k + i],
                      " of its QR is at most ", scale * top,
                      " (max(m, n) eps max |R[j, j]|) in batch element ", b, "; A ",
                      detail::str(a_shape, " (", r.dtype(), ")"));
    }
    return out;
  }
  // The identity: gR = g, dR = dR.
  Tensor vjp(const Ctx&, const Tensor& g) const { return g; }
  Tensor jvp(const Ctx&, const Tensor& t) const { return t; }
  // Batching: the check runs over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

}  // namespace

namespace linalg {

QrResult qr(const Tensor& A) {
  linalg_detail::check_matrix(A, "qr");
  const int64_t m = A.size(-2), n = A.size(-1);
  if (m < n) {
    // A = [X | Y] with X square: Householder QR of A reflects by X's columns only, so
    // Q = qr(X).Q and R = [R_X | Qᵀ Y].
    QrResult left = qr(A.narrow(-1, 0, m));
    return {left.q, cat({left.r, matmul(mT(left.q), A.narrow(-1, m, n - m))}, -1)};
  }
  const Qr op{m, n};
  const Tensor packed = apply(op, A);
  return {op.q(packed), op.r(packed)};
}

Tensor lstsq(const Tensor& A, const Tensor& B) {
  const char* op = "lstsq";
  linalg_detail::check_matrix(A, op);
  ADJOINT_CHECK(B.defined() && B.dim() >= 1, Shape, op,
                "B must be a vector [m] or matrices [..., m, k], got ",
                B.defined() ? describe(B) : std::string("an undefined tensor"));
  linalg_detail::check_same_dtype(A, B, op);
  if (B.dim() == 1) return lstsq(A, B.unsqueeze(-1)).squeeze(-1);
  auto [a, b] = linalg_detail::broadcast_batch(A, B, op, /*a_dim=*/-2);
  const int64_t m = a.size(-2), n = a.size(-1);
  if (m >= n) {
    // min |A X - B|: A = Q R, X = R⁻¹ Qᵀ B.
    QrResult f = qr(a);
    const Tensor r = apply(CheckFullRank{a.shape()}, f.r);
    return solve_triangular(r, matmul(mT(f.q), b), /*upper=*/true);
  }
  // The minimum-norm solution of an underdetermined system: Aᵀ = Q R, X = Q R⁻ᵀ B.
  QrResult f = qr(mT(a));
  const Tensor r = apply(CheckFullRank{a.shape()}, f.r);
  return matmul(f.q, solve_triangular(mT(r), b, /*upper=*/false));
}

}  // namespace linalg
}  // namespace adjoint

ADJOINT_OPS_FILE(linalg_qr)
