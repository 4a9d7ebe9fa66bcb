// Gradcheck samples for the ops the autograd machinery itself applies: copy_slices (the base
// after an in-place op on its view) and as_strided (a view's history regenerated from its
// modified base), Note [Views and in-place ops] in src/autograd/view_tracking.cpp; and alias
// (a transform's own copy of an input that requires grad, src/autograd/transform_support.cpp).
// Forward mode refuses in-place ops on views whose base has a tangent (docs/transforms.md), so
// the view samples check no JVP.
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

ADJOINT_REGISTER_SAMPLES(autograd_ops) {
  // b's rows 1..2 multiplied in place through a view: b's history becomes copy_slices.
  auto mul_into_rows = [](const Inputs& x) {
    Tensor b = x[0] * 1.0;
    b.narrow(0, 1, 2).mul_(x[1]);
    return b;
  };
  sink.add("autograd/copy_slices/rows", mul_into_rows, {randn64({4, 3}), randn64({2, 3})}).jvp =
      false;
  sink.add("autograd/copy_slices/broadcast", mul_into_rows, {randn64({4, 3}), randn64({3})}).jvp =
      false;
  sink.add("autograd/copy_slices/column_view",
           [](const Inputs& x) {
             Tensor b = x[0] * 1.0;
             b.select(1, 0).add_(x[1].square());
             return b;
           },
           {randn64({3, 2}), randn64({3})})
      .jvp = false;

  // v is a view of b; b changes in place afterwards, so reading v regenerates its history
  // from b (as_strided of b's new value).
  sink.add("autograd/as_strided/view_of_modified_base",
           [](const Inputs& x) {
             Tensor b = x[0] * 1.0;
             Tensor v = b.narrow(1, 1, 2);
             b.mul_(x[1]);
             return v * 2.0;
           },
           {randn64({3, 4}), randn64({4})})
      .jvp = false;
  sink.add("autograd/as_strided/transposed_view",
           [](const Inputs& x) {
             Tensor b = x[0] * 1.0;
             Tensor v = b.t();
             b.add_(x[1]);
             return v.square();
           },
           {randn64({2, 3}), randn64({2, 3})})
      .jvp = false;

  // grad inside the function: the transform aliases its input (which requires grad here) so
  // that the inner graph has its own leaf. d/dx of grad(sum x^3) = 6x.
  sink.add(
      "autograd/alias/grad_inside",
      [](const Inputs& x) { return grad([](const Tensor& t) { return (t * t * t).sum(); })(x[0]); },
      {randn64({2, 3})});
}
