// The differentiable collectives (custom functions over the process group). Their VJP and
// JVP rules call the differentiable collectives again, so create_graph and forward over
// reverse work through them. See Note [Collectives are linear maps].
#include "adjoint/distributed/functional.h"

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "distributed/call_tag.h"

namespace adjoint::dist {

// Note [Collectives are linear maps]
// Stack every rank's input into one global vector X = (x_0, ..., x_{N-1}) and the outputs
// likewise; the global loss is L = sum_r L_r(y_r). Each collective is then a linear map
// Y = A X and its VJP is A^T. all_reduce(sum): A = ones(N, N) (x) I, symmetric, so the VJP is
// all_reduce(sum) again. all_gather: y_r = [x_0; ...; x_{N-1}], whose transpose sums the
// ranks' cotangents block by block and hands block r to rank r: reduce_scatter(sum). And
// reduce_scatter(sum)^T = all_gather. The JVP of a linear map is the map itself applied to the
// tangents. max is linear once the winners are fixed: y = sum_r w_r x_r with w_r = [x_r is
// the max] / #ties, constant almost everywhere (amax's convention).

namespace {

ProcessGroup& group_or_default(ProcessGroup* g) { return g ? *g : default_group(); }

// See Note [Tagging a differentiable call] (call_check.cpp).
detail::CallTag tag_for(const FunctionCtx& ctx) {
  return ctx.needs_input_grad(0) ? detail::kRecorded : detail::kNotRecorded;
}

// The collective's forward on a private contiguous copy (the in-place ones would otherwise
// write into the caller's x).
Tensor private_copy(const Tensor& x) {
  Tensor y = x.contiguous();
  return y.is_same(x) ? x.clone() : y;
}

struct AllReduceFn : Function<AllReduceFn> {
  static std::string name() { return "dist.all_reduce"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, ReduceOp op, ProcessGroup* g) {
    ctx.saved_data["op"] = op;
    ctx.saved_data["group"] = g;
    Tensor y = private_copy(x);
    {
      detail::ScopedCallTag tag(tag_for(ctx));
      g->all_reduce(y, op);
    }
    if (op == ReduceOp::Max && is_floating(x.dtype())) {
      // w = [x == max] / (number of ranks holding it); see the Note.
      Tensor hit = x.eq(y).to(x.dtype());
      Tensor count = hit.clone();
      g->all_reduce(count, ReduceOp::Sum);
      ctx.save_for_backward({hit / count});
    }
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto op = std::any_cast<ReduceOp>(ctx.saved_data["op"]);
    auto* group = std::any_cast<ProcessGroup*>(ctx.saved_data["group"]);
    if (op == ReduceOp::Max) return {ctx.get_saved()[0] * all_reduce(g[0], ReduceOp::Sum, group)};
    return {all_reduce(g[0], op, group)};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    auto op = std::any_cast<ReduceOp>(ctx.saved_data["op"]);
    auto* group = std::any_cast<ProcessGroup*>(ctx.saved_data["group"]);
    if (op == ReduceOp::Max) return {all_reduce(ctx.get_saved()[0] * t[0], ReduceOp::Sum, group)};
    return {all_reduce(t[0], op, group)};
  }
};

struct AllGatherFn : Function<AllGatherFn> {
  static std::string name() { return "dist.all_gather"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, ProcessGroup* g) {
    ctx.saved_data["group"] = g;
    ctx.saved_data["shape"] = x.shape();
    detail::ScopedCallTag tag(tag_for(ctx));
    return g->all_gather(x);
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto* group = std::any_cast<ProcessGroup*>(ctx.saved_data["group"]);
    const auto& shape = std::any_cast<const Shape&>(ctx.saved_data["shape"]);
    return {reduce_scatter(g[0], ReduceOp::Sum, group).reshape(shape)};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    return {all_gather(t[0], std::any_cast<ProcessGroup*>(ctx.saved_data["group"]))};
  }
};

struct ReduceScatterFn : Function<ReduceScatterFn> {
  static std::string name() { return "dist.reduce_scatter"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, ReduceOp op, ProcessGroup* g) {
    ctx.saved_data["op"] = op;
    ctx.saved_data["group"] = g;
    detail::ScopedCallTag tag(tag_for(ctx));
    return g->reduce_scatter(x, op);
  }
  static ReduceOp linear_op(FunctionCtx& ctx) {
    auto op = std::any_cast<ReduceOp>(ctx.saved_data["op"]);
    ADJOINT_CHECK(op != ReduceOp::Max, NotImplemented, "dist.reduce_scatter",
                  "derivatives of reduce_scatter(max) are not implemented; use all_reduce(max) "
                  "and narrow the result");
    return op;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto op = linear_op(ctx);
    auto* group = std::any_cast<ProcessGroup*>(ctx.saved_data["group"]);
    Tensor gx = all_gather(g[0], group);
    if (op == ReduceOp::Average) gx = gx / static_cast<double>(group->world_size());
    return {gx};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    auto op = linear_op(ctx);
    return {reduce_scatter(t[0], op, std::any_cast<ProcessGroup*>(ctx.saved_data["group"]))};
  }
};

struct BroadcastFn : Function<BroadcastFn> {
  static std::string name() { return "dist.broadcast"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int root, ProcessGroup* g) {
    ctx.saved_data["root"] = root;
    ctx.saved_data["group"] = g;
    Tensor y = private_copy(x);
    detail::ScopedCallTag tag(tag_for(ctx));
    g->broadcast(y, root);
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    const int root = std::any_cast<int>(ctx.saved_data["root"]);
    auto* group = std::any_cast<ProcessGroup*>(ctx.saved_data["group"]);
    // Every rank joins the sum (a reduce to root would do; MPI's all-reduce is as cheap at
    // these sizes and keeps the backend interface small).
    Tensor total = all_reduce(g[0], ReduceOp::Sum, group);
    return {group->rank() == root ? total : zeros_like(total)};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    return {broadcast(t[0], std::any_cast<int>(ctx.saved_data["root"]),
                      std::any_cast<ProcessGroup*>(ctx.saved_data["group"]))};
  }
};

}  // namespace

Tensor all_reduce(const Tensor& x, ReduceOp op, ProcessGroup* group) {
  return AllReduceFn::apply(x, op, &group_or_default(group));
}

Tensor all_gather(const Tensor& x, ProcessGroup* group) {
  return AllGatherFn::apply(x, &group_or_default(group));
}

Tensor reduce_scatter(const Tensor& x, ReduceOp op, ProcessGroup* group) {
  return ReduceScatterFn::apply(x, op, &group_or_default(group));
}

Tensor broadcast(const Tensor& x, int root, ProcessGroup* group) {
  return BroadcastFn::apply(x, root, &group_or_default(group));
}

}  // namespace adjoint::dist
