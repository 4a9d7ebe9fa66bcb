// Norms and stopping tests of the iterative solvers, one value per example.
//
// Note [Solvers under vmap]
// cg, gmres, root and fixed_point run once for a whole vmap batch, as every other function
// does: the operator they are given may capture batched tensors (a matrix per example), so
// they cannot loop over examples. Their scalars (a norm, CG's step length, GMRES's rotations)
// are therefore 0-d tensors, one value per example under vmap and a plain 0-d tensor outside
// it. A stopping test reads every example at once (detail::all_examples) and holds when it
// holds for all of them; an example that has converged stops moving (its step is masked to
// zero) while the others go on, so each example's result is the one it would get alone, up
// to the extra rounding of iterations that leave it in place.
#pragma once

#include <cmath>

#include "adjoint/ops.h"
#include "vmap/batched.h"

namespace adjoint::detail {

/// Whether the 0-d `v` is finite, per example: |v| < inf fails for NaN and for ±inf alike.
inline Tensor finite(const Tensor& v) { return lt(abs(v), INFINITY); }

/// Whether every element of each example of a is finite: a·0 is 0 for a finite element and
/// NaN for inf or NaN, so the sum is 0 exactly when all are finite (and cannot overflow).
inline Tensor all_finite(const Tensor& a) { return finite((a * 0.0).sum()); }

// Note [Overflow-safe norms]
// sqrt(sum(a²)) overflows once |a| passes 1e154 in float64 (1e19 in float32) and underflows
// below 1e-154, and an inf norm compared with an inf tolerance reads as converged. Scaling by
// the largest magnitude first, as LAPACK's nrm2 does, keeps every square in [0, 1]: the norm
// is then finite whenever the elements are (and not too many sit near the largest double), inf
// when one is inf, and NaN when one is NaN (amax propagates NaN). (The library's norm op
// scales float64 the same way since session 22; this one is written with ops the solvers'
// traced and batched iterations see, and scales float32 in float32.)

/// The 2-norm of every example of a, as a 0-d tensor, without overflow or underflow.
inline Tensor norm_of(const Tensor& a) {
  if (a.numel() == 0) return (a * a).sum();
  const Tensor m = amax(abs(a));
  const Tensor scale = where(logical_and(gt(m, 0.0), finite(m)), m, 1.0);
  const Tensor scaled = a / scale;
  return where(eq(m, INFINITY), m, sqrt((scaled * scaled).sum()) * scale);
}

/// sqrt(a² + b²) for 0-d a and b, scaled like norm_of (a Givens rotation's length).
inline Tensor hypot_of(const Tensor& a, const Tensor& b) {
  const Tensor m = maximum(abs(a), abs(b));
  const Tensor scale = where(logical_and(gt(m, 0.0), finite(m)), m, 1.0);
  const Tensor sa = a / scale, sb = b / scale;
  return where(eq(m, INFINITY), m, sqrt(sa * sa + sb * sb) * scale);
}

/// Whether the boolean 0-d `cond` holds for every example.
inline bool for_all(const Tensor& cond) {
  return logical_not(all_examples(cond)).sum().item<int64_t>() == 0;
}

/// The largest value over the examples (for messages).
inline double worst(const Tensor& v) { return all_examples(v).max().item<double>(); }

/// v where it is nonzero, else 1: a safe divisor for the examples the mask then ignores.
inline Tensor or_one(const Tensor& v) { return where(ne(v, 0.0), v, 1.0); }

}  // namespace adjoint::detail
