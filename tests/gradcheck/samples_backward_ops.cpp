// Gradcheck samples for the fused gradient primitives (tanh_backward, sigmoid_backward,
// relu_backward, gelu_backward, softmax_backward, log_softmax_backward, layer_norm_backward,
// cross_entropy_backward): their own VJPs and JVPs, with respect to both the incoming gradient
// and the saved inputs, outputs or statistics.
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

  // gelu_backward(gy, x): smooth in x everywhere, both forms.
  for (GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
    const std::string op = a == GeluApproximation::Tanh ? "backward_ops/gelu_backward/tanh/"
                                                        : "backward_ops/gelu_backward/erf/";
    auto gelu_bw = [a](const Inputs& x) { return gelu_backward(x[0], x[1], a); };
    sink.add(op + "matrix", gelu_bw, {randn64({3, 4}), uniform64({3, 4}, -3, 3)});
    sink.add(op + "broadcast", gelu_bw, {randn64({3, 4}), uniform64({4}, -3, 3)});
    sink.add(op + "broadcast_gy", gelu_bw, {randn64({4}), uniform64({2, 4}, -3, 3)});
    sink.add(op + "scalar", gelu_bw, {randn64({}), uniform64({}, -2, 2)});
    sink.add(op + "noncontiguous", gelu_bw,
             {randn64({4, 3}).t(), uniform64({6, 4}, -3, 3).slice(0, 0, 6, 2)});
    sink.add(op + "empty", gelu_bw, {randn64({0, 3}), uniform64({0, 3}, -1, 1)});
  }

  // softmax_backward(gy, y, dim) and log_softmax_backward(gy, y, dim): y is any point (the
  // formulas are polynomial in it), kept in the range softmax and log_softmax produce.
  for (bool log : {false, true}) {
    const std::string op =
        log ? "backward_ops/log_softmax_backward/" : "backward_ops/softmax_backward/";
    auto y_of = [log](const Shape& shape) {
      return log ? uniform64(shape, -3, -0.1) : uniform64(shape, 0.05, 0.9);
    };
    auto bw = [log](int64_t dim) {
      return [log, dim](const Inputs& x) {
        return log ? log_softmax_backward(x[0], x[1], dim) : softmax_backward(x[0], x[1], dim);
      };
    };
    sink.add(op + "last_dim", bw(-1), {randn64({3, 5}), y_of({3, 5})});
    sink.add(op + "first_dim", bw(0), {randn64({3, 5}), y_of({3, 5})});
    sink.add(op + "middle_dim", bw(1), {randn64({2, 4, 3}), y_of({2, 4, 3})});
    sink.add(op + "broadcast_y", bw(-1), {randn64({2, 3, 4}), y_of({3, 4})});
    sink.add(op + "broadcast_gy", bw(1), {randn64({4}), y_of({2, 4})});
    sink.add(op + "noncontiguous", bw(0), {randn64({5, 3}).t(), y_of({5, 3}).t()});
    sink.add(op + "scalar", bw(0), {randn64({}), y_of({})});
    sink.add(op + "empty", bw(-1), {randn64({0, 4}), y_of({0, 4})});
  }

  // layer_norm_backward(gy, x, w, mean, rstd): mean and rstd are independent inputs here.
  const std::string ln = "backward_ops/layer_norm_backward/";
  auto ln_bw = [](int64_t dims) {
    return
        [dims](const Inputs& x) { return layer_norm_backward(x[0], x[1], x[2], x[3], x[4], dims); };
  };
  auto ln_bw_no_weight = [](const Inputs& x) {
    return layer_norm_backward(x[0], x[1], Tensor(), x[2], x[3], 1);
  };
  sink.add(
      ln + "weight", ln_bw(1),
      {randn64({3, 4}), randn64({3, 4}), randn64({4}), randn64({3, 1}), uniform64({3, 1}, 0.5, 2)});
  sink.add(ln + "no_weight", ln_bw_no_weight,
           {randn64({3, 5}), randn64({3, 5}), randn64({3, 1}), uniform64({3, 1}, 0.5, 2)});
  sink.add(ln + "normalized_2d", ln_bw(2),
           {randn64({2, 3, 4}), randn64({2, 3, 4}), randn64({3, 4}), randn64({2, 1, 1}),
            uniform64({2, 1, 1}, 0.5, 2)});
  sink.add(ln + "one_row", ln_bw(1),
           {randn64({5}), randn64({5}), randn64({5}), randn64({1}), uniform64({1}, 0.5, 2)});
  sink.add(ln + "noncontiguous", ln_bw(1),
           {randn64({4, 3}).t(), randn64({4, 3}).t(), randn64({4}), randn64({3, 1}),
            uniform64({3, 1}, 0.5, 2)});
  sink.add(
      ln + "empty", ln_bw(1),
      {randn64({0, 4}), randn64({0, 4}), randn64({4}), randn64({0, 1}), uniform64({0, 1}, 0.5, 2)});

  // cross_entropy_backward(g, logits, target): per-row weights g, int64 targets as constants.
  auto ce_bw = [](int64_t ignore) {
    return [ignore](const Inputs& x) { return cross_entropy_backward(x[0], x[1], x[2], ignore); };
  };
  auto targets = [](std::vector<int64_t> t) { return constant(tensor(t)); };
  const std::string ce = "backward_ops/cross_entropy_backward/";
  sink.add(ce + "rows", ce_bw(-100), {randn64({4}), randn64({4, 5}), targets({0, 3, 1, 4})});
  sink.add(ce + "ignored_row", ce_bw(-100),
           {randn64({4}), randn64({4, 5}), targets({0, -100, 1, 4})});
  sink.add(ce + "broadcast_g", ce_bw(-100), {randn64({}), randn64({3, 4}), targets({2, 0, 3})});
  sink.add(ce + "noncontiguous", ce_bw(1), {randn64({3}), randn64({4, 3}).t(), targets({1, 0, 3})});
  sink.add(ce + "empty", ce_bw(-100),
           {randn64({0}), randn64({0, 5}), constant(zeros({0}, DType::Int64))});
}
