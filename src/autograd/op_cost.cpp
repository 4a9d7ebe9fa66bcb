#include "autograd/op_cost.h"

#include <algorithm>

#include "autograd/custom_function.h"

namespace adjoint::detail {
namespace {
uint64_t elements(const Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.numel()) : 0; }
}  // namespace

// See Note [FLOP counting] in src/checkpoint/budget_profile.cpp.
uint64_t op_flops(std::string_view op, const Tensor* inputs, std::size_t n, const Tensor& out) {
  if (op == "matmul" || op == "linear" || op == "dot") {
    const Tensor& a = inputs[0];
    const uint64_t k = a.dim() == 0 ? 1 : static_cast<uint64_t>(a.size(-1));
    uint64_t flops = 2 * elements(out) * k;
    if (op == "linear" && n > 2 && inputs[2].defined()) flops += elements(out);  // the bias
    return flops;
  }
  if (op == "view" || op == "permute" || op == "expand" || op == "slice" || op == "select")
    return 0;
  // A custom function's work is its forward's ops, which observers count on their own.
  if (names_custom_function(op.data())) return 0;
  uint64_t most = elements(out);
  for (std::size_t i = 0; i < n; ++i) most = std::max(most, elements(inputs[i]));
  return most;
}

uint64_t tensor_bytes(const Tensor* tensors, std::size_t n) {
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (tensors[i].defined())
      bytes += static_cast<uint64_t>(tensors[i].numel()) * itemsize(tensors[i].dtype());
  return bytes;
}

}  // namespace adjoint::detail
