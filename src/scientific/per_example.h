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

#include "adjoint/ops.h"
#include "vmap/batched.h"

namespace adjoint::detail {

/// The 2-norm of every example of a, as a 0-d tensor.
inline Tensor norm_of(const Tensor& a) { return sqrt((a * a).sum()); }

/// Whether the boolean 0-d `cond` holds for every example.
inline bool for_all(const Tensor& cond) {
  return logical_not(all_examples(cond)).sum().item<int64_t>() == 0;
}

/// The largest value over the examples (for messages).
inline double worst(const Tensor& v) { return all_examples(v).max().item<double>(); }

/// v where it is nonzero, else 1: a safe divisor for the examples the mask then ignores.
inline Tensor or_one(const Tensor& v) { return where(ne(v, 0.0), v, 1.0); }

}  // namespace adjoint::detail
