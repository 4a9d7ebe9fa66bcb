// Gradcheck samples for the convolutions (src/ops/conv.cpp), named "conv/<op>/<case>": odd
// sizes, strides, dilations, groups and depthwise, "same" with an even kernel (padding on one
// side), "valid", batch 1, one channel, an empty batch, unbatched inputs, non-contiguous and
// channels-last-strided inputs, with and without bias; the transposed convolutions with
// output_padding; conv3d once. Shapes stay small: each sample runs gradgradcheck in float64
// and several transforms.
#include "ops/conv_geometry.h"
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

// A channels-last [N, C, H, W] leaf view: its memory is [N, H, W, C].
Tensor channels_last(int64_t n, int64_t c, int64_t h, int64_t w) {
  return randn64({n, h, w, c}).permute({0, 3, 1, 2});
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(conv) {
  // ---- conv2d ----
  auto c2 = [](ConvArg stride, ConvPadding padding, ConvArg dilation, int64_t groups) {
    return SampleFn([=](const Inputs& x) {
      return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding, dilation, groups);
    });
  };
  sink.add("conv/conv2d/basic", c2(1, 0, 1, 1),
           {randn64({2, 3, 5, 4}), randn64({4, 3, 3, 2}), randn64({4})});
  sink.add("conv/conv2d/no_bias", c2(1, 0, 1, 1), {randn64({2, 2, 4, 5}), randn64({3, 2, 2, 3})});
  sink.add("conv/conv2d/stride_padding", c2({2, 3}, {1, 2}, 1, 1),
           {randn64({2, 2, 7, 6}), randn64({3, 2, 3, 3}), randn64({3})});
  sink.add("conv/conv2d/dilation", c2(1, 1, {2, 1}, 1),
           {randn64({1, 2, 7, 5}), randn64({2, 2, 3, 2}), randn64({2})});
  sink.add("conv/conv2d/groups", c2(1, 1, 1, 2),
           {randn64({2, 4, 5, 5}), randn64({6, 2, 3, 3}), randn64({6})});
  sink.add("conv/conv2d/depthwise", c2(2, 1, 1, 3),
           {randn64({2, 3, 6, 5}), randn64({6, 1, 3, 3}), randn64({6})});
  sink.add("conv/conv2d/same_even_kernel", c2(1, "same", 1, 1),
           {randn64({1, 2, 5, 4}), randn64({2, 2, 2, 4}), randn64({2})});
  sink.add("conv/conv2d/same_dilated", c2(1, "same", 2, 1),
           {randn64({2, 1, 6, 5}), randn64({2, 1, 3, 2})});
  sink.add("conv/conv2d/valid", c2(1, "valid", 1, 1),
           {randn64({2, 2, 4, 4}), randn64({2, 2, 3, 3}), randn64({2})});
  sink.add("conv/conv2d/batch1_channel1", c2(1, 1, 1, 1),
           {randn64({1, 1, 5, 5}), randn64({1, 1, 3, 3}), randn64({1})});
  sink.add("conv/conv2d/empty_batch", c2(1, 1, 1, 1),
           {randn64({0, 2, 4, 4}), randn64({3, 2, 3, 3}), randn64({3})});
  sink.add("conv/conv2d/unbatched", c2(1, 1, 1, 1),
           {randn64({2, 4, 5}), randn64({3, 2, 3, 3}), randn64({3})});
  sink.add("conv/conv2d/noncontiguous", c2(1, 0, 1, 1),
           {randn64({2, 6, 6, 5}).transpose(2, 3).slice(1, 0, 6, 2),
            randn64({4, 3, 3, 3}).slice(0, 0, 4, 2), randn64({4}).slice(0, 0, 4, 2)});
  sink.add("conv/conv2d/channels_last", c2(1, 1, 1, 1),
           {channels_last(2, 3, 5, 4), randn64({3, 3, 3, 3}), randn64({3})});
  sink.add("conv/conv2d/channels_last_strided", c2({2, 1}, 0, 1, 1),
           {channels_last(1, 4, 6, 5), randn64({2, 4, 2, 2})});
  sink.add("conv/conv2d/kernel1x1_stride2", c2(2, 0, 1, 1),
           {randn64({2, 3, 5, 5}), randn64({4, 3, 1, 1}), randn64({4})});

  // ---- conv1d ----
  auto c1 = [](ConvArg stride, ConvPadding padding, ConvArg dilation, int64_t groups) {
    return SampleFn([=](const Inputs& x) {
      return conv1d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding, dilation, groups);
    });
  };
  sink.add("conv/conv1d/basic", c1(1, 0, 1, 1),
           {randn64({2, 3, 7}), randn64({4, 3, 3}), randn64({4})});
  sink.add("conv/conv1d/stride_dilation_padding", c1(2, 2, 2, 1),
           {randn64({2, 2, 9}), randn64({3, 2, 3})});
  sink.add("conv/conv1d/groups", c1(1, 1, 1, 2),
           {randn64({1, 4, 6}), randn64({2, 2, 3}), randn64({2})});
  sink.add("conv/conv1d/same_even", c1(1, "same", 1, 1), {randn64({2, 1, 6}), randn64({2, 1, 4})});
  sink.add("conv/conv1d/unbatched", c1(1, 0, 1, 1), {randn64({2, 5}), randn64({3, 2, 2})});
  sink.add("conv/conv1d/empty_batch", c1(1, 0, 1, 1), {randn64({0, 2, 5}), randn64({3, 2, 2})});
  sink.add("conv/conv1d/noncontiguous", c1(1, 0, 1, 1),
           {randn64({2, 7, 3}).transpose(1, 2), randn64({2, 3, 3})});

  // ---- conv3d ----
  sink.add("conv/conv3d/basic",
           [](const Inputs& x) {
             return conv3d(x[0], x[1], x[2], {1, 2, 1}, 1);
           },
           {randn64({1, 2, 3, 4, 3}), randn64({2, 2, 2, 2, 2}), randn64({2})});

  // ---- conv_transpose2d ----
  auto t2 = [](ConvArg stride, ConvArg padding, ConvArg out_pad, int64_t groups, ConvArg dilation) {
    return SampleFn([=](const Inputs& x) {
      return conv_transpose2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding, out_pad,
                              groups, dilation);
    });
  };
  sink.add("conv/conv_transpose2d/basic", t2(1, 0, 0, 1, 1),
           {randn64({2, 3, 3, 4}), randn64({3, 2, 3, 2}), randn64({2})});
  sink.add("conv/conv_transpose2d/stride_output_padding", t2(2, 1, 1, 1, 1),
           {randn64({1, 2, 3, 3}), randn64({2, 3, 3, 3}), randn64({3})});
  sink.add("conv/conv_transpose2d/asymmetric", t2({2, 3}, {0, 1}, {1, 2}, 1, 1),
           {randn64({2, 2, 3, 2}), randn64({2, 2, 2, 3})});
  sink.add("conv/conv_transpose2d/groups_dilation", t2(1, 1, 0, 2, 2),
           {randn64({1, 4, 3, 3}), randn64({4, 1, 3, 2}), randn64({2})});
  sink.add("conv/conv_transpose2d/output_padding_by_dilation", t2(1, 0, 1, 1, 2),
           {randn64({1, 2, 3, 3}), randn64({2, 2, 2, 2})});
  sink.add("conv/conv_transpose2d/unbatched", t2(2, 0, 0, 1, 1),
           {randn64({2, 3, 2}), randn64({2, 2, 2, 2}), randn64({2})});
  sink.add("conv/conv_transpose2d/empty_batch", t2(1, 0, 0, 1, 1),
           {randn64({0, 2, 3, 3}), randn64({2, 1, 2, 2})});
  sink.add("conv/conv_transpose2d/channels_last", t2(2, 1, 1, 1, 1),
           {channels_last(1, 3, 3, 3), randn64({3, 2, 3, 3})});

  // ---- conv_transpose1d ----
  auto t1 = [](ConvArg stride, ConvArg padding, ConvArg out_pad, int64_t groups, ConvArg dilation) {
    return SampleFn([=](const Inputs& x) {
      return conv_transpose1d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding, out_pad,
                              groups, dilation);
    });
  };
  sink.add("conv/conv_transpose1d/basic", t1(1, 0, 0, 1, 1),
           {randn64({2, 3, 4}), randn64({3, 2, 3}), randn64({2})});
  sink.add("conv/conv_transpose1d/stride_padding_groups", t1(3, 1, 2, 2, 1),
           {randn64({1, 4, 3}), randn64({4, 2, 3}), randn64({4})});
  sink.add("conv/conv_transpose1d/noncontiguous", t1(2, 0, 1, 1, 2),
           {randn64({2, 4, 2}).transpose(1, 2), randn64({2, 2, 2})});

  // ---- conv_weight_grad(x, gy): the weight gradient as an op of its own ----
  auto wg = [](detail::ConvAttrs a, std::vector<int64_t> kernel) {
    return SampleFn(
        [=](const Inputs& x) { return detail::apply_conv_weight_grad(a, kernel, x[0], x[1]); });
  };
  sink.add("conv/conv_weight_grad/strided_grouped", wg({{2, 1}, {1, 0}, {1, 0}, {1, 2}, 2}, {3, 2}),
           {randn64({2, 4, 5, 6}), randn64({2, 4, 3, 4})});
  sink.add("conv/conv_weight_grad/one_side_padding", wg({{1}, {0}, {1}, {1}, 1}, {2}),
           {randn64({3, 2, 5}), randn64({3, 3, 5})});
  sink.add("conv/conv_weight_grad/channels_last", wg({{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1}, {2, 2}),
           {channels_last(2, 3, 4, 3), channels_last(2, 2, 3, 2)});
}
