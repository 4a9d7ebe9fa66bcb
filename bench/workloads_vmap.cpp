// The vmap workload (issue: one dispatch stack, vmap on it).
//   per-sample-grads  the gradient of each of 64 examples' own cross-entropy through a
//                     256-256-256-10 MLP, for all parameters: vmap(grad(loss)) over the batch,
//                     beside the loop of 64 forward + backward passes that torch-ref (and a
//                     C++ user without vmap) runs, and one plain gradient of the batch loss.
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "mlp_model.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

void per_sample_grads(const Opts& o, Json& j) {
  constexpr int kIn = 256, kHidden = 256, kOut = 10, kBatch = 64;
  adjoint::Generator gen(0);
  const Linear fc1(kIn, kHidden, gen), fc2(kHidden, kHidden, gen), fc3(kHidden, kOut, gen);
  std::vector<Tensor> params = {fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias};
  const Tensor x = adjoint::randn({kBatch, kIn}, {}, &gen);
  const Tensor labels = adjoint::randint(0, kOut, {kBatch}, &gen);
  // args: x [rows, 256], labels [rows], then the six parameters.
  auto loss_of = [](const std::vector<Tensor>& a) {
    Tensor h = adjoint::relu(adjoint::linear(a[0], a[2], a[3]));
    h = adjoint::relu(adjoint::linear(h, a[4], a[5]));
    return adjoint::cross_entropy(adjoint::linear(h, a[6], a[7]), a[1]);
  };
  // One example: x [256] and its label [] as a batch of one row.
  auto example_loss = [&](const std::vector<Tensor>& a) {
    std::vector<Tensor> b = a;
    b[0] = a[0].unsqueeze(0);
    b[1] = a[1].unsqueeze(0);
    return loss_of(b);
  };
  const std::vector<int> param_args = {2, 3, 4, 5, 6, 7};
  auto per_example_grad = adjoint::grad(example_loss, param_args);
  std::vector<adjoint::BatchDim> in_dims = {0, 0};
  for (std::size_t i = 0; i < params.size(); ++i) in_dims.push_back(adjoint::no_batch);
  auto psg_fn = adjoint::vmap(per_example_grad, in_dims);

  std::vector<Tensor> args = {x, labels};
  for (const Tensor& p : params) args.push_back(p.detach());

  Samples plain, psg, loop;
  std::vector<Tensor> last_vmap, last_loop;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = Clock::now();
    {  // one plain gradient of the batch-mean loss, on the leaf parameters
      std::vector<Tensor> all = {x, labels};
      all.insert(all.end(), params.begin(), params.end());
      std::vector<Tensor> g = adjoint::autograd::grad({loss_of(all)}, params);
    }
    const auto t1 = Clock::now();
    std::vector<Tensor> gv = psg_fn(args);
    const auto t2 = Clock::now();
    std::vector<std::vector<Tensor>> per(params.size());
    for (int b = 0; b < kBatch; ++b) {
      std::vector<Tensor> one = args;
      one[0] = x.select(0, b);
      one[1] = labels.select(0, b);
      std::vector<Tensor> g = per_example_grad(one);
      for (std::size_t i = 0; i < g.size(); ++i) per[i].push_back(g[i]);
    }
    std::vector<Tensor> gl;
    for (auto& v : per) gl.push_back(adjoint::stack(v, 0));
    const auto t3 = Clock::now();
    if (s >= o.warmup) {
      plain.add(ms(t0, t1));
      psg.add(ms(t1, t2));
      loop.add(ms(t2, t3));
    }
    last_vmap = gv;
    last_loop = gl;
  }
  double sq = 0, diff = 0;
  for (std::size_t i = 0; i < last_vmap.size(); ++i) {
    sq += (last_vmap[i] * last_vmap[i]).sum().item<double>();
    diff = std::max(diff, (last_vmap[i] - last_loop[i]).abs().max().item<double>());
  }
  common_fields(j, o, psg);
  j.integer("batch", kBatch);
  j.integer("params", count_params(params));
  j.num("plain_grad_ms", plain.median());
  j.num("psg_over_grad", psg.median() / plain.median());
  j.num("psg_norm", std::sqrt(sq));
  j.num("loop_ms_per_step", loop.median());
  j.num("vmap_over_loop", psg.median() / loop.median());
  j.num("max_abs_diff_vs_loop", diff);
}

}  // namespace

static RegisterWorkload register_per_sample_grads{"per-sample-grads", per_sample_grads, 20};

}  // namespace bench
