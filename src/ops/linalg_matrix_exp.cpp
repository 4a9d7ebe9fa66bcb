// matrix_exp: one op. Its forward is scaling and squaring with the degree-13 Padé approximant
// (Higham, "The scaling and squaring method for the matrix exponential revisited", 2005),
// computed with kernels, so that the number of squarings, which depends on the data, is chosen
// below the tracer (a compiled function replays the choice for new values). Its rules are the
// Fréchet derivative through the block-triangular identity, written with matrix_exp itself, so
// derivatives of every order work.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/linalg_util.h"

#include "backend/host_transfer.h"
#include "backend/kernels.h"
#include "backend/linalg_kernels.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

using linalg_detail::mT;

// Higham's θ13: for ‖A‖₁ <= θ13 the [13/13] Padé approximant is exact to double precision
// (so also to single).
constexpr double kTheta13 = 5.371920351148152;
constexpr double kPade13[] = {64764752532480000.0,
                              32382376266240000.0,
                              7771770303897600.0,
                              1187353796428800.0,
                              129060195264000.0,
                              10559470521600.0,
                              670442572800.0,
                              33522128640.0,
                              1323241920.0,
                              40840800.0,
                              960960.0,
                              16380.0,
                              182.0,
                              1.0};

/// The number of squarings s with ‖A‖₁ / 2^s <= θ13 of each matrix of a [..., n, n] (0 for a
/// non-finite norm: NaN and inf propagate unscaled), in the batch's row-major order. Each
/// matrix gets its own s (the composite this op replaced used the batch's largest for all),
/// so a vmapped call equals the loop over its examples.
std::vector<int> squarings(const Tensor& a) {
  using kernels::Reduce;
  const Tensor col_sums =
      kernels::reduce(Reduce::Sum, kernels::unary(kernels::Unary::Abs, a), {-2}, /*keepdim=*/false);
  const Tensor norms = kernels::cast(
      kernels::reduce(Reduce::Max, col_sums, {-1}, /*keepdim=*/false), DType::Float64);
  const std::vector<double> p = detail::host_values<double>(norms, "matrix_exp");
  std::vector<int> s(p.size(), 0);
  for (std::size_t i = 0; i < s.size(); ++i)
    // Bounded by float64's exponent range: a finite norm needs at most about 1030.
    if (std::isfinite(p[i]) && p[i] > kTheta13)
      s[i] = static_cast<int>(std::ceil(std::log2(p[i] / kTheta13)));
  return s;
}

/// A float64 tensor [..., 1, 1] (a's batch) holding f(i) for the batch's matrix i, cast to dtype.
template <class F>
Tensor per_matrix(const Tensor& a, DType dtype, F f) {
  Shape shape = linalg_detail::batch_of(a);
  shape.push_back(1);
  shape.push_back(1);
  Tensor t = make_empty(shape, DType::Float64, a.device());
  std::vector<double> p(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = f(i);
  detail::write_host_values<double>(t, p, "matrix_exp");
  return dtype == DType::Float64 ? t : kernels::cast(t, dtype);
}

/// exp(A) for A [..., n, n] (kernel-level; n > 0 and a batch that is not empty).
Tensor scaled_pade_exp(const Tensor& a0, const char* op) {
  using kernels::Binary;
  using kernels::Unary;
  const int64_t n = a0.size(-1);
  const std::vector<int> s = squarings(a0);
  const int most = *std::max_element(s.begin(), s.end());
  // A / 2^s, exactly (a power of two), matrix by matrix.
  const Tensor a =
      most == 0 ? a0
                : kernels::binary(Binary::Mul, a0, per_matrix(a0, a0.dtype(), [&](std::size_t i) {
                                    return std::ldexp(1.0, -s[i]);
                                  }));
  Tensor id = make_empty({n, n}, a.dtype(), a.device());
  kernels::fill(id, 0);
  kernels::fill(make_view(id, {n}, {n + 1}, 0), 1);
  const double* b = kPade13;
  auto mm = [](const Tensor& x, const Tensor& y) { return kernels::matmul(x, y); };
  auto add = [](const Tensor& x, const Tensor& y) { return kernels::binary(Binary::Add, x, y); };
  auto scaled = [](const Tensor& x, double c) { return kernels::unary(Unary::MulScalar, x, c); };
  const Tensor a2 = mm(a, a), a4 = mm(a2, a2), a6 = mm(a4, a2);
  // r13(A) = (V - U)⁻¹ (V + U), U odd in A and V even.
  const Tensor u_even =
      add(add(add(add(mm(a6, add(add(scaled(a6, b[13]), scaled(a4, b[11])), scaled(a2, b[9]))),
                      scaled(a6, b[7])),
                  scaled(a4, b[5])),
              scaled(a2, b[3])),
          scaled(id, b[1]));
  const Tensor u = mm(a, u_even);
  const Tensor v =
      add(add(add(add(mm(a6, add(add(scaled(a6, b[12]), scaled(a4, b[10])), scaled(a2, b[8]))),
                      scaled(a6, b[6])),
                  scaled(a4, b[4])),
              scaled(a2, b[2])),
          scaled(id, b[0]));
  Tensor r = kernels::lu_solve(kernels::binary(Binary::Sub, v, u), add(v, u), op);
  for (int k = 0; k < most; ++k) {
    const Tensor squared = mm(r, r);
    const bool all = std::all_of(s.begin(), s.end(), [&](int si) { return si > k; });
    // Matrices that need fewer squarings keep their result.
    r = all ? squared
            : kernels::where(
                  kernels::unary(
                      Unary::GtScalar,
                      per_matrix(a0, DType::Float64, [&](std::size_t i) { return s[i]; }), k),
                  squared, r);
  }
  return r;
}

/// The n x n top-right block of exp([[X, Y], [0, X]]) for X, Y [..., n, n]: the Fréchet
/// derivative L(X, Y) of exp at X in the direction Y (Mathias 1996; Higham, "Functions of
/// Matrices", Theorem 3.6).
Tensor frechet(const Tensor& x, const Tensor& y) {
  const int64_t n = x.size(-1);
  const Tensor block = cat({cat({x, y}, -1), cat({zeros_like(x), x}, -1)}, -2);
  return linalg::matrix_exp(block).narrow(-2, 0, n).narrow(-1, n, n);
}

struct MatrixExp {
  static constexpr const char* name = "matrix_exp";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const {
    if (a.numel() == 0) return make_empty(a.shape(), a.dtype(), a.device());
    return scaled_pade_exp(a, name);
  }
  // d exp(A) = L(A, dA); its adjoint is L(Aᵀ, ·): gA = L(Aᵀ, gY)
  Tensor vjp(const Ctx& c, const Tensor& g) const { return frechet(mT(c.input(0)), g); }
  Tensor jvp(const Ctx& c, const Tensor& ta) const { return frechet(c.input(0), ta); }
  // Batching: the forward batches over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

}  // namespace

namespace linalg {

Tensor matrix_exp(const Tensor& A) {
  linalg_detail::check_square(A, "matrix_exp");
  return apply(MatrixExp{}, A);
}

}  // namespace linalg
}  // namespace adjoint

ADJOINT_OPS_FILE(linalg_matrix_exp)
