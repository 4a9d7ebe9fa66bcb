// The `cnn` workload of ../shared/bench/README.md: a training step of a small ResNet (stem
// 1->32, basic blocks of 32, 64 and 128 channels, max pool, a stride-2 conv, global average
// pool, Linear(128, 10)) on [64, 1, 28, 28], with batch norm in training mode and SGD with
// momentum and weight decay. --precision bf16 runs the forward under autocast; --channels-last
// stores X and the conv weights channels-last, as torch-ref's model.to(channels_last).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "backend/conv_kernels.h"  // conv_path_name, for conv_impl
#include "gemm_bound.h"
#include "optimizer_step.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

constexpr int64_t kBatch = 64, kClasses = 10;

// A dense NHWC view of x [N, C, H, W] (PyTorch's channels_last).
Tensor channels_last(const Tensor& x) {
  return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

// U(-bound, bound) as libtorch's default init draws it (the values differ, the work does not).
Tensor uniform(const adjoint::Shape& shape, double bound, adjoint::Generator& gen) {
  return adjoint::rand(shape, {}, &gen) * (2 * bound) - bound;
}

struct Cnn {
  std::vector<Tensor> params;  // every parameter, in model order
  std::vector<Tensor> conv_w;  // [cout, cin, 3, 3], no bias
  struct Bn {
    Tensor weight, bias, running_mean, running_var;
  };
  std::vector<Bn> bn;
  Tensor fc_w, fc_b;
  bool nhwc = false;  // --channels-last
  double macs = 0;    // multiply-adds of one forward, counted from the shapes

  Cnn(adjoint::Generator& gen, bool cl) : nhwc(cl) {
    const int64_t convs[9][2] = {{1, 32},  {32, 32},  {32, 32},   {32, 64},  {64, 64},
                                 {64, 64}, {64, 128}, {128, 128}, {128, 128}};
    for (const auto& c : convs) {
      Tensor w = uniform({c[1], c[0], 3, 3}, 1 / std::sqrt(9.0 * c[0]), gen).detach();
      if (cl) w = channels_last(w).detach();
      w.requires_grad_();
      conv_w.push_back(w);
      params.push_back(w);
      Bn b{adjoint::ones({c[1]}).requires_grad_(), adjoint::zeros({c[1]}).requires_grad_(),
           adjoint::zeros({c[1]}), adjoint::ones({c[1]})};
      params.push_back(b.weight);
      params.push_back(b.bias);
      bn.push_back(b);
    }
    fc_w = uniform({kClasses, 128}, 1 / std::sqrt(128.0), gen).requires_grad_();
    fc_b = uniform({kClasses}, 1 / std::sqrt(128.0), gen).requires_grad_();
    params.push_back(fc_w);
    params.push_back(fc_b);
  }

  // relu(bn_i(conv_i(x))), or bn_i(conv_i(x)) without the relu; counts the MACs.
  Tensor conv_bn(int i, const Tensor& x, int64_t stride, bool relu_after, bool count) {
    Tensor y = adjoint::conv2d(x, conv_w[i], {}, stride, 1);
    if (count) macs += static_cast<double>(y.numel()) * static_cast<double>(conv_w[i].size(1) * 9);
    y = adjoint::batch_norm(y, bn[i].running_mean, bn[i].running_var, bn[i].weight, bn[i].bias,
                            /*training=*/true, 0.1, 1e-5);
    return relu_after ? adjoint::relu(y) : y;
  }
  Tensor block(int i, const Tensor& x, bool count) {
    const Tensor h = conv_bn(i, x, 1, true, count);
    return adjoint::relu(x + conv_bn(i + 1, h, 1, false, count));
  }
  Tensor forward(const Tensor& X, bool count) {
    Tensor x = conv_bn(0, X, 1, true, count);  // [B, 32, 28, 28]
    // torch-ref's stem output is NCHW (one input channel: X is both layouts) and its first
    // block's conv returns NHWC because its weight is channels-last; adjoint's convolutions
    // follow the input's layout instead, so the switch to NHWC is made here, once.
    if (nhwc) x = channels_last(x);
    x = block(1, x, count);
    x = adjoint::max_pool2d(x, {2});  // [B, 32, 14, 14]
    x = conv_bn(3, x, 1, true, count);
    x = block(4, x, count);
    x = conv_bn(6, x, 2, true, count);  // [B, 128, 7, 7]
    x = block(7, x, count);
    x = adjoint::flatten(adjoint::adaptive_avg_pool2d(x, {1}), 1);
    if (count) macs += static_cast<double>(kBatch * 128 * kClasses);
    return adjoint::linear(x, fc_w, fc_b);
  }
};

void cnn(const Opts& o, Json& j) {
  adjoint::Generator gen(0);
  Cnn model(gen, o.channels_last);
  Tensor X = adjoint::randn({kBatch, 1, 28, 28}, {}, &gen);
  if (o.channels_last) X = channels_last(X);
  const Tensor labels = adjoint::randint(0, kClasses, {kBatch}, &gen);
  adjoint::optim::SGD opt(model.params, {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});

  StepTimes times;
  auto run_step = [&](int s, bool timed) {
    optimizer_step(
        o, opt,
        [&](int step) { return adjoint::cross_entropy(model.forward(X, step == 0), labels); }, s,
        timed, times);
  };
  for (int s = 0; s < o.warmup + o.steps; ++s) run_step(s, s >= o.warmup);
  if (o.verbose) {  // where one step's time goes, per op, to stderr
    adjoint::Profiler prof;
    {
      std::optional<adjoint::Autocast> amp;
      autocast_forward(amp, o);
      Tensor loss = adjoint::cross_entropy(model.forward(X, false), labels);
      loss.backward();
    }
    prof.stop();
    std::fprintf(stderr, "%s\n", prof.table(30).c_str());
  }
  int64_t n_params = 0;
  for (const Tensor& p : model.params) n_params += p.numel();
  // 2 flops per MAC forward, twice that backward (the input and the weight gradients).
  const double flops = 6.0 * model.macs;
  common_fields(j, o, times.total);
  report_gemm_bound(j, times.total.median(), [&] { run_step(1, false); });
  j.str("precision", o.precision);
  j.str("memory_format", o.channels_last ? "channels_last" : "contiguous");
  j.num("fwd_ms", times.fwd.median());
  j.num("bwd_ms", times.bwd.median());
  j.num("opt_ms", times.step.median());
  j.integer("params", n_params);
  j.num("macs_per_forward", model.macs);
  j.num("flops_per_step", flops);
  j.num("gflops", flops / (times.total.median() * 1e6));
  // The path adjoint's conv2d takes for the convolutions' dtype ("onednn:<isa>" or "reference").
  j.str("conv_impl",
        adjoint::kernels::conv_path_name(o.precision == "bf16" ? adjoint::DType::BFloat16
                                                               : adjoint::DType::Float32));
  j.num("first_loss", times.first_loss);
  j.num("loss", times.last_loss.item<double>());
}

static RegisterWorkload register_cnn{"cnn", cnn, 20};

}  // namespace
}  // namespace bench
