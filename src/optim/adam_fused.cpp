// The Adam/AdamW update of one parameter: the op-by-op reference (in-place tensor ops, in
// PyTorch's floating-point order) and the fused single-pass kernel that repeats its arithmetic
// element by element, plus the dispatch between them. Adam::update (adam.cpp) calls
// adam_update; the hyper-parameter checks and the state live there.
#include "optim/adam_fused.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "backend/optim_kernels.h"
#include "core/mode_state.h"
#include "core/op_tracer.h"
#include "ops/inplace_call.h"

// Note [Fused Adam is bitwise the op-by-op update]
// Resuming from a checkpoint must reproduce an uninterrupted run bit for bit, and runs must be
// deterministic whichever path a parameter takes (a strided or mixed-dtype parameter still
// goes op by op), so the fused kernel performs exactly the roundings of the in-place ops, in their
// order. What those ops compute (src/ops/inplace.cpp, src/backend/cpu/elementwise.cpp), for
// T = float or double, with x the tensor's element:
// - mul_(double s), add_(double s): the scalar is first rounded to T, then x * T(s), x + T(s)
//   (Unary::MulScalar / AddScalar).
// - add_(tensor y, alpha), alpha != 1: x + T(alpha) * y in T (add_scaled_into), a multiply
//   then an add, each rounded: the library builds for baseline x86-64, which has no FMA, so
//   the compiler cannot contract them.
// - add_(y), sub_(y), mul_(y), div_(y): x + y, x - y, x * y, x / y in T; div_ by a 0-d tensor
//   divides by its one element (the divisor was rounded to T when the 0-d tensor was made).
// - sqrt: correctly rounded in T (Highway's Sqrt is the sqrtps/sqrtpd instruction; strided
//   tensors use std::sqrt).
// No step is done in double for float32. The scalars (bias corrections, step size, ...) are
// computed once in double by AdamCoefficients for both paths, so they agree to the bit too.
// On a target whose compiler may contract a * b + c into an FMA, or whose float math carries
// excess precision, the op-by-op results depend on choices one pass cannot mirror: the CPU
// kernel (src/backend/cpu/adam_step.cpp) then says it is not exact and the ops run.
// Elementwise results do not depend on how the range is split into chunks, so threading
// changes no bit either. The kernel sits behind the kernel table (kernels::adam_step), so a
// device other than the CPU brings its own, or says it has none (meta).

namespace adjoint::optim::detail {
namespace {

// The scalars of one update, in double, shared by both paths.
struct AdamCoefficients {
  double decay;            // AdamW: p *= 1 - lr * weight_decay
  double w;                // lerp weight 1 - beta1
  double one_minus_w;      // the other lerp branch multiplies by 1 - w (not always beta1)
  double one_minus_beta2;  // v's new-gradient weight
  double sqrt_bc2;         // sqrt(1 - beta2^t)
  double neg_step_size;    // -lr / (1 - beta1^t)

  explicit AdamCoefficients(const AdamStep& s) {
    decay = 1 - s.lr * s.weight_decay;
    w = 1 - s.beta1;
    one_minus_w = 1 - w;
    one_minus_beta2 = 1 - s.beta2;
    const double step = static_cast<double>(s.step);
    const double bias_correction1 = 1 - std::pow(s.beta1, step);
    const double bias_correction2 = 1 - std::pow(s.beta2, step);
    sqrt_bc2 = std::sqrt(bias_correction2);
    neg_step_size = -(s.lr / bias_correction1);
  }
};

/// The scalars the fused kernel takes: the same doubles as the op-by-op update's.
kernels::AdamScalars kernel_scalars(const AdamStep& s) {
  const AdamCoefficients k(s);
  const bool decay = s.weight_decay != 0;
  return {k.decay,
          s.weight_decay,
          k.w,
          k.one_minus_w,
          s.beta2,
          k.one_minus_beta2,
          k.sqrt_bc2,
          s.eps,
          k.neg_step_size,
          decay && s.decoupled,
          decay && !s.decoupled,
          k.w < 0.5};
}

bool fused_applies(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq) {
  // Grad mode on or a forward-mode level open: the in-place ops may record or move tangents
  // (or throw), which the kernel does not do.
  // Under compile the op-by-op update is traced instead: this kernel writes raw memory, which
  // a graph cannot record (Note [In-place ops under compile] in src/compile/trace.cpp).
  // Under vmap (a batched parameter or state) the ops' batching rules apply.
  if (is_grad_enabled() || tls_mode.dual_visible != 0 || ::adjoint::detail::tracing() ||
      tls_mode.vmap_depth != 0)
    return false;
  // A device whose kernel does not round as the ops do runs the ops; so does meta, which has
  // no memory to write (the step of a memory estimate, docs/devices.md).
  if (!kernels::adam_step_exact(param.device())) return false;
  const DType dt = param.dtype();
  if (dt != DType::Float32 && dt != DType::Float64) return false;
  const Tensor* all[] = {&param, &grad, &exp_avg, &exp_avg_sq};
  for (const Tensor* t : all) {
    if (!t->defined() || t->dtype() != dt || !(t->shape() == param.shape()) || !t->is_contiguous())
      return false;
  }
  // Aliasing operands (say a grad that is the parameter's own memory) see the op-by-op
  // update's intermediate values, which one pass would not.
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      if (all[i]->shares_storage(*all[j])) return false;
  return true;
}

void bump(const Tensor& t, int times) {
  for (int i = 0; i < times; ++i) t.impl()->storage->bump_version();
}

// The fused step as one in-place op of the dispatch stack, "adam_step", so that profiles and
// memory timelines see the optimizer's update as they see the op-by-op one (Note [In-place
// ops in the stack] in src/ops/inplace.cpp). fused_applies() lets it run only with grad mode
// off, no forward-mode level, no trace and no vmap, so the kernel is its only way.
class FusedAdamWays final : public ::adjoint::detail::InplaceWays {
 public:
  FusedAdamWays(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamStep& s)
      : param_(param), grad_(grad), exp_avg_(exp_avg), exp_avg_sq_(exp_avg_sq), s_(s) {}
  Tensor value() override {
    ADJOINT_ASSERT(false, "adam_step is never traced (fused_applies)");
    return Tensor();
  }
  void autograd(::adjoint::detail::OpCall& call) override {
    (void)call.next(::adjoint::Layer::Autograd);  // nothing to record
  }
  void batched() override {
    ADJOINT_ASSERT(false, "adam_step never runs under vmap (fused_applies)");
  }
  void direct() override {
    kernels::adam_step(param_, grad_, exp_avg_, exp_avg_sq_, kernel_scalars(s_));
    // As many version bumps as the in-place ops make, so versions read the same either way.
    bump(param_, s_.weight_decay != 0 && s_.decoupled ? 2 : 1);  // [mul_,] add_
    bump(exp_avg_, 1 - s_.beta1 < 0.5 ? 1 : 2);                  // add_, or copy_ + sub_
    bump(exp_avg_sq_, 2);                                        // mul_, add_
  }

 private:
  const Tensor &param_, &grad_, &exp_avg_, &exp_avg_sq_;
  const AdamStep& s_;
};

}  // namespace

bool adam_fused_available() { return kernels::adam_step_exact(kCPU); }

void adam_update_ops(Tensor& param, const Tensor& grad_in, Tensor& m, Tensor& v, const AdamStep& s,
                     const AdamScratch& scratch) {
  const AdamCoefficients k(s);
  Tensor grad = grad_in;
  if (s.weight_decay != 0) {
    if (s.decoupled) {
      param.mul_(k.decay);  // AdamW: decay the weights, not the gradient
    } else {
      Tensor g = scratch(param, 0);  // Adam: L2 term added to (a copy of) the gradient
      g.copy_(grad);
      g.add_(param, s.weight_decay);
      grad = g;
    }
  }

  Tensor t = scratch(param, 1);
  // m = lerp(m, grad, w), w = 1 - beta1, with torch's two-sided formula.
  t.copy_(grad);
  t.sub_(m);  // grad - m
  if (k.w < 0.5) {
    m.add_(t, k.w);  // m + w * (grad - m)
  } else {
    t.mul_(k.one_minus_w);  // grad - (grad - m) * (1 - w)
    m.copy_(grad);
    m.sub_(t);
  }
  // v = v * beta2 + (1 - beta2) * grad * grad  (addcmul multiplies left to right)
  v.mul_(s.beta2);
  t.copy_(grad);
  t.mul_(k.one_minus_beta2);
  t.mul_(grad);
  v.add_(t);

  // denom = sqrt(v) / sqrt(bias_correction2) + eps; a true division, as PyTorch (div_(Scalar)
  // would multiply by the reciprocal).
  Tensor denom = sqrt(v);
  denom.div_(scalar_tensor(k.sqrt_bc2, param.dtype()));
  denom.add_(s.eps);
  // p = p + (-step_size) * m / denom  (addcdiv: value * t1 / t2)
  t.copy_(m);
  t.mul_(k.neg_step_size);
  t.div_(denom);
  param.add_(t);
}

bool adam_update_fused(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       const AdamStep& s) {
  if (!fused_applies(param, grad, exp_avg, exp_avg_sq)) return false;
  FusedAdamWays ways(param, grad, exp_avg, exp_avg_sq, s);
  if (::adjoint::detail::inplace_stack_on()) [[unlikely]] {
    const Tensor tensors[] = {param, grad, exp_avg, exp_avg_sq};
    ::adjoint::detail::InplaceCall("adam_step", tensors, ways).dispatch();
  } else {
    ways.direct();
  }
  return true;
}

bool adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamStep& s, const AdamScratch& scratch) {
  if (adam_update_fused(param, grad, exp_avg, exp_avg_sq, s)) return true;
  adam_update_ops(param, grad, exp_avg, exp_avg_sq, s, scratch);
  return false;
}

}  // namespace adjoint::optim::detail
