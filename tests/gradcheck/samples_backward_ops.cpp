// Gradcheck samples for the fused gradient primitives (tanh_backward, sigmoid_backward,
// relu_backward): their own VJPs and JVPs, with respect to both the incoming gradient and y.
#include "ops/backward_ops.h"
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

ADJOINT_REGISTER_SAMPLES(backward_ops) {
  auto tanh_bw = [](const Inputs& x) { return tanh_backward(x[0], x[1]); };
  auto sigmoid_bw = [](const Inputs& x) { return sigmoid_backward(x[0], x[1]); };
  auto relu_bw = [](const Inputs& x) { return relu_backward(x[0], x[1]); };
  sink.add("backward_ops/tanh_backward/matrix", tanh_bw,
           {randn64({3, 4}), uniform64({3, 4}, -0.9, 0.9)});
  sink.add("backward_ops/tanh_backward/broadcast", tanh_bw,
           {randn64({3, 4}), uniform64({4}, -0.9, 0.9)});
  sink.add("backward_ops/tanh_backward/scalar", tanh_bw, {randn64({}), uniform64({}, -0.9, 0.9)});
  sink.add("backward_ops/sigmoid_backward/matrix", sigmoid_bw,
           {randn64({3, 4}), uniform64({3, 4}, 0.1, 0.9)});
  sink.add("backward_ops/sigmoid_backward/transposed", sigmoid_bw,
           {randn64({4, 3}).t(), uniform64({3, 4}, 0.1, 0.9)});
  // y kept away from 0, where relu_backward jumps.
  sink.add("backward_ops/relu_backward/matrix", relu_bw,
           {randn64({3, 4}), constant(uniform64({3, 4}, 0.2, 1.0) * (randn64({3, 4}).sign()))});
  sink.add("backward_ops/relu_backward/empty", relu_bw,
           {randn64({0, 3}), uniform64({0, 3}, 0.2, 1)});
}
