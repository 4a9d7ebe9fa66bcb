// Gradcheck samples for scaled_dot_product_attention (src/ops/attention.cpp): self- and
// cross-attention (L != S both ways, Ev != E), causal, bool and float masks that broadcast
// (the float one differentiated), grouped-query attention, rank 2 and 3 inputs, broadcast batch
// dims, transposed views, a row masked throughout, empty lengths, dropout with a generator seeded
// inside the function (so every call drops the same elements), the gradient itself taken with
// create_graph (its VJP is scaled_dot_product_attention_backward, whose own rules the registry
// then checks), and the math path.
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

ADJOINT_REGISTER_SAMPLES(attention) {
  auto sdpa = [](bool causal, bool gqa = false, std::optional<double> scale = std::nullopt) {
    return [=](const Inputs& x) {
      const Tensor mask = x.size() > 3 ? x[3] : Tensor();
      return scaled_dot_product_attention(x[0], x[1], x[2], mask, 0, causal, scale, gqa);
    };
  };
  const std::string op = "attention/sdpa/";
  sink.add(op + "self", sdpa(false), {randn64({2, 3, 4}), randn64({2, 3, 4}), randn64({2, 3, 4})});
  sink.add(op + "cross", sdpa(false),
           {randn64({2, 2, 3, 4}), randn64({2, 2, 5, 4}), randn64({2, 2, 5, 3})});
  sink.add(op + "causal_square", sdpa(true),
           {randn64({2, 4, 3}), randn64({2, 4, 3}), randn64({2, 4, 3})});
  sink.add(op + "causal_more_queries", sdpa(true),
           {randn64({1, 5, 3}), randn64({1, 3, 3}), randn64({1, 3, 2})});
  sink.add(op + "causal_more_keys", sdpa(true),
           {randn64({1, 3, 3}), randn64({1, 5, 3}), randn64({1, 5, 2})});
  sink.add(op + "scale", sdpa(false, false, 0.7),
           {randn64({1, 3, 4}), randn64({1, 3, 4}), randn64({1, 3, 4})});
  const Tensor keep = constant(tensor(
      std::vector<bool>{true, false, true, true, true, false, true, true, false, true, true, true},
      Shape{3, 4}));
  sink.add(op + "bool_mask", sdpa(false),
           {randn64({2, 3, 3}), randn64({2, 4, 3}), randn64({2, 4, 2}), keep});
  sink.add(
      op + "float_mask", sdpa(false),
      {randn64({2, 2, 3, 3}), randn64({2, 2, 4, 3}), randn64({2, 2, 4, 2}), randn64({2, 1, 3, 4})});
  // Row 1 sees no key: 0, and no gradient through it (PyTorch since 2.5).
  const Tensor dead_row = constant(tensor(
      std::vector<bool>{true, true, false, false, false, false, false, true, true}, Shape{3, 3}));
  sink.add(op + "row_masked_throughout", sdpa(false),
           {randn64({2, 3, 3}), randn64({2, 3, 3}), randn64({2, 3, 3}), dead_row});
  sink.add(op + "gqa", sdpa(false, true),
           {randn64({1, 4, 3, 3}), randn64({1, 2, 4, 3}), randn64({1, 2, 4, 2})});
  sink.add(op + "gqa_causal", sdpa(true, true),
           {randn64({2, 3, 3}), randn64({1, 3, 3}), randn64({1, 3, 3})});
  sink.add(op + "rank2", sdpa(false), {randn64({3, 4}), randn64({5, 4}), randn64({5, 2})});
  sink.add(op + "broadcast_batch", sdpa(false),
           {randn64({2, 1, 3, 4}), randn64({3, 4, 4}), randn64({1, 3, 4, 2})});
  sink.add(
      op + "transposed", sdpa(false),
      {randn64({3, 2, 4}).transpose(0, 1), randn64({4, 3, 2}).transpose(0, 2), randn64({2, 3, 3})});
  sink.add(op + "empty_queries", sdpa(false),
           {randn64({2, 0, 3}), randn64({2, 4, 3}), randn64({2, 4, 3})});
  sink.add(op + "no_keys", sdpa(false),
           {randn64({2, 3, 3}), randn64({2, 0, 3}), randn64({2, 0, 2})});

  // Dropout, differentiated with respect to one input at a time, the others constants: a
  // compiled function whose inputs outside jacrev's also require grad differentiates with
  // create_graph, which re-runs the function eagerly under jacrev's vmap, where a draw from a
  // generator made inside the function is refused (nn/dropout fails the same way with a second
  // input that requires grad). The gradient samples below differentiate all three at once.
  auto dropped = [](bool causal) {
    return [=](const Inputs& x) {
      Generator gen(7);
      return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.4, causal, std::nullopt, false,
                                          &gen);
    };
  };
  sink.add(op + "dropout_q", dropped(false),
           {randn64({2, 4, 3}), constant(randn64({2, 5, 3})), constant(randn64({2, 5, 2}))});
  sink.add(op + "dropout_k", dropped(false),
           {constant(randn64({2, 4, 3})), randn64({2, 5, 3}), constant(randn64({2, 5, 2}))});
  sink.add(op + "dropout_v_causal", dropped(true),
           {constant(randn64({2, 5, 3})), constant(randn64({2, 5, 3})), randn64({2, 5, 3})});

  // The math path (scaled_dot_product_attention_math), composed of matmul, softmax and the
  // kernels' dropout multipliers (attention_dropout_scale).
  auto math = [](double p, bool causal, bool gqa) {
    return [=](const Inputs& x) {
      Generator gen(5);
      const Tensor mask = x.size() > 3 ? x[3] : Tensor();
      return scaled_dot_product_attention_math(x[0], x[1], x[2], mask, p, causal, std::nullopt, gqa,
                                               &gen);
    };
  };
  const std::string mop = "attention/sdpa_math/";
  sink.add(mop + "float_mask", math(0, false, false),
           {randn64({2, 3, 3}), randn64({2, 4, 3}), randn64({2, 4, 2}), randn64({3, 4})});
  sink.add(mop + "causal_gqa", math(0, true, true),
           {randn64({4, 3, 3}), randn64({2, 3, 3}), randn64({2, 3, 2})});
  sink.add(mop + "row_masked_throughout", math(0, false, false),
           {randn64({2, 3, 3}), randn64({2, 3, 3}), randn64({2, 3, 3}), dead_row});
  sink.add(mop + "dropout_q", math(0.4, false, false),
           {randn64({2, 4, 3}), constant(randn64({2, 5, 3})), constant(randn64({2, 5, 2}))});

  // The gradient as a function of the inputs: <q, k, v> -> the VJP of sum(w * sdpa(q, k, v)).
  auto gradient = [](double p, bool causal, bool gqa) {
    return [=](const Inputs& in) {
      // Through the vjp transform, so that the gradient stays a function of `in` (its graph,
      // its tangents, a trace) whether or not `in` requires grad.
      const std::vector<Tensor> x(in.begin(), in.end());
      auto loss = [&](const std::vector<Tensor>& xs) {
        Generator gen(11);
        const Tensor mask = xs.size() > 3 ? xs[3] : Tensor();
        const Tensor y = scaled_dot_product_attention(xs[0], xs[1], xs[2], mask, p, causal,
                                                      std::nullopt, gqa, &gen);
        const Tensor w = sin(arange(0.0, static_cast<double>(y.numel())).reshape(y.shape()));
        return (y * w.to(y.dtype())).sum();
      };
      auto r = vjp(loss, x);
      std::vector<Tensor> g = r.pullback(ones({}, r.outputs.dtype()));
      Tensor all;
      for (const Tensor& t : g) {
        const Tensor flat = t.reshape({t.numel()});
        all = all.defined() ? cat({all, flat}, 0) : flat;
      }
      return all;
    };
  };
  // The same with dropout, taken through leaves of the function's own (requires_grad_, so
  // compile runs it eagerly): traced, jacrev of the compiled function would re-run the function
  // for its backward under jacrev's vmap, where the dropout draw is refused (docs/compile.md,
  // "What is not done yet").
  auto gradient_by_leaves = [](double p, bool causal, bool gqa) {
    return [=](const Inputs& in) {
      // The gradient at in + z with respect to zero leaves z of this function's own: x stays a
      // function of `in` (its graph and its tangents), whether or not `in` requires grad.
      EnableGradGuard enable;
      std::vector<Tensor> x, z;
      for (const Tensor& t : in) {
        z.push_back(zeros(t.shape(), t.dtype()).requires_grad_(true));
        x.push_back(t + z.back());
      }
      Generator gen(11);
      const Tensor mask = x.size() > 3 ? x[3] : Tensor();
      const Tensor y =
          scaled_dot_product_attention(x[0], x[1], x[2], mask, p, causal, std::nullopt, gqa, &gen);
      const Tensor w = sin(arange(0.0, static_cast<double>(y.numel())).reshape(y.shape()));
      std::vector<Tensor> g = autograd::grad({(y * w.to(y.dtype())).sum()}, z, {}, std::nullopt,
                                             /*create_graph=*/true);
      Tensor all;
      for (const Tensor& t : g) {
        const Tensor flat = t.reshape({t.numel()});
        all = all.defined() ? cat({all, flat}, 0) : flat;
      }
      return all;
    };
  };
  sink.add(op + "gradient", gradient(0, false, false),
           {randn64({2, 3, 3}), randn64({2, 4, 3}), randn64({2, 4, 2})});
  sink.add(op + "gradient_causal_gqa", gradient(0, true, true),
           {randn64({1, 2, 4, 3}), randn64({1, 1, 3, 3}), randn64({1, 1, 3, 2})});
  sink.add(op + "gradient_float_mask", gradient(0, false, false),
           {randn64({2, 3, 3}), randn64({2, 4, 3}), randn64({2, 4, 2}), randn64({3, 4})});
  sink.add(op + "gradient_dropout", gradient_by_leaves(0.3, false, false),
           {randn64({2, 3, 3}), randn64({2, 4, 3}), randn64({2, 4, 2})});
}
