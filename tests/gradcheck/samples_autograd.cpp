// Gradcheck samples for the ops the autograd machinery itself applies: alias (a transform's own
// copy of an input that requires grad, src/autograd/transform_support.cpp). copy_slices and
// as_strided (in-place ops on views) have none yet: see kKnownGaps in op_census_test.cpp.
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

ADJOINT_REGISTER_SAMPLES(autograd_ops) {
  // grad inside the function: the transform aliases its input (which requires grad here) so
  // that the inner graph has its own leaf. d/dx of grad(sum x^3) = 6x.
  sink.add(
      "autograd/alias/grad_inside",
      [](const Inputs& x) { return grad([](const Tensor& t) { return (t * t * t).sum(); })(x[0]); },
      {randn64({2, 3})});
}
