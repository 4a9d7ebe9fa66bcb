// gradcheck samples for the channel normalisations (src/ops/batch_norm.cpp, group_norm.cpp):
// batch_norm with batch statistics (its fused op and the fused batch_norm_backward in its
// graph) and with running statistics (evaluation, differentiable in them too), batch_norm_stats,
// batch_norm_backward itself, group_norm and instance_norm. Inputs [N, C], [N, C, L] and
// [N, C, H, W] of odd sizes, batch 1 where PyTorch allows it (not training with one value per
// channel), one channel, non-contiguous and channels-last views, with and without the affine
// parameters, and an empty batch. The samples that would update running statistics are not here
// (a sample is a function of its inputs); tests/ops/batch_norm_test.cpp checks the update.
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

// A [N, C, H, W] sample whose memory is channels-last ([N, H, W, C] permuted).
Tensor channels_last(int64_t n, int64_t c, int64_t h, int64_t w) {
  return randn64({n, h, w, c}).permute({0, 3, 1, 2});
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(norm2d) {
  // ---- batch_norm with batch statistics ----
  auto train = [](const Inputs& x) {
    return batch_norm(x[0], {}, {}, x.size() > 1 ? x[1] : Tensor(), x.size() > 2 ? x[2] : Tensor(),
                      true);
  };
  sink.add("norm2d/batch_norm/train_2d", train, {randn64({4, 3}), randn64({3}), randn64({3})});
  sink.add("norm2d/batch_norm/train_3d_no_affine", train, {randn64({3, 2, 5})});
  sink.add("norm2d/batch_norm/train_4d_weight_only", train, {randn64({2, 3, 3, 5}), randn64({3})});
  sink.add("norm2d/batch_norm/train_bias_only",
           [](const Inputs& x) { return batch_norm(x[0], {}, {}, {}, x[1], true); },
           {randn64({3, 2, 3}), randn64({2})});
  sink.add("norm2d/batch_norm/train_batch1", train,
           {randn64({1, 3, 5}), randn64({3}), randn64({3})});
  sink.add("norm2d/batch_norm/train_channels1", train,
           {randn64({4, 1, 3}), randn64({1}), randn64({1})});
  sink.add("norm2d/batch_norm/train_noncontiguous", train,
           {randn64({4, 3, 2}).permute({2, 1, 0}), randn64({3}), randn64({3})});
  sink.add("norm2d/batch_norm/train_channels_last", train,
           {channels_last(2, 3, 3, 5), randn64({3}), randn64({3})});
  sink.add("norm2d/batch_norm/train_channels_last_c17", train,
           {channels_last(1, 17, 2, 3), randn64({17}), randn64({17})});
  sink.add("norm2d/batch_norm/train_empty_batch", train,
           {randn64({0, 3, 4}), randn64({3}), randn64({3})});
  sink.add("norm2d/batch_norm/train_eps",
           [](const Inputs& x) { return batch_norm(x[0], {}, {}, x[1], x[2], true, 0.1, 0.5); },
           {randn64({3, 2, 3}), randn64({2}), randn64({2})});
  sink.add("norm2d/batch_norm/constant_input", train,
           {constant(randn64({3, 2, 3})), randn64({2}), randn64({2})});
  // Without running statistics, evaluation normalises with the batch's too.
  sink.add("norm2d/batch_norm/no_running_stats_eval",
           [](const Inputs& x) { return batch_norm(x[0], {}, {}, x[1], x[2], false); },
           {randn64({3, 2, 3}), randn64({2}), randn64({2})});

  // ---- batch_norm with running statistics (evaluation) ----
  auto eval = [](const Inputs& x) {
    return batch_norm(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(),
                      x.size() > 4 ? x[4] : Tensor(), false);
  };
  sink.add("norm2d/batch_norm/eval_3d", eval,
           {randn64({3, 2, 4}), randn64({2}), uniform64({2}, 0.5, 2), randn64({2}), randn64({2})});
  sink.add("norm2d/batch_norm/eval_batch1_2d", eval,
           {randn64({1, 3}), constant(randn64({3})), constant(uniform64({3}, 0.5, 2)), randn64({3}),
            randn64({3})});
  sink.add("norm2d/batch_norm/eval_channels_last_no_affine", eval,
           {channels_last(2, 3, 2, 3), randn64({3}), uniform64({3}, 0.5, 2)});
  sink.add("norm2d/batch_norm/eval_channels_last", eval,
           {channels_last(2, 3, 2, 3), randn64({3}), uniform64({3}, 0.5, 2), randn64({3}),
            randn64({3})});
  sink.add("norm2d/batch_norm/eval_channels1", eval,
           {randn64({2, 1, 3}), randn64({1}), uniform64({1}, 0.5, 2), randn64({1}), randn64({1})});
  sink.add("norm2d/batch_norm/eval_empty_batch", eval,
           {randn64({0, 2, 3}), randn64({2}), uniform64({2}, 0.5, 2), randn64({2}), randn64({2})});

  // ---- batch_norm_stats and batch_norm_backward ----
  auto stats = [](const Inputs& x) {
    const BatchNormStats s = batch_norm_stats(x[0]);
    return cat({s.mean, s.var});
  };
  sink.add("norm2d/batch_norm_stats/3d", stats, {randn64({3, 2, 4})});
  sink.add("norm2d/batch_norm_stats/2d", stats, {randn64({5, 3})});
  sink.add("norm2d/batch_norm_stats/channels_last", stats, {channels_last(2, 3, 2, 2)});
  auto backward = [](const Inputs& x) {
    return batch_norm_backward(x[0], x[1], x.size() > 4 ? x[4] : Tensor(), x[2], x[3]);
  };
  sink.add("norm2d/batch_norm_backward/weight", backward,
           {randn64({3, 2, 4}), randn64({3, 2, 4}), randn64({2}), uniform64({2}, 0.5, 1.5),
            randn64({2})});
  sink.add("norm2d/batch_norm_backward/channels_last", backward,
           {channels_last(2, 3, 2, 2), channels_last(2, 3, 2, 2), randn64({3}),
            uniform64({3}, 0.5, 1.5), randn64({3})});
  sink.add("norm2d/batch_norm_backward/no_weight", backward,
           {randn64({2, 3, 2, 2}), randn64({2, 3, 2, 2}), randn64({3}), uniform64({3}, 0.5, 1.5)});

  // ---- group_norm ----
  auto group = [](int64_t groups) {
    return [groups](const Inputs& x) {
      return group_norm(x[0], groups, x.size() > 1 ? x[1] : Tensor(),
                        x.size() > 2 ? x[2] : Tensor());
    };
  };
  sink.add("norm2d/group_norm/3d", group(2), {randn64({2, 4, 3}), randn64({4}), randn64({4})});
  sink.add("norm2d/group_norm/2d", group(2), {randn64({3, 8}), randn64({8}), randn64({8})});
  sink.add("norm2d/group_norm/4d_no_affine", group(4), {randn64({2, 4, 2, 3})});
  sink.add("norm2d/group_norm/one_group_batch1", group(1),
           {randn64({1, 3, 5}), randn64({3}), randn64({3})});
  sink.add("norm2d/group_norm/channels_last", group(3),
           {channels_last(2, 3, 2, 3), randn64({3}), randn64({3})});
  sink.add("norm2d/group_norm/empty_batch", group(2),
           {randn64({0, 4, 3}), randn64({4}), randn64({4})});

  // ---- instance_norm ----
  sink.add("norm2d/instance_norm/input_stats",
           [](const Inputs& x) { return instance_norm(x[0], {}, {}, x[1], x[2]); },
           {randn64({2, 3, 5}), randn64({3}), randn64({3})});
  sink.add("norm2d/instance_norm/4d_no_affine", [](const Inputs& x) { return instance_norm(x[0]); },
           {randn64({2, 2, 3, 3})});
  sink.add("norm2d/instance_norm/running_stats",
           [](const Inputs& x) { return instance_norm(x[0], x[1], x[2], x[3], x[4], false); },
           {randn64({2, 3, 4}), randn64({3}), uniform64({3}, 0.5, 2), randn64({3}), randn64({3})});
}
