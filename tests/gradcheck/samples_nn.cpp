// Gradcheck samples for the nn functions (src/ops/nn.cpp, losses.cpp), named "nn/<op>/<case>":
// softmax and log_softmax over several dims (negative, non-contiguous, 0-d, empty), the
// losses with each reduction (cross_entropy also with ignore_index and unbatched logits),
// layer_norm with and without weight and bias over 1-d and 2-d normalized shapes, and dropout
// with a generator seeded inside the sample function so every call draws the same mask.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

Tensor targets(const std::vector<int64_t>& v) { return constant(tensor(v)); }

// A float64 leaf drawn from N(0, scale^2).
Tensor randn_scaled(const Shape& shape, double scale) {
  return (randn64(shape) * scale).detach().requires_grad_(true);
}

const char* reduction_name(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Sum ? "sum" : "mean";
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(nn) {
  // ---- softmax, log_softmax ----
  for (bool log : {false, true}) {
    const std::string op = log ? "nn/log_softmax/" : "nn/softmax/";
    auto f = [log](int64_t dim) {
      return SampleFn([log, dim](const Inputs& x) {
        return log ? log_softmax(x[0], dim) : softmax(x[0], dim);
      });
    };
    sink.add(op + "dim1", f(1), {randn64({3, 4})});
    sink.add(op + "dim0", f(0), {randn64({3, 4})});
    sink.add(op + "dim_neg1", f(-1), {randn64({2, 3, 4})});
    sink.add(op + "middle_dim", f(1), {randn64({2, 3, 4})});
    sink.add(op + "dim_neg3", f(-3), {randn64({2, 3, 4})});
    sink.add(op + "noncontiguous", f(1), {randn64({4, 3}).t()});
    sink.add(op + "noncontiguous_dim0", f(0), {randn64({4, 3}).t()});
    sink.add(op + "scalar", f(0), {randn64({})});
    sink.add(op + "empty", f(1), {randn64({0, 3})});
  }

  // ---- masked_softmax ----
  {
    auto ms = [](int64_t dim) {
      return SampleFn([dim](const Inputs& x) { return masked_softmax(x[0], x[1], dim); });
    };
    const Tensor causal = constant(gt(arange(4).unsqueeze(0), arange(4).unsqueeze(1)));
    const Tensor scattered =  // rows whose unmasked entries are not a prefix, one all masked
        constant(tensor(std::vector<bool>{false, true, false, true, true, false, false, true, true,
                                          true, true, true},
                        Shape{3, 4}));
    sink.add("nn/masked_softmax/causal", ms(-1), {randn64({2, 4, 4}), causal});
    sink.add("nn/masked_softmax/scattered", ms(1), {randn64({3, 4}), scattered});
    sink.add("nn/masked_softmax/dim0", ms(0), {randn64({3, 4}), scattered});
    sink.add("nn/masked_softmax/noncontiguous", ms(1), {randn64({4, 4}).t(), causal.t()});
    sink.add("nn/masked_softmax/empty", ms(1), {randn64({0, 4}), causal.slice(0, 0, 1)});
  }

  // ---- cross_entropy ----
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    const std::string red = reduction_name(r);
    sink.add("nn/cross_entropy/" + red,
             [r](const Inputs& x) { return cross_entropy(x[0], x[1], r); },
             {randn64({4, 5}), targets({0, 4, 2, 2})});
    sink.add("nn/cross_entropy/" + red + "_ignore_index",
             [r](const Inputs& x) { return cross_entropy(x[0], x[1], r); },
             {randn64({4, 3}), targets({1, -100, 0, 2})});
    sink.add("nn/cross_entropy/" + red + "_ignore_class",
             [r](const Inputs& x) { return cross_entropy(x[0], x[1], r, /*ignore_index=*/1); },
             {randn64({5, 3}), targets({1, 0, 1, 2, 0})});
    sink.add("nn/cross_entropy/" + red + "_unbatched",
             [r](const Inputs& x) { return cross_entropy(x[0], x[1], r); },
             {randn64({4}), constant(scalar_tensor(int64_t{2}, DType::Int64))});
  }
  sink.add("nn/cross_entropy/noncontiguous",
           [](const Inputs& x) { return cross_entropy(x[0], x[1]); },
           {randn64({5, 3}).t(), targets({4, 0, 1})});

  // ---- nll_loss ----
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    const std::string red = reduction_name(r);
    sink.add("nn/nll_loss/" + red, [r](const Inputs& x) { return nll_loss(x[0], x[1], r); },
             {randn64({3, 4}), targets({3, 0, 1})});
    sink.add("nn/nll_loss/" + red + "_ignore_index",
             [r](const Inputs& x) { return nll_loss(x[0], x[1], r); },
             {randn64({3, 4}), targets({3, -100, 1})});
  }
  sink.add("nn/nll_loss/transposed_log_probs",
           [](const Inputs& x) { return nll_loss(x[0].t(), x[1]); },
           {randn64({4, 3}), targets({3, 0, 1})});
  sink.add("nn/nll_loss/of_log_softmax",
           [](const Inputs& x) { return nll_loss(log_softmax(x[0], 1), x[1]); },
           {randn64({3, 4}), targets({2, 2, 0})});

  // ---- mse_loss ----
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    sink.add(std::string("nn/mse_loss/") + reduction_name(r),
             [r](const Inputs& x) { return mse_loss(x[0], x[1], r); },
             {randn64({3, 4}), randn64({3, 4})});
  }
  sink.add("nn/mse_loss/constant_target", [](const Inputs& x) { return mse_loss(x[0], x[1]); },
           {randn64({5}), constant(randn64({5}))});
  sink.add("nn/mse_loss/scalar", [](const Inputs& x) { return mse_loss(x[0], x[1]); },
           {randn64({}), randn64({})});
  // Non-contiguous operands: the forward kernels read strided views.
  sink.add("nn/mse_loss/transposed_view",
           [](const Inputs& x) { return mse_loss(x[0].t(), x[1], Reduction::Sum); },
           {randn64({4, 3}), randn64({3, 4})});

  // ---- binary_cross_entropy_with_logits ----
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    sink.add(std::string("nn/bce_with_logits/") + reduction_name(r),
             [r](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1], r); },
             {randn_scaled({3, 4}, 3), uniform64({3, 4}, 0, 1)});
  }
  sink.add("nn/bce_with_logits/transposed_view",
           [](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1].t()); },
           {randn_scaled({3, 4}, 3), uniform64({4, 3}, 0, 1)});
  sink.add("nn/bce_with_logits/constant_target",
           [](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1]); },
           {randn_scaled({6}, 4), constant(uniform64({6}, 0, 1))});

  // ---- layer_norm ----
  sink.add("nn/layer_norm/weight_bias",
           [](const Inputs& x) { return layer_norm(x[0], {5}, x[1], x[2]); },
           {randn64({3, 5}), randn64({5}), randn64({5})});
  sink.add("nn/layer_norm/no_affine", [](const Inputs& x) { return layer_norm(x[0], {5}); },
           {randn64({3, 5})});
  sink.add("nn/layer_norm/weight_only", [](const Inputs& x) { return layer_norm(x[0], {4}, x[1]); },
           {randn64({2, 3, 4}), randn64({4})});
  sink.add("nn/layer_norm/bias_only",
           [](const Inputs& x) { return layer_norm(x[0], {4}, Tensor(), x[1]); },
           {randn64({2, 3, 4}), randn64({4})});
  sink.add("nn/layer_norm/normalized_2d",
           [](const Inputs& x) {
             return layer_norm(x[0], {3, 4}, x[1], x[2]);
           },
           {randn64({2, 3, 4}), randn64({3, 4}), randn64({3, 4})});
  sink.add("nn/layer_norm/normalized_2d_no_affine",
           [](const Inputs& x) {
             return layer_norm(x[0], {3, 4});
           },
           {randn64({2, 3, 4})});
  sink.add("nn/layer_norm/whole_tensor",
           [](const Inputs& x) { return layer_norm(x[0], {6}, x[1], x[2], 1e-3); },
           {randn64({6}), randn64({6}), randn64({6})});
  sink.add("nn/layer_norm/noncontiguous",
           [](const Inputs& x) { return layer_norm(x[0], {3}, x[1], x[2]); },
           {randn64({3, 4}).t(), randn64({3}), randn64({3})});
  sink.add("nn/layer_norm/constant_input",
           [](const Inputs& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
           {constant(randn64({3, 4})), randn64({4}), randn64({4})});

  // ---- dropout: the generator is made inside, so every call draws the same mask ----
  sink.add("nn/dropout/p03",
           [](const Inputs& x) {
             Generator gen(42);
             return dropout(x[0], 0.3, true, &gen);
           },
           {randn64({4, 5})});
  sink.add("nn/dropout/eval", [](const Inputs& x) { return dropout(x[0], 0.3, false); },
           {randn64({4})});
  sink.add("nn/dropout/p1", [](const Inputs& x) { return dropout(x[0], 1.0); }, {randn64({4})});

  // ---- random draws, from a generator made inside (every call draws the same values) ----
  sink.add("random/randn/scaled",
           [](const Inputs& x) {
             Generator gen(7);
             return x[0] * randn(x[0].shape(), x[0].dtype(), &gen);
           },
           {randn64({3, 4})});
  sink.add("random/randint/scaled",
           [](const Inputs& x) {
             Generator gen(11);
             return x[0] * randint(-2, 3, x[0].shape(), &gen).to(x[0].dtype());
           },
           {randn64({2, 5})});
  sink.add("random/rand/shifted",
           [](const Inputs& x) {
             Generator gen(5);
             return x[0] + rand({4}, x[0].dtype(), &gen);
           },
           {randn64({3, 4})});
}
