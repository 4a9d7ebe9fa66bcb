// nn::Linear: construction with libtorch's default init, and a forward that checks the
// feature count (so the error names the layer) before the one fused linear op.
#include "adjoint/nn/linear.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/nn/init.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator* gen)
    : Module("Linear"), in_(in_features), out_(out_features) {
  ADJOINT_CHECK(in_features >= 0 && out_features >= 0, Value, "nn.Linear",
                "feature counts must be non-negative, got in ", in_features, ", out ",
                out_features);
  Generator& g = gen ? *gen : default_generator();
  // libtorch: kaiming_uniform_(a = sqrt(5)) for W, whose bound gain * sqrt(3 / in) with
  // gain = sqrt(2 / (1 + 5)) is 1 / sqrt(in); the bias uses the same bound.
  const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::uniform_(weight, g, -bound, bound);
  if (with_bias) {
    bias = register_parameter("bias", empty({out_features}));
    init::uniform_(bias, g, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  ADJOINT_CHECK(x.defined(), Value, "nn.Linear", "got an undefined input");
  ADJOINT_CHECK(x.dim() >= 1, Shape, "nn.Linear", "input needs at least 1 dim, got ", describe(x));
  ADJOINT_CHECK(x.shape().back() == in_, Shape, "nn.Linear", "input has ", x.shape().back(),
                " features, expected ", in_, ": ", describe(x));
  return linear(x, weight, bias);
}

}  // namespace adjoint::nn
