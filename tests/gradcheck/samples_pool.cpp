// Gradcheck samples for the pooling ops (src/ops/pooling.cpp), named "pool/<op>/<case>", and
// for the transposes their gradients run (max_pool2d_backward, avg_pool2d_backward): odd
// sizes, strides, dilations, padding, ceil_mode on and off, batch 1, channels 1, an empty
// batch, unbatched, non-contiguous and channels-last-strided inputs. Max pooling's inputs are
// a permutation of evenly spaced values (no two closer than 0.02), so no window has a tie that
// finite differences would step across.
#include <numeric>

#include "ops/pool_backward.h"
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

// A float64 leaf of `shape` holding distinct values spread over [-2, 2) in a scrambled order.
Tensor distinct64(const Shape& shape) {
  const int64_t n = shape.numel();
  std::vector<double> v(static_cast<std::size_t>(n));
  int64_t step = 7;  // a step coprime with n visits every slot once
  while (n > 1 && std::gcd(step, n) != 1) ++step;
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>((i * step) % n)] = -2.0 + 4.0 * static_cast<double>(i) / n;
  return tensor(v, shape, DType::Float64).requires_grad_(true);
}

// [N, H, W, C] permuted to [N, C, H, W]: a channels-last layout.
Tensor channels_last(const Tensor& nhwc) { return nhwc.permute({0, 3, 1, 2}); }

}  // namespace

ADJOINT_REGISTER_SAMPLES(pool) {
  // ---- max_pool2d ----
  using V = std::vector<int64_t>;
  auto mp2 = [](V k, V s, V p, V d, bool ceil) {
    return SampleFn([=](const Inputs& x) { return max_pool2d(x[0], k, s, p, d, ceil); });
  };
  sink.add("pool/max_pool2d/k2", mp2({2}, {}, {0}, {1}, false), {distinct64({2, 3, 6, 6})});
  sink.add("pool/max_pool2d/k3_s2_p1_odd", mp2({3}, {2}, {1}, {1}, false),
           {distinct64({1, 2, 7, 5})});
  sink.add("pool/max_pool2d/rect_kernel", mp2({2, 3}, {1, 2}, {1, 0}, {1}, false),
           {distinct64({2, 1, 5, 7})});
  sink.add("pool/max_pool2d/dilation", mp2({3}, {1}, {1}, {2}, false), {distinct64({1, 1, 8, 9})});
  sink.add("pool/max_pool2d/ceil_mode", mp2({3}, {2}, {0}, {1}, true), {distinct64({1, 2, 6, 8})});
  sink.add("pool/max_pool2d/ceil_mode_padding", mp2({3}, {2}, {1}, {1}, true),
           {distinct64({2, 1, 6, 6})});
  sink.add("pool/max_pool2d/unbatched", mp2({2}, {1}, {0}, {1}, false), {distinct64({3, 4, 5})});
  sink.add("pool/max_pool2d/noncontiguous", mp2({2}, {2}, {0}, {1}, false),
           {distinct64({1, 2, 7, 6}).transpose(-1, -2)});
  sink.add("pool/max_pool2d/channels_last", mp2({3}, {2}, {1}, {1}, false),
           {channels_last(distinct64({2, 5, 5, 3}))});
  sink.add("pool/max_pool2d/wide_row", mp2({2}, {1}, {0}, {1}, false),
           {distinct64({1, 1, 3, 40})});  // the vectorised interior with a tail
  sink.add("pool/max_pool2d/empty_batch", mp2({2}, {}, {0}, {1}, false), {randn64({0, 2, 4, 4})});
  sink.add("pool/max_pool2d/with_indices",
           [](const Inputs& x) {
             auto [v, i] = max_pool2d_with_indices(x[0], {3}, {2}, {1});
             // the indices as a value: v plus 0 * i keeps them in the graph's forward
             return v + i.to(v.dtype()) * 0;
           },
           {distinct64({1, 2, 5, 5})});

  // ---- max_pool1d ----
  sink.add("pool/max_pool1d/k3_s2_p1", [](const Inputs& x) { return max_pool1d(x[0], 3, 2, 1); },
           {distinct64({2, 3, 9})});
  sink.add("pool/max_pool1d/dilation_ceil",
           [](const Inputs& x) { return max_pool1d(x[0], 2, 2, 1, 2, true); },
           {distinct64({1, 2, 8})});
  sink.add("pool/max_pool1d/unbatched", [](const Inputs& x) { return max_pool1d(x[0], 2); },
           {distinct64({3, 7})});

  // ---- avg_pool2d ----
  auto ap2 = [](V k, V s, V p, bool ceil, bool include, std::optional<int64_t> div) {
    return SampleFn([=](const Inputs& x) { return avg_pool2d(x[0], k, s, p, ceil, include, div); });
  };
  sink.add("pool/avg_pool2d/k2", ap2({2}, {}, {0}, false, true, {}), {randn64({2, 3, 6, 6})});
  sink.add("pool/avg_pool2d/k3_s2_p1", ap2({3}, {2}, {1}, false, true, {}),
           {randn64({1, 2, 7, 5})});
  sink.add("pool/avg_pool2d/exclude_pad", ap2({3}, {2}, {1}, false, false, {}),
           {randn64({1, 2, 7, 5})});
  sink.add("pool/avg_pool2d/ceil_mode", ap2({3}, {2}, {1}, true, true, {}),
           {randn64({2, 1, 6, 6})});
  sink.add("pool/avg_pool2d/ceil_mode_exclude_pad", ap2({2, 3}, {2}, {1}, true, false, {}),
           {randn64({1, 2, 5, 8})});
  sink.add("pool/avg_pool2d/divisor_override", ap2({2}, {1}, {1}, false, true, 3),
           {randn64({1, 1, 4, 5})});
  sink.add("pool/avg_pool2d/unbatched", ap2({2}, {1}, {0}, false, true, {}), {randn64({3, 4, 5})});
  sink.add("pool/avg_pool2d/noncontiguous", ap2({2}, {2}, {0}, false, true, {}),
           {randn64({1, 2, 7, 6}).transpose(-1, -2)});
  sink.add("pool/avg_pool2d/channels_last", ap2({3}, {2}, {1}, false, true, {}),
           {channels_last(randn64({2, 5, 5, 3}))});
  sink.add("pool/avg_pool2d/wide_row", ap2({3}, {1}, {0}, false, true, {}),
           {randn64({1, 1, 3, 40})});
  sink.add("pool/avg_pool2d/empty_batch", ap2({2}, {}, {0}, false, true, {}),
           {randn64({0, 2, 4, 4})});

  // ---- avg_pool1d ----
  sink.add("pool/avg_pool1d/k3_s2_p1", [](const Inputs& x) { return avg_pool1d(x[0], 3, 2, 1); },
           {randn64({2, 3, 9})});
  sink.add("pool/avg_pool1d/ceil_exclude_pad",
           [](const Inputs& x) { return avg_pool1d(x[0], 2, 2, 1, true, false); },
           {randn64({1, 2, 8})});
  sink.add("pool/avg_pool1d/unbatched", [](const Inputs& x) { return avg_pool1d(x[0], 2); },
           {randn64({3, 7})});

  // ---- adaptive pooling ----
  auto aap = [](V out) {
    return SampleFn([=](const Inputs& x) { return adaptive_avg_pool2d(x[0], out); });
  };
  sink.add("pool/adaptive_avg_pool2d/uneven", aap({3, 2}), {randn64({2, 3, 7, 5})});
  sink.add("pool/adaptive_avg_pool2d/global", aap({1}), {randn64({2, 3, 4, 5})});
  sink.add("pool/adaptive_avg_pool2d/larger_than_input", aap({4, 6}), {randn64({1, 1, 3, 4})});
  sink.add("pool/adaptive_avg_pool2d/unbatched", aap({2}), {randn64({3, 5, 5})});
  // Every output column of a width-1 input shares its window: vector lanes must not collide.
  sink.add("pool/adaptive_avg_pool2d/one_column_to_many", aap({3, 20}), {randn64({1, 2, 2, 1})});
  sink.add("pool/adaptive_avg_pool2d/channels_last", aap({2, 3}),
           {channels_last(randn64({1, 5, 7, 2}))});
  sink.add("pool/adaptive_avg_pool2d/empty_batch", aap({2}), {randn64({0, 2, 4, 4})});
  auto amp = [](V out) {
    return SampleFn([=](const Inputs& x) { return adaptive_max_pool2d(x[0], out); });
  };
  sink.add("pool/adaptive_max_pool2d/uneven", amp({3, 2}), {distinct64({2, 3, 7, 5})});
  sink.add("pool/adaptive_max_pool2d/global", amp({1}), {distinct64({1, 2, 4, 5})});
  sink.add("pool/adaptive_max_pool2d/unbatched", amp({2, 3}), {distinct64({2, 5, 7})});
  sink.add("pool/adaptive_max_pool2d/noncontiguous", amp({2}),
           {distinct64({1, 2, 6, 5}).transpose(-1, -2)});

  // ---- the gradients' transposes, as ops of their own ----
  {
    const Tensor idx =
        constant(max_pool2d_with_indices(distinct64({2, 2, 7, 5}), {3}, {2}, {1}).second);
    sink.add("pool/max_pool2d_backward/k3_s2_p1",
             [](const Inputs& x) {
               return max_pool2d_backward(x[0], x[1], Shape{7, 5});
             },
             {randn64(idx.shape()), idx});
    const Tensor overlap =
        constant(max_pool2d_with_indices(distinct64({3, 5, 6}), {3}, {1}).second);
    sink.add("pool/max_pool2d_backward/overlapping_unbatched",
             [](const Inputs& x) {
               return max_pool2d_backward(x[0], x[1], Shape{5, 6});
             },
             {randn64(overlap.shape()), overlap});
  }
  sink.add("pool/avg_pool2d_backward/k3_s2_p1_ceil",
           [](const Inputs& x) {
             return avg_pool2d_backward(x[0], Shape{1, 2, 7, 5}, {3}, {2}, {1}, true, false);
           },
           {randn64({1, 2, 4, 3})});
  sink.add("pool/avg_pool2d_backward/divisor_override",
           [](const Inputs& x) {
             return avg_pool2d_backward(x[0], Shape{2, 4, 5}, {2}, {1}, {1}, false, true, 3);
           },
           {randn64({2, 5, 6})});
}
