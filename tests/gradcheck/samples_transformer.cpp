// Gradcheck samples for the Llama block's composites (src/ops/transformer_ops.cpp): rms_norm
// with and without a weight, over 1-d, batched and transposed inputs; rotary embedding at offset
// 0 and past it, on [B, H, T, D] and [T, D] inputs and a transposed view. They have no rules of
// their own, so these check the ops they are written with, composed as they compose them, under
// every transform the registry's suites run.
#include "adjoint/transformer_ops.h"
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

ADJOINT_REGISTER_SAMPLES(transformer) {
  auto rms = [](double eps) {
    return [=](const Inputs& x) { return rms_norm(x[0], x.size() > 1 ? x[1] : Tensor(), eps); };
  };
  sink.add("transformer/rms_norm/vector", rms(1e-6), {randn64({5})});
  sink.add("transformer/rms_norm/weight", rms(1e-5), {randn64({2, 3, 4}), randn64({4})});
  sink.add("transformer/rms_norm/noncontiguous", rms(0.1), {randn64({4, 3}).t(), randn64({4})});
  sink.add("transformer/rms_norm/empty", rms(1e-6), {randn64({0, 3}), randn64({3})});

  auto rope = [](int64_t offset) {
    return [=](const Inputs& x) { return rotary_embedding(x[0], offset); };
  };
  sink.add("transformer/rope/bhtd", rope(0), {randn64({2, 2, 3, 4})});
  sink.add("transformer/rope/offset", rope(5), {randn64({1, 2, 2, 6})});
  sink.add("transformer/rope/matrix", rope(3), {randn64({3, 2})});
  sink.add("transformer/rope/noncontiguous", rope(1), {randn64({4, 3}).t()});
  // Tables given: the function of x that the attention module computes.
  sink.add("transformer/rope/tables",
           [](const Inputs& x) {
             const RotaryTables t = rotary_tables(3, 4, 100.0, 2, x[0].dtype());
             return apply_rotary_embedding(x[0], t.cos, t.sin);
           },
           {randn64({2, 3, 4})});
}
