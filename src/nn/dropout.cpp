// nn::Dropout: adjoint::dropout with the module's own generator, skipped in eval mode.
#include "adjoint/nn/dropout.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

Dropout::Dropout(double p, Generator* seed_from) : Module("Dropout"), p_(p) {
  ADJOINT_CHECK(p >= 0 && p <= 1, Value, "nn.Dropout", "probability p must be in [0, 1], got ", p);
  if (p > 0) gen_.manual_seed((seed_from ? *seed_from : default_generator()).next_u64());
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0) return x;
  return dropout(x, p_, true, &gen_);
}

}  // namespace adjoint::nn
