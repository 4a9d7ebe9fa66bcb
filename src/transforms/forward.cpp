// Forward-mode transforms: jvp and jacfwd. Each opens a dual level of its own, so they nest
// inside one another and inside reverse-mode transforms (Note [Nested dual levels]).
#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "transforms/common.h"

namespace adjoint::detail {
namespace {

// The tangent f's output carries at the innermost level: zero when it does not depend on
// the dual inputs.
Tensor output_tangent(const Tensor& y) {
  Tensor t = y.tangent();
  return t.defined() ? t : zeros_like(y);
}

}  // namespace

std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp_lists(const ListFn& f,
                                                              const std::vector<Tensor>& primals,
                                                              const std::vector<Tensor>& tangents,
                                                              const char* op) {
  for (std::size_t i = 0; i < primals.size(); ++i) check_differentiable(primals[i], i, op);
  check_matching(tangents, primals, "tangent", "primal", op);
  DualLevel level;
  std::vector<Tensor> duals;
  for (std::size_t i = 0; i < primals.size(); ++i)
    duals.push_back(make_dual(primals[i], tangents[i]));
  std::vector<Tensor> outputs = f(duals);
  std::vector<Tensor> out_primals, out_tangents;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ADJOINT_CHECK(outputs[i].defined(), Value, op, "output ", i, " is an undefined tensor");
    auto [p, t] = unpack_dual(outputs[i]);
    out_tangents.push_back(t.defined() ? t : zeros_like(outputs[i]));
    out_primals.push_back(std::move(p));
  }
  return {std::move(out_primals), std::move(out_tangents)};
}

Jacobian jacfwd_lists(const ListFn& f, const std::vector<Tensor>& primals,
                      const std::vector<int>& argnums) {
  const char* op = "jacfwd";
  for (int a : argnums) check_differentiable(primals[a], a, op);
  // columns[o][a]: the JVPs of output o with one-hot tangents on argument a, one per element.
  std::vector<std::vector<std::vector<Tensor>>> columns;
  std::vector<Tensor> outputs;
  for (std::size_t a = 0; a < argnums.size(); ++a) {
    const Tensor& x = primals[argnums[a]];
    for (int64_t c = 0; c < x.numel(); ++c) {
      DualLevel level;
      std::vector<Tensor> xs = primals;
      xs[argnums[a]] = make_dual(x, one_hot_like(x, c));
      std::vector<Tensor> ys = f(xs);
      check_floating_outputs(ys, op);
      if (columns.empty())
        columns.resize(ys.size(), std::vector<std::vector<Tensor>>(argnums.size()));
      ADJOINT_CHECK(ys.size() == columns.size(), Value, op, "the function returned ", ys.size(),
                    " outputs, then ", columns.size());
      for (std::size_t o = 0; o < ys.size(); ++o) columns[o][a].push_back(output_tangent(ys[o]));
      if (outputs.empty()) {
        for (const Tensor& y : ys) outputs.push_back(unpack_dual(y).first);
      }
    }
  }
  // Arguments without elements give no columns; f still runs once for the output shapes.
  if (outputs.empty()) {
    outputs = f(primals);
    check_floating_outputs(outputs, op);
    columns.resize(outputs.size(), std::vector<std::vector<Tensor>>(argnums.size()));
  }
  Jacobian jac(outputs.size());
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& y = outputs[o];
    for (std::size_t a = 0; a < argnums.size(); ++a) {
      const Tensor& x = primals[argnums[a]];
      const Shape shape = concat_shapes(y.shape(), x.shape());
      const auto& cols = columns[o][a];
      jac[o].push_back(cols.empty() ? zeros(shape, y.dtype())
                                    : stack(cols, static_cast<int64_t>(y.dim())).reshape(shape));
    }
  }
  return jac;
}

}  // namespace adjoint::detail
