// Second-order transforms built from the first-order ones: the Hessian as jacfwd of grad,
// and Hessian-vector products forward over reverse (jvp of grad) or reverse over reverse
// (grad of <grad, v>).
#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "autograd/transform_support.h"
#include "transforms/common.h"

namespace adjoint::detail {
namespace {

std::vector<int> every_argument(std::size_t n) {
  std::vector<int> all;
  for (std::size_t i = 0; i < n; ++i) all.push_back(static_cast<int>(i));
  return all;
}

// grad of <grad f(x), v> with respect to x: two backward passes, the first recorded.
std::vector<Tensor> hvp_reverse_over_reverse(const ListFn& f, const std::vector<Tensor>& primals,
                                             const std::vector<Tensor>& tangents) {
  const char* op = "hvp";
  const uint64_t first_seq = next_sequence_nr();
  const bool recording = is_grad_enabled();
  std::vector<Tensor> xs;
  std::vector<Tensor> outputs;
  {
    EnableGradGuard enable;
    for (const Tensor& x : primals) xs.push_back(fresh_input(x));
    outputs = f(xs);
    check_scalar_output(outputs, op);
  }
  const bool outer = recording && graph_reaches_outside(outputs, xs, first_seq);
  std::vector<Tensor> hv(primals.size());
  if (outputs[0].requires_grad()) {
    EnableGradGuard enable;
    std::vector<Tensor> g = autograd::grad(outputs, xs, {}, true, true, true);
    Tensor s;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (!g[i].defined() || !g[i].requires_grad()) continue;
      Tensor term = (g[i] * tangents[i]).sum();
      s = s.defined() ? s + term : term;
    }
    // The direction v counts as well: an outer transform may differentiate H v with respect
    // to it (jacrev of hvp gives H).
    const bool record = outer || (recording && graph_reaches_outside({s}, xs, first_seq));
    if (s.defined()) hv = autograd::grad({s}, xs, {}, record, record, true);
  }
  for (std::size_t i = 0; i < hv.size(); ++i)
    if (!hv[i].defined()) hv[i] = zeros_like(primals[i]);
  return hv;
}

}  // namespace

Jacobian hessian_lists(const ListFn& f, const std::vector<Tensor>& primals,
                       const std::vector<int>& argnums) {
  const ListFn gradient = [&](const std::vector<Tensor>& xs) {
    return value_and_grad_lists(f, xs, argnums, Unused::Zero, "hessian").grads;
  };
  return jacfwd_lists(gradient, primals, argnums);
}

std::vector<Tensor> hvp_lists(const ListFn& f, const std::vector<Tensor>& primals,
                              const std::vector<Tensor>& tangents, HvpMode mode) {
  const char* op = "hvp";
  for (std::size_t i = 0; i < primals.size(); ++i) check_differentiable(primals[i], i, op);
  check_matching(tangents, primals, "tangent", "primal", op);
  if (mode == HvpMode::ReverseOverReverse) return hvp_reverse_over_reverse(f, primals, tangents);
  const std::vector<int> all = every_argument(primals.size());
  const ListFn gradient = [&](const std::vector<Tensor>& xs) {
    return value_and_grad_lists(f, xs, all, Unused::Zero, op).grads;
  };
  return jvp_lists(gradient, primals, tangents, op).second;
}

}  // namespace adjoint::detail
