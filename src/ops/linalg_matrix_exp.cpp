// matrix_exp by scaling and squaring with the degree-13 Padé approximant (Higham, "The
// scaling and squaring method for the matrix exponential revisited", 2005), written with
// matmul and solve, so it has no rules of its own: its derivatives are those of the
// approximant, which match the exponential's Fréchet derivative to the same accuracy
// (Al-Mohy and Higham 2009 differentiate it the same way).
#include <cmath>

#include "ops/linalg_util.h"

namespace adjoint {
namespace {

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

/// The number of squarings s with ‖A‖₁ / 2^s <= θ13 for every matrix of the batch (one s for
/// all: more squarings than a matrix needs cost time, not accuracy). Read off the data with
/// no history: s is piecewise constant in A.
int squarings(const Tensor& a) {
  if (a.numel() == 0) return 0;
  // Under vmap, every example's matrices (the same s for the whole batch).
  const Tensor col_sums =
      detail::all_examples(a.detach()).abs().sum({-2}).amax({-1}).to(DType::Float64);
  int s = 0;
  for (double norm : col_sums.to_vector<double>()) {
    if (!std::isfinite(norm) || norm <= kTheta13) continue;
    // Bounded by float64's exponent range: a finite norm needs at most about 1030.
    s = std::max(s, static_cast<int>(std::ceil(std::log2(norm / kTheta13))));
  }
  return s;
}

}  // namespace

namespace linalg {

Tensor matrix_exp(const Tensor& A) {
  linalg_detail::check_square(A, "matrix_exp");
  const int s = squarings(A);
  const Tensor a = s > 0 ? A * std::ldexp(1.0, -s) : A;
  const Tensor id = linalg_detail::eye_like(A, A.size(-1));
  const double* b = kPade13;
  const Tensor a2 = matmul(a, a), a4 = matmul(a2, a2), a6 = matmul(a4, a2);
  // r13(A) = (V - U)⁻¹ (V + U), U odd in A and V even.
  const Tensor u = matmul(a, matmul(a6, a6 * b[13] + a4 * b[11] + a2 * b[9]) + a6 * b[7] +
                                 a4 * b[5] + a2 * b[3] + id * b[1]);
  const Tensor v = matmul(a6, a6 * b[12] + a4 * b[10] + a2 * b[8]) + a6 * b[6] + a4 * b[4] +
                   a2 * b[2] + id * b[0];
  Tensor r = solve(v - u, v + u);
  for (int i = 0; i < s; ++i) r = matmul(r, r);
  return r;
}

}  // namespace linalg
}  // namespace adjoint
