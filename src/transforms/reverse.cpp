// Reverse-mode transforms: value_and_grad (and so grad), vjp and jacrev. Each traces f on
// fresh inputs of its own and asks the engine for gradients at exactly those inputs.
//
// Note [When a transform records its backward]
// A gradient is itself differentiable only if its backward pass is recorded (create_graph).
// That is needed exactly when something outside the transform may differentiate it: an outer
// transform differentiating the primals, or tensors f closes over that require grad (model
// parameters, an outer transform's inputs). Both show up in f's graph as nodes made before the
// transform started, or leaves other than the transform's own inputs; graph_reaches_outside
// finds them. The leaves an inner transform made for its own inputs (from primals that do not
// require grad: grad(y -> x y)(c) inside a grad over x) are not from outside: each carries the
// sequence number taken when it was made, later than the outer transform's start. Counting
// them as outside made the outer gradient keep its graph at the top level. Otherwise backward
// runs unrecorded and frees the graph as it goes, so a plain grad costs what loss.backward()
// costs.
#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/vmap.h"
#include "autograd/transform_support.h"
#include "transforms/common.h"

namespace adjoint::detail {
namespace {

struct Traced {
  std::vector<Tensor> own;      // the fresh inputs, one per argnum
  std::vector<Tensor> outputs;  // what f returned
  bool create_graph = false;    // see Note [When a transform records its backward]
};

Traced trace(const ListFn& f, const std::vector<Tensor>& primals, const std::vector<int>& argnums,
             const char* op) {
  for (int a : argnums) check_differentiable(primals[a], a, op);
  Traced t;
  const uint64_t first_seq = next_sequence_nr();
  const bool recording = is_grad_enabled();
  std::vector<Tensor> xs = primals;
  {
    EnableGradGuard enable;
    for (int a : argnums) {
      xs[a] = fresh_input(primals[a]);
      t.own.push_back(xs[a]);
    }
    t.outputs = f(xs);
  }
  // The outputs' tangents count too: under jvp of grad, a tangent that an outer transform
  // differentiates (it requires grad) makes the gradient's tangent depend on it.
  std::vector<Tensor> reach = t.outputs;
  for (const Tensor& y : t.outputs)
    if (y.defined() && y.tangent().defined()) reach.push_back(y.tangent());
  t.create_graph = recording && graph_reaches_outside(reach, t.own, first_seq);
  return t;
}

// Outputs as the caller sees them: still on the outer graph when one is recorded, else plain
// tensors (with their tangents, for forward-over-reverse).
std::vector<Tensor> visible_outputs(const Traced& t) {
  if (t.create_graph) return t.outputs;
  std::vector<Tensor> out;
  for (const Tensor& y : t.outputs) out.push_back(y.defined() ? detach_keep_tangents(y) : y);
  return out;
}

// Gradients of `outputs` (seeded by `seeds`) at the transform's own inputs; an undefined
// entry where an input is unused.
std::vector<Tensor> gradients(const Traced& t, const std::vector<Tensor>& outputs,
                              const std::vector<Tensor>& seeds, bool retain) {
  std::vector<Tensor> ys, gs;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].requires_grad()) continue;
    ys.push_back(outputs[i]);
    gs.push_back(seeds[i]);
  }
  if (ys.empty()) return std::vector<Tensor>(t.own.size());
  // A cotangent an outer transform differentiates (a pullback inside grad) needs the backward
  // recorded as well.
  bool create = t.create_graph;
  for (const Tensor& g : gs) create = create || (g.defined() && g.requires_grad());
  return autograd::grad(ys, t.own, gs, retain || create, create, /*allow_unused=*/true);
}

Tensor zero_or_throw(const Tensor& primal, int argnum, Unused unused, const char* op) {
  ADJOINT_CHECK(unused == Unused::Zero, Autograd, op, "argument ", argnum, " (", describe(primal),
                ") does not influence the output; its derivative is zero (pass Unused::Zero "
                "to get zeros instead of this error)");
  return zeros_like(primal);
}

}  // namespace

ValueAndGrads value_and_grad_lists(const ListFn& f, const std::vector<Tensor>& primals,
                                   const std::vector<int>& argnums, Unused unused, const char* op) {
  Traced t = trace(f, primals, argnums, op);
  check_scalar_output(t.outputs, op);
  const Tensor seed = ones_like(t.outputs[0]);
  std::vector<Tensor> g = gradients(t, t.outputs, {seed}, false);
  for (std::size_t k = 0; k < g.size(); ++k)
    if (!g[k].defined()) g[k] = zero_or_throw(primals[argnums[k]], argnums[k], unused, op);
  return {visible_outputs(t)[0], std::move(g)};
}

VjpLists vjp_lists(const ListFn& f, const std::vector<Tensor>& primals, const char* op) {
  std::vector<int> all;
  for (std::size_t i = 0; i < primals.size(); ++i) all.push_back(static_cast<int>(i));
  auto t = std::make_shared<Traced>(trace(f, primals, all, op));
  for (std::size_t i = 0; i < t->outputs.size(); ++i)
    ADJOINT_CHECK(t->outputs[i].defined(), Value, op, "output ", i, " is an undefined tensor");
  VjpLists r;
  r.outputs = visible_outputs(*t);
  std::string name = op;
  r.pullback = [t, name](const std::vector<Tensor>& cotangents) {
    check_matching(cotangents, t->outputs, "cotangent", "output", name.c_str());
    std::vector<Tensor> g = gradients(*t, t->outputs, cotangents, /*retain=*/true);
    for (std::size_t k = 0; k < g.size(); ++k)
      if (!g[k].defined()) g[k] = zeros_like(t->own[k]);
    return g;
  };
  return r;
}

namespace {

// jacrev with the rows of each output's Jacobian made by `rows_of(y, last, vjp)`: for each
// argument, the m rows [m, *argument shape], from vjp(cotangent, retain_graph), which gives
// one VJP per argument (zeros where unused). The graph is kept until the last output.
template <class RowsOf>
Jacobian jacrev_by(const ListFn& f, const std::vector<Tensor>& primals,
                   const std::vector<int>& argnums, Unused unused, RowsOf rows_of) {
  const char* op = "jacrev";
  Traced t = trace(f, primals, argnums, op);
  check_floating_outputs(t.outputs, op);
  std::vector<bool> used(argnums.size(), false);
  Jacobian jac(t.outputs.size());
  for (std::size_t o = 0; o < t.outputs.size(); ++o) {
    const Tensor& y = t.outputs[o];
    if (y.numel() == 0) {
      for (int a : argnums)
        jac[o].push_back(zeros(concat_shapes(y.shape(), primals[a].shape()), primals[a].dtype()));
      continue;
    }
    auto vjp = [&](const Tensor& cotangent, bool retain) {
      std::vector<Tensor> g = gradients(t, {y}, {cotangent}, retain);
      for (std::size_t a = 0; a < argnums.size(); ++a) {
        used[a] = used[a] || g[a].defined();
        if (!g[a].defined()) g[a] = zeros_like(primals[argnums[a]]);
      }
      return g;
    };
    const std::vector<Tensor> rows = rows_of(y, o + 1 == t.outputs.size(), vjp);
    for (std::size_t a = 0; a < argnums.size(); ++a)
      jac[o].push_back(rows[a].reshape(concat_shapes(y.shape(), primals[argnums[a]].shape())));
  }
  for (std::size_t a = 0; a < argnums.size(); ++a)
    if (!used[a] && unused == Unused::Error)
      zero_or_throw(primals[argnums[a]], argnums[a], unused, op);
  return jac;
}

}  // namespace

Jacobian jacrev_lists(const ListFn& f, const std::vector<Tensor>& primals,
                      const std::vector<int>& argnums, Unused unused) {
  // All rows at once: one backward with the one-hot cotangents (the identity's rows) as a
  // vmap batch.
  return jacrev_by(f, primals, argnums, unused, [](const Tensor& y, bool last, auto& vjp) {
    const int64_t m = y.numel();
    const Tensor basis =
        eye(m, std::nullopt, y.dtype()).reshape(concat_shapes(Shape{m}, y.shape()));
    return vmap_lists([&](const std::vector<Tensor>& e) { return vjp(e[0], !last); }, {basis}, {0},
                      {0}, VmapOptions{});
  });
}

Jacobian jacrev_loop_lists(const ListFn& f, const std::vector<Tensor>& primals,
                           const std::vector<int>& argnums, Unused unused) {
  // Row r is the VJP with the one-hot cotangent e_r.
  return jacrev_by(f, primals, argnums, unused, [](const Tensor& y, bool last, auto& vjp) {
    const int64_t m = y.numel();
    std::vector<std::vector<Tensor>> per_arg;
    for (int64_t r = 0; r < m; ++r) {
      std::vector<Tensor> g = vjp(one_hot_like(y, r), !(last && r + 1 == m));
      per_arg.resize(g.size());
      for (std::size_t a = 0; a < g.size(); ++a) per_arg[a].push_back(g[a]);
    }
    std::vector<Tensor> rows;
    for (const auto& gs : per_arg) rows.push_back(stack(gs, 0));
    return rows;
  });
}

}  // namespace adjoint::detail
