// The losses that compare two tensors element by element, mse_loss and
// binary_cross_entropy_with_logits, as op structs (Note [Elementwise losses are ops]).
#include "adjoint/error.h"
#include "core/op_fields.h"
#include "core/tensor_factory.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// Note [Elementwise losses are ops]
// PyTorch's autocast runs these losses in float32; a composite of ops that each follow their
// inputs cannot say so, so each loss is one op with AutocastPolicy::Float32 and the Autocast
// layer converts its inputs, as for every other op (the public functions read no autocast
// state). One op also means one node, one profile entry and one graph node per loss. Its
// forward computes in the inputs' promoted dtype (integers as the default float, for integer
// targets), 16-bit ones in float32 rounded once, as mean() does; the rules are written with
// ops, so the losses differentiate to any order; the batching rule computes every example's
// per-element losses at once and reduces each example's own.

// The loss's dtype: its inputs' promoted, an integer or bool one as the default float.
DType loss_dtype(DType x, DType t) {
  return promote_types(is_floating(x) ? x : kDefaultFloat, is_floating(t) ? t : kDefaultFloat);
}

Tensor in_dtype(const Tensor& x, DType dt) { return x.dtype() == dt ? x : kernels::cast(x, dt); }

// The forward of a loss whose per-element values `per` computes from x and t in one dtype:
// reduced as asked, in float32 for 16-bit inputs, rounded to the loss's dtype at the end.
template <class PerElement>
Tensor loss_kernel(const Tensor& x, const Tensor& t, Reduction reduction, PerElement per) {
  const DType dt = loss_dtype(x.dtype(), t.dtype());
  const DType math = opmath_dtype(dt);
  Tensor e = per(in_dtype(x, math), in_dtype(t, math));
  if (reduction != Reduction::None) {
    const int64_t count = e.numel();
    e = kernels::reduce(kernels::Reduce::Sum, e, {}, false);
    if (reduction == Reduction::Mean) {  // sum / count, as mean(); 0 / 0 = NaN when empty
      Tensor n = make_empty({}, math, e.device());
      kernels::fill(n, static_cast<double>(count));
      e = kernels::binary(kernels::Binary::Div, e, n);
    }
  }
  return in_dtype(e, dt);
}

// The gradient's weight per element: the output's gradient, over the count for Mean.
Tensor weight_of(const Tensor& gy, Reduction reduction, int64_t count) {
  return reduction == Reduction::Mean ? gy / static_cast<double>(count) : gy;
}

// A per-element tangent reduced as the loss is.
Tensor reduce_like_loss(const Tensor& per_element, Reduction reduction) {
  if (!per_element.defined() || reduction == Reduction::None) return per_element;
  return reduction == Reduction::Sum ? sum(per_element) : mean(per_element);
}

// What mse_loss() and binary_cross_entropy_with_logits() hand their op: two tensors of one
// shape (an imported op is checked against them).
detail::OutputSpec loss_spec(std::span<const detail::ValueSpec> in, Reduction reduction,
                             const char* op) {
  const detail::ValueSpec &x = spec_of(in, 0, op), &t = spec_of(in, 1, op);
  ADJOINT_CHECK(x.shape == t.shape, Shape, op, "input and target must have the same shape: input ",
                describe(x), " vs target ", describe(t));
  ADJOINT_CHECK(
      reduction == Reduction::None || reduction == Reduction::Mean || reduction == Reduction::Sum,
      Value, op, "unknown reduction ", static_cast<int>(reduction));
  return {reduction == Reduction::None ? x.shape : Shape{}, loss_dtype(x.dtype, t.dtype)};
}

// Batching: the per-element losses of every example at once, each example reducing its own.
template <class Loss>
Tensor batched_loss(Reduction reduction, const BatchArgs& b) {
  Tensor per = apply(Loss{Reduction::None}, b.with_batch(0), b.with_batch(1));
  if (reduction == Reduction::None || b.logical_dim(0) == 0) return per;
  std::vector<int64_t> dims;
  for (int64_t d = 1; d <= b.logical_dim(0); ++d) dims.push_back(d);
  return reduction == Reduction::Sum ? sum(per, dims) : mean(per, dims);
}

struct MseLoss {
  static constexpr const char* name = "mse_loss";
  auto fields() { return std::tie(reduction); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Reduction reduction;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return loss_spec(in, reduction, name);
  }
  // (x - t)^2 per element
  Tensor forward(const Tensor& x, const Tensor& t) const {
    return loss_kernel(x, t, reduction, [](const Tensor& a, const Tensor& b) {
      return kernels::unary(Unary::Square, kernels::binary(kernels::Binary::Sub, a, b));
    });
  }
  // d/dx = 2 (x - t), d/dt = -2 (x - t)
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor gx =
        (c.input(0) - c.input(1)) * (weight_of(gy, reduction, c.input(0).numel()) * 2.0);
    return {c.needs_grad(0) ? gx : Tensor(), c.needs_grad(1) ? -gx : Tensor()};
  }
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tt) const {
    const Tensor dt = tx.defined() && tt.defined() ? tx - tt : tx.defined() ? tx : -tt;
    return reduce_like_loss((c.input(0) - c.input(1)) * dt * 2.0, reduction);
  }
  Tensor vmap(const BatchArgs& b) const { return batched_loss<MseLoss>(reduction, b); }
};

// loss = max(x, 0) - x t + log1p(exp(-|x|)): no term overflows, and softplus's argument is
// never positive, so it is log1p(exp(.)) exactly. The derivatives are smooth everywhere (at
// x = 0 too): dloss/dx = sigmoid(x) - t, dloss/dt = -x.
struct BceWithLogits {
  static constexpr const char* name = "binary_cross_entropy_with_logits";
  auto fields() { return std::tie(reduction); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Reduction reduction;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return loss_spec(in, reduction, name);
  }
  Tensor forward(const Tensor& x, const Tensor& t) const {
    return loss_kernel(x, t, reduction, [](const Tensor& a, const Tensor& b) {
      const Tensor tail = kernels::unary(
          Unary::Softplus, kernels::unary(Unary::Neg, kernels::unary(Unary::Abs, a)), 1.0, 20.0);
      const Tensor linear = kernels::binary(kernels::Binary::Sub, kernels::unary(Unary::Relu, a),
                                            kernels::binary(kernels::Binary::Mul, a, b));
      return kernels::binary(kernels::Binary::Add, linear, tail);
    });
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor w = weight_of(gy, reduction, x.numel());
    return {c.needs_grad(0) ? (sigmoid(x) - c.input(1)) * w : Tensor(),
            c.needs_grad(1) ? -x * w : Tensor()};
  }
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tt) const {
    const Tensor& x = c.input(0);
    return reduce_like_loss(sum_defined(tx.defined() ? (sigmoid(x) - c.input(1)) * tx : Tensor(),
                                        tt.defined() ? -x * tt : Tensor()),
                            reduction);
  }
  Tensor vmap(const BatchArgs& b) const { return batched_loss<BceWithLogits>(reduction, b); }
};

void check_same_shape(const Tensor& input, const Tensor& target, const char* op,
                      const char* input_name) {
  ADJOINT_CHECK(input.defined() && target.defined(), Value, op, "got an undefined tensor");
  ADJOINT_CHECK(input.shape() == target.shape(), Shape, op, input_name,
                " and target must have the same shape: ", input_name, " ", describe(input),
                " vs target ", describe(target));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_same_shape(input, target, "mse_loss", "input");
  return apply(MseLoss{reduction}, input, target);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction) {
  check_same_shape(logits, target, "binary_cross_entropy_with_logits", "logits");
  return apply(BceWithLogits{reduction}, logits, target);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(elementwise_losses)
