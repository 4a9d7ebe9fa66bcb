// Loss functions over class indices. cross_entropy is one fused op (a single pass over the
// logits forward, the fused cross_entropy_backward primitive as its VJP; all rules are written
// with ops, so it differentiates twice); nll_loss is one op too. Both are float32 under
// autocast, by their op's policy. mse_loss and binary_cross_entropy_with_logits are in
// elementwise_losses.cpp.
#include <limits>

#include "adjoint/error.h"
#include "backend/nn_kernels.h"
#include "core/op_fields.h"
#include "core/tensor_factory.h"
#include "ops/backward_ops.h"
#include "ops/common.h"

namespace adjoint {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// [N, C] bool: true at (i, target[i]) for rows whose target is not ignore_index.
Tensor target_mask(const Tensor& target, int64_t classes, int64_t ignore_index) {
  Tensor hit = eq(arange(classes, TensorOptions(DType::Int64).device(target.device())).unsqueeze(0),
                  target.unsqueeze(1));
  return logical_and(hit, ne(target, ignore_index).unsqueeze(1));
}

// cross_entropy_backward(g, x, t) = (p - one_hot(t)) g per row with p = softmax(x), 0 on
// ignored rows, in one kernel. Linear in g: d/dg_i = sum_c G_ic (p - one_hot)_ic;
// d/dx_i = softmax_backward(g_i G_i, p_i).
/// What cross_entropy() and cross_entropy_backward() hand their ops: floating logits [N, C] and
/// int64 targets [N] (an imported op is checked against them; the kernel checks the targets'
/// values).
void check_class_specs(const detail::ValueSpec& x, const detail::ValueSpec& t, const char* op) {
  ADJOINT_CHECK(x.shape.size() == 2 && is_floating(x.dtype), Shape, op,
                "expected floating logits [N, C], got ", describe(x));
  ADJOINT_CHECK(t.dtype == DType::Int64 && t.shape == Shape{x.shape[0]}, Shape, op,
                "expected int64 targets [", x.shape[0], "], got ", describe(t));
}

// The rows whose target is not ignore_index (1 when there are none: their gradients are 0), as
// a tensor computed from the target, for Mean's divisor in the rules.
Tensor rows_counted(const Tensor& target, int64_t ignore_index, DType dtype) {
  return clamp(sum(ne(target, ignore_index)).to(dtype), 1.0, std::nullopt);
}

// What cross_entropy() and nll_loss() hand their op (see check_class_specs) and what it gives.
detail::OutputSpec class_loss_spec(std::span<const detail::ValueSpec> in, Reduction reduction,
                                   const char* op) {
  const detail::ValueSpec &x = spec_of(in, 0, op), &t = spec_of(in, 1, op);
  check_class_specs(x, t, op);
  ADJOINT_CHECK(
      reduction == Reduction::None || reduction == Reduction::Mean || reduction == Reduction::Sum,
      Value, op, "unknown reduction ", static_cast<int>(reduction));
  return {reduction == Reduction::None ? Shape{x.shape[0]} : Shape{}, x.dtype};
}

// The batching rule of a loss over class indices: the per-row losses of all examples' rows at
// once (the examples' rows are rows of one problem), then each example reduces its own rows.
template <class Loss>
Tensor batched_class_loss(Reduction reduction, int64_t ignore_index, const BatchArgs& b) {
  const Tensor x = b.with_batch(0), t = b.with_batch(1);
  const int64_t examples = x.size(0), rows = x.size(1);
  Tensor per_row = apply(Loss{Reduction::None, ignore_index},
                         x.reshape({examples * rows, x.size(2)}), t.reshape({examples * rows}))
                       .reshape({examples, rows});
  if (reduction == Reduction::None) return per_row;
  Tensor total = sum(per_row, {1});
  if (reduction == Reduction::Sum) return total;
  // NaN for an example whose rows are all ignored, as unbatched, with the unbatched rule's
  // zero gradient (the mean divides by at least 1; where gives the NaN branch none).
  const Tensor count = sum(ne(t, ignore_index), {1}).to(per_row.dtype());
  return where(gt(count, 0.0), total / clamp(count, 1.0, std::nullopt), kNaN);
}

struct CrossEntropyBackward {
  static constexpr const char* name = "cross_entropy_backward";
  auto fields() { return std::tie(ignore_index); }
  static constexpr Save save = Save::Inputs;
  int64_t ignore_index;
  Tensor forward(const Tensor& g, const Tensor& x, const Tensor& t) const {
    return kernels::cross_entropy_backward(g, x, t, ignore_index);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec &g = spec_of(in, 0, name), &x = spec_of(in, 1, name),
                            &t = spec_of(in, 2, name);
    check_class_specs(x, t, name);
    ADJOINT_CHECK(g.shape == Shape{x.shape[0]} && g.dtype == x.dtype, Shape, name, "weights ",
                  describe(g), " are not one per row of the logits ", describe(x));
    return {x.shape, x.dtype};
  }
  // softmax(x), one_hot(t) and the [N, 1] mask of the rows that count
  struct Parts {
    Tensor p, onehot, keep;
  };
  Parts parts(const Ctx& c) const {
    const Tensor& x = c.input(1);
    const Tensor& t = c.input(2);
    return {softmax(x, 1),
            eq(arange(x.size(1), TensorOptions(DType::Int64).device(x.device())).unsqueeze(0),
               t.unsqueeze(1))
                .to(x.dtype()),
            ne(t, ignore_index).unsqueeze(1)};
  }
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gout) const {
    const Tensor& g = c.input(0);
    const Parts r = parts(c);
    Tensor gk = where(r.keep, gout, 0.0);
    std::array<Tensor, 3> out;
    if (c.needs_grad(0)) out[0] = sum(gk * (r.p - r.onehot), {1});
    if (c.needs_grad(1)) out[1] = softmax_backward(gk * g.unsqueeze(1), r.p, 1);
    return out;
  }
  Tensor jvp(const Ctx& c, const Tensor& t_g, const Tensor& t_x, const Tensor&) const {
    const Tensor& g = c.input(0);
    const Parts r = parts(c);
    return where(
        r.keep,
        (r.p - r.onehot) * t_g.unsqueeze(1) + softmax_backward(t_x, r.p, 1) * g.unsqueeze(1), 0.0);
  }
  // Batching: the examples' rows are rows of one bigger problem.
  Tensor vmap(const BatchArgs& b) const {
    const Tensor x = b.with_batch(1);
    const int64_t rows = x.size(0) * x.size(1), classes = x.size(2);
    const Tensor t = b.with_batch(2).reshape({rows});
    kernels::check_class_targets(t, classes, ignore_index, name);
    Tensor r = apply(*this, b.with_batch(0).reshape({rows}), x.reshape({rows, classes}), t);
    return r.reshape(x.shape());
  }
};

struct CrossEntropy {
  static constexpr const char* name = "cross_entropy";
  auto fields() { return std::tie(reduction, ignore_index); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Reduction reduction;
  int64_t ignore_index;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return class_loss_spec(in, reduction, name);
  }
  Tensor forward(const Tensor& logits, const Tensor& target) const {
    kernels::CrossEntropyForward r = kernels::cross_entropy(logits, target, ignore_index);
    if (reduction == Reduction::None) return r.loss;
    Tensor total = kernels::reduce(kernels::Reduce::Sum, r.loss, {}, false);
    if (reduction == Reduction::Sum) return total;
    // NaN (0 / 0) when every row is ignored, as PyTorch
    return kernels::unary(Unary::MulScalar, total,
                          r.valid > 0 ? 1.0 / static_cast<double>(r.valid) : kNaN);
  }

  // Mean's divisor, the rows not ignored (1 when there are none: their gradients are 0), as a
  // tensor computed from the target: the rules read nothing the forward set, so they are right
  // for whatever target a compiled replay gets, and per example under vmap, where the forward
  // that runs is the batching rule's.
  Tensor valid_rows(const Ctx& c, DType dtype) const {
    return rows_counted(c.input(1), ignore_index, dtype);
  }

  // d loss_i / d logits_i = softmax(logits_i) - one_hot(target_i); 0 on ignored rows
  Tensor dlogits(const Ctx& c) const {
    const Tensor& x = c.input(0);
    const Tensor& t = c.input(1);
    Tensor onehot =
        eq(arange(x.size(1), TensorOptions(DType::Int64).device(x.device())).unsqueeze(0),
           t.unsqueeze(1))
            .to(x.dtype());
    return where(ne(t, ignore_index).unsqueeze(1), softmax(x, 1) - onehot, 0.0);
  }

  // dlogits = (softmax - one_hot) * gy, with gy / (non-ignored rows) for Mean
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    Tensor g = reduction == Reduction::Mean ? gy / valid_rows(c, gy.dtype()) : gy;
    return {cross_entropy_backward(g, c.input(0), c.input(1), ignore_index), Tensor()};
  }

  // dloss_i = sum_c (softmax - one_hot)_ic t_ic, reduced as the loss is
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    Tensor per_row = sum(dlogits(c) * tx, {1});
    if (reduction == Reduction::None) return per_row;
    Tensor total = sum(per_row);
    return reduction == Reduction::Mean ? total / valid_rows(c, total.dtype()) : total;
  }
  // Batching: the per-row losses of all examples' rows at once, then each example reduces its
  // own rows (Mean divides by its own count of rows not ignored). The rule, not the public
  // function, makes that choice, so a trace replayed under vmap (vmap(compile(f))) makes it too.
  Tensor vmap(const BatchArgs& b) const {
    return batched_class_loss<CrossEntropy>(reduction, ignore_index, b);
  }
};

// loss_i = -log_probs[i, target_i], 0 on ignored rows. One op, so that autocast's float32
// policy is its own (Note [Elementwise losses are ops] in elementwise_losses.cpp).
struct NllLoss {
  static constexpr const char* name = "nll_loss";
  auto fields() { return std::tie(reduction, ignore_index); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Reduction reduction;
  int64_t ignore_index;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return class_loss_spec(in, reduction, name);
  }
  // Computed in float32 for 16-bit log-probabilities and rounded once; an ignored row reads
  // class 0 and is then replaced by 0 (not multiplied: its log-probability may be -inf).
  Tensor forward(const Tensor& log_probs, const Tensor& target) const {
    const DType math = opmath_dtype(log_probs.dtype());
    const Tensor x = log_probs.dtype() == math ? log_probs : kernels::cast(log_probs, math);
    const int64_t rows = target.numel();
    auto column = [rows](const Tensor& v) {  // [N] as [N, 1]
      return make_view(v, {rows, 1}, {v.strides()[0], 1}, v.impl()->offset);
    };
    const Tensor keep = kernels::unary(Unary::NeScalar, target, static_cast<double>(ignore_index));
    const Tensor counted = kernels::cast(keep, DType::Int64);
    const Tensor read = kernels::binary(kernels::Binary::Mul, target, counted);
    const Tensor picked =
        kernels::unary(Unary::Neg, kernels::gather(x, 1, column(read), name));  // [N, 1]
    Tensor zero = make_empty({rows, 1}, math, x.device());
    kernels::fill(zero, 0);
    Tensor per_row = kernels::where(column(keep), picked, zero);
    per_row = make_view(per_row, {rows}, {per_row.strides()[0]}, per_row.impl()->offset);
    Tensor loss = per_row;
    if (reduction != Reduction::None) {
      loss = kernels::reduce(kernels::Reduce::Sum, per_row, {}, false);
      if (reduction == Reduction::Mean)  // NaN (0 / 0) when every row is ignored, as PyTorch
        loss = kernels::binary(
            kernels::Binary::Div, loss,
            kernels::cast(kernels::reduce(kernels::Reduce::Sum, counted, {}, false), math));
    }
    return loss.dtype() == log_probs.dtype() ? loss : kernels::cast(loss, log_probs.dtype());
  }
  Tensor picked_of(const Ctx& c, const Tensor& values) const {  // where the loss reads
    return where(target_mask(c.input(1), c.input(0).size(1), ignore_index), values, 0.0);
  }
  // d loss_i / d log_probs[i, c] = -1 at c = target_i on rows that count, 0 elsewhere
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    if (!c.needs_grad(0)) return {};
    const Tensor w = reduction == Reduction::None ? gy.unsqueeze(1)
                     : reduction == Reduction::Mean
                         ? gy / rows_counted(c.input(1), ignore_index, gy.dtype())
                         : gy;
    return {picked_of(c, -w), Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    const Tensor per_row = -sum(picked_of(c, tx), {1});
    if (reduction == Reduction::None) return per_row;
    const Tensor total = sum(per_row);
    return reduction == Reduction::Mean
               ? total / rows_counted(c.input(1), ignore_index, total.dtype())
               : total;
  }
  // Batching: as CrossEntropy's rule.
  Tensor vmap(const BatchArgs& b) const {
    return batched_class_loss<NllLoss>(reduction, ignore_index, b);
  }
};

// Checks shared by cross_entropy and nll_loss: input [N, C] with target [N], or [C] with a
// 0-d target (returned as true, to be handled as one row).
bool check_class_inputs(const Tensor& input, const Tensor& target, const char* op) {
  ADJOINT_CHECK(input.defined() && target.defined(), Value, op, "got an undefined tensor");
  ADJOINT_CHECK(input.dim() == 1 || input.dim() == 2, Shape, op,
                "expected input of shape [N, C] or [C], got ", describe(input));
  ADJOINT_CHECK(target.dtype() == DType::Int64, DType, op,
                "expected int64 class indices as target, got ", describe(target));
  if (input.dim() == 1) {
    ADJOINT_CHECK(target.dim() == 0, Shape, op, "input ", describe(input),
                  " has no batch dim, so target must be 0-d, got ", describe(target));
    return true;
  }
  ADJOINT_CHECK(target.dim() == 1 && target.size(0) == input.size(0), Shape, op,
                "expected target of shape [", input.size(0), "] for input ", describe(input),
                ", got ", describe(target));
  return false;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  if (check_class_inputs(logits, target, "cross_entropy")) {
    Tensor r = cross_entropy(logits.unsqueeze(0), target.reshape({1}), reduction, ignore_index);
    return reduction == Reduction::None ? r.reshape({}) : r;
  }
  return apply(CrossEntropy{reduction, ignore_index}, to_floating(logits), target);
}

Tensor cross_entropy_backward(const Tensor& g_in, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  ADJOINT_CHECK(g_in.defined() && logits.defined() && target.defined(), Value, op,
                "got an undefined tensor");
  ADJOINT_CHECK(logits.dim() == 2 && is_floating(logits.dtype()), Shape, op,
                "expected floating logits [N, C], got ", describe(logits));
  ADJOINT_CHECK(
      target.dtype() == DType::Int64 && target.dim() == 1 && target.size(0) == logits.size(0),
      Shape, op, "expected int64 targets [", logits.size(0), "], got ", describe(target));
  kernels::check_class_targets(detail::all_examples(target), logits.size(1), ignore_index, op);
  const Shape rows{logits.size(0)};
  Tensor g = cast_to(g_in, logits.dtype());
  if (g.shape() != rows) {
    ADJOINT_CHECK(broadcast_shapes(g.shape(), rows, op) == rows, Shape, op, "weights ", describe(g),
                  " do not broadcast to the ", logits.size(0), " rows");
    g = g.expand(rows);
  }
  return apply(CrossEntropyBackward{ignore_index}, g, logits, target);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  if (check_class_inputs(log_probs, target, "nll_loss")) {
    Tensor r = nll_loss(log_probs.unsqueeze(0), target.reshape({1}), reduction, ignore_index);
    return reduction == Reduction::None ? r.reshape({}) : r;
  }
  kernels::check_class_targets(detail::all_examples(target), log_probs.size(1), ignore_index,
                               "nll_loss");
  return apply(NllLoss{reduction, ignore_index}, to_floating(log_probs), target);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(losses)
