// clip_grad_norm_ and clip_grad_value_: torch.nn.utils' gradient clipping over a parameter
// list, in place on .grad, without recording a graph.
#include "adjoint/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "core/tensor_factory.h"

namespace adjoint::optim {
namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ADJOINT_CHECK(params[i].defined(), Value, op, "parameter ", i, " is an undefined tensor");
    if (Tensor g = params[i].grad(); g.defined()) out.push_back(g);
  }
  return out;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  constexpr const char* kOp = "optim.clip_grad_norm_";
  ADJOINT_CHECK(norm_type > 0, Value, kOp, "norm_type must be > 0 (or INFINITY): got ", norm_type);
  ADJOINT_CHECK(max_norm >= 0, Value, kOp, "max_norm must be >= 0: got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads = defined_grads(params, kOp);
  if (grads.empty()) return 0;

  // The norm of the per-tensor norms is the norm of all elements together.
  const bool inf = std::isinf(norm_type);
  double total = 0;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    const double n = norm(g, norm_type).item<double>();
    if (inf) {
      total = (std::isnan(n) || std::isnan(total)) ? NAN : std::max(total, n);
    } else {
      total += std::pow(n, norm_type);
    }
  }
  if (!inf) total = std::pow(total, 1.0 / norm_type);
  ADJOINT_CHECK(
      !error_if_nonfinite || std::isfinite(total), Value, kOp, "the total norm of order ",
      norm_type, " of the gradients is ", total,
      ", so they cannot be clipped; pass error_if_nonfinite = false to scale them anyway");

  // PyTorch multiplies by min(coef, 1); a NaN coef (NaN norm) propagates, as there.
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1) return total;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    // An expanded gradient (possible through set_grad) would be scaled several times over.
    if (has_internal_overlap(g)) {
      params[i].set_grad(g * coef);
    } else {
      g.mul_(coef);
    }
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  constexpr const char* kOp = "optim.clip_grad_value_";
  ADJOINT_CHECK(clip_value >= 0, Value, kOp, "clip_value must be >= 0: got ", clip_value);
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ADJOINT_CHECK(params[i].defined(), Value, kOp, "parameter ", i, " is an undefined tensor");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (has_internal_overlap(g)) {
      params[i].set_grad(clamp(g, -clip_value, clip_value));
    } else {
      g.clamp_(-clip_value, clip_value);
    }
  }
}

}  // namespace adjoint::optim
