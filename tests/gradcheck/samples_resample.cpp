// Gradcheck samples for the resampling ops (src/ops/resample.cpp), named "resample/<op>/<case>":
// pad in every mode (with negative pads that crop), interpolate (nearest and the linear modes,
// align_corners on and off, by size and by scale factor, up and down), pixel_shuffle and
// pixel_unshuffle, and unfold/fold with odd sizes, strides, dilations and padding, batched,
// unbatched, with an empty batch and on non-contiguous inputs.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;
using V = std::vector<int64_t>;

SampleFn pad_fn(V p, PadMode mode, double value = 0) {
  return [=](const Inputs& x) { return pad(x[0], p, mode, value); };
}

SampleFn interp(InterpolateOptions o) {
  return [=](const Inputs& x) { return interpolate(x[0], o); };
}

InterpolateOptions by_size(V size, InterpolateMode mode, std::optional<bool> align = {}) {
  InterpolateOptions o;
  o.size = std::move(size);
  o.mode = mode;
  o.align_corners = align;
  return o;
}

InterpolateOptions by_scale(std::vector<double> scale, InterpolateMode mode,
                            std::optional<bool> align = {}) {
  InterpolateOptions o;
  o.scale_factor = std::move(scale);
  o.mode = mode;
  o.align_corners = align;
  return o;
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(resample) {
  // ---- pad ----
  sink.add("resample/pad/constant_1d", pad_fn({1, 2}, PadMode::Constant), {randn64({2, 3, 4})});
  sink.add("resample/pad/constant_2d_value", pad_fn({1, 0, 2, 1}, PadMode::Constant, 0.5),
           {randn64({1, 2, 3, 4})});
  sink.add("resample/pad/constant_negative", pad_fn({-1, 2, 0, -1}, PadMode::Constant),
           {randn64({2, 3, 4})});
  sink.add("resample/pad/constant_all_dims", pad_fn({1, 1, 0, 2, 1, 0}, PadMode::Constant),
           {randn64({2, 3, 2})});
  sink.add("resample/pad/constant_empty_batch", pad_fn({1, 1}, PadMode::Constant),
           {randn64({0, 3, 4})});
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const std::string m = mode == PadMode::Reflect     ? "reflect"
                          : mode == PadMode::Replicate ? "replicate"
                                                       : "circular";
    sink.add("resample/pad/" + m + "_1d", pad_fn({2, 1}, mode), {randn64({2, 3, 5})});
    sink.add("resample/pad/" + m + "_2d", pad_fn({1, 2, 2, 1}, mode), {randn64({1, 2, 4, 5})});
    sink.add("resample/pad/" + m + "_3d", pad_fn({1, 1, 0, 1, 1, 0}, mode),
             {randn64({2, 3, 3, 4})});
    sink.add("resample/pad/" + m + "_negative", pad_fn({-1, 2}, mode), {randn64({2, 5})});
    sink.add("resample/pad/" + m + "_noncontiguous", pad_fn({1, 2, 1, 1}, mode),
             {randn64({1, 2, 5, 4}).transpose(-1, -2)});
  }

  // ---- interpolate ----
  using M = InterpolateMode;
  sink.add("resample/interpolate/nearest_size", interp(by_size({5, 7}, M::Nearest)),
           {randn64({1, 2, 3, 4})});
  sink.add("resample/interpolate/nearest_down", interp(by_size({2, 3}, M::Nearest)),
           {randn64({2, 1, 5, 7})});
  sink.add("resample/interpolate/nearest_scale2", interp(by_scale({2}, M::Nearest)),
           {randn64({1, 2, 3, 3})});
  sink.add("resample/interpolate/nearest_1d", interp(by_scale({1.5}, M::Nearest)),
           {randn64({2, 2, 5})});
  for (bool align : {false, true}) {
    const std::string a = align ? "_align" : "";
    sink.add("resample/interpolate/bilinear_up" + a, interp(by_size({5, 7}, M::Bilinear, align)),
             {randn64({1, 2, 3, 4})});
    sink.add("resample/interpolate/bilinear_down" + a, interp(by_size({2, 3}, M::Bilinear, align)),
             {randn64({2, 1, 5, 7})});
    sink.add("resample/interpolate/bilinear_scale" + a,
             interp(by_scale({1.5, 2}, M::Bilinear, align)), {randn64({1, 1, 3, 3})});
    sink.add("resample/interpolate/linear" + a, interp(by_size({7}, M::Linear, align)),
             {randn64({2, 3, 4})});
  }
  sink.add("resample/interpolate/bilinear_to_one", interp(by_size({1, 3}, M::Bilinear, true)),
           {randn64({1, 1, 4, 4})});
  sink.add("resample/interpolate/bilinear_channels_last", interp(by_size({4, 5}, M::Bilinear)),
           {randn64({1, 3, 4, 2}).permute({0, 3, 1, 2})});
  sink.add("resample/interpolate/bilinear_empty_batch", interp(by_size({4, 5}, M::Bilinear)),
           {randn64({0, 2, 3, 3})});

  // ---- pixel_shuffle ----
  sink.add("resample/pixel_shuffle/r2", [](const Inputs& x) { return pixel_shuffle(x[0], 2); },
           {randn64({1, 8, 2, 3})});
  sink.add("resample/pixel_shuffle/r3_unbatched",
           [](const Inputs& x) { return pixel_shuffle(x[0], 3); }, {randn64({9, 2, 1})});
  sink.add("resample/pixel_unshuffle/r2", [](const Inputs& x) { return pixel_unshuffle(x[0], 2); },
           {randn64({2, 1, 4, 6})});

  // ---- unfold / fold ----
  sink.add("resample/unfold/k2", [](const Inputs& x) { return unfold(x[0], {2}); },
           {randn64({2, 3, 4, 5})});
  sink.add("resample/unfold/all_options",
           [](const Inputs& x) {
             return unfold(x[0], {2, 3}, {1, 2}, {1, 0}, {2, 1});
           },
           {randn64({2, 3, 5, 7})});
  sink.add("resample/unfold/unbatched",
           [](const Inputs& x) { return unfold(x[0], {3}, {1}, {1}, {2}); }, {randn64({1, 5, 5})});
  sink.add("resample/unfold/noncontiguous", [](const Inputs& x) { return unfold(x[0], {2}); },
           {randn64({1, 2, 5, 4}).transpose(-1, -2)});
  sink.add("resample/unfold/empty_batch", [](const Inputs& x) { return unfold(x[0], {2}); },
           {randn64({0, 2, 3, 3})});
  sink.add("resample/fold/overlapping",
           [](const Inputs& x) {
             return fold(x[0], {4, 5}, {2});
           },
           {randn64({2, 12, 12})});  // C = 3, 3 x 4 blocks
  sink.add("resample/fold/all_options",
           [](const Inputs& x) {
             return fold(x[0], {5, 7}, {2, 3}, {1, 2}, {1, 0}, {2, 1});
           },
           {randn64({1, 12, 9})});  // C = 2, 3 x 3 blocks
  sink.add("resample/fold/unbatched",
           [](const Inputs& x) {
             return fold(x[0], {3, 3}, {2});
           },
           {randn64({4, 4})});
}
