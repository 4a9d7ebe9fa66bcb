// gradcheck and gradgradcheck: compare analytic derivatives with central finite differences
// in float64, and report the worst element when they disagree.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

struct GradcheckOptions {
  double eps = 1e-6;       ///< finite-difference step
  double atol = 1e-5;      ///< absolute tolerance
  double rtol = 1e-3;      ///< relative tolerance
  bool check_jvp = false;  ///< also compare forward-mode JVPs with finite differences
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  ///< on failure: which input, which element, analytic vs numeric
  int64_t input = -1;   ///< worst input index
  int64_t index = -1;   ///< worst flat element index within that input
  double analytic = 0;
  double numeric = 0;
  explicit operator bool() const { return ok; }
};

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Checks the VJP of f at `inputs` (float64 tensors; those requiring grad are checked) against
/// central differences, column by column of the Jacobian.
GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

/// Checks second derivatives: the gradient of <grad f, v> for a random v, via gradcheck.
GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace adjoint
