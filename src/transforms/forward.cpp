// Forward-mode transforms: jvp and jacfwd. Each opens a dual level of its own, so they nest
// inside one another and inside reverse-mode transforms (Note [Nested dual levels]).
#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/vmap.h"
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
  // columns[a][o]: output o's tangents for the one-hot tangents of argument a, all columns at
  // once as a vmap batch (the rows of the identity), with the batch dim last.
  std::vector<std::vector<Tensor>> columns;
  for (int a : argnums) {
    const Tensor& x = primals[a];
    const int64_t n = x.numel();
    if (n == 0) {
      columns.emplace_back();
      continue;
    }
    const Tensor basis =
        eye(n, std::nullopt, x.dtype()).reshape(concat_shapes(Shape{n}, x.shape()));
    columns.push_back(vmap_lists(
        [&](const std::vector<Tensor>& e) {
          DualLevel level;
          std::vector<Tensor> xs = primals;
          xs[a] = make_dual(x, e[0]);
          std::vector<Tensor> ys = f(xs);
          check_floating_outputs(ys, op);
          std::vector<Tensor> ts;
          for (const Tensor& y : ys) ts.push_back(output_tangent(y));
          return ts;
        },
        {basis}, {0}, {-1}, VmapOptions{}));
  }
  // The outputs' shapes: from the columns, or (no argument has elements) from one call.
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  for (const auto& cols : columns) {
    if (cols.empty()) continue;
    for (const Tensor& c : cols) {
      Shape s = c.shape();
      s.erase(s.size() - 1);
      out_shapes.push_back(s);
      out_dtypes.push_back(c.dtype());
    }
    break;
  }
  if (out_shapes.empty()) {
    const std::vector<Tensor> ys = f(primals);
    check_floating_outputs(ys, op);
    for (const Tensor& y : ys) {
      out_shapes.push_back(y.shape());
      out_dtypes.push_back(y.dtype());
    }
  }
  Jacobian jac(out_shapes.size());
  for (std::size_t o = 0; o < out_shapes.size(); ++o) {
    for (std::size_t a = 0; a < argnums.size(); ++a) {
      const Shape shape = concat_shapes(out_shapes[o], primals[argnums[a]].shape());
      const auto& cols = columns[a];
      if (!cols.empty())
        ADJOINT_CHECK(cols.size() == out_shapes.size(), Value, op, "the function returned ",
                      cols.size(), " outputs, then ", out_shapes.size());
      jac[o].push_back(cols.empty() ? zeros(shape, out_dtypes[o]) : cols[o].reshape(shape));
    }
  }
  return jac;
}

Jacobian jacfwd_loop_lists(const ListFn& f, const std::vector<Tensor>& primals,
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
