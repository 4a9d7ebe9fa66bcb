// Workloads of the function transforms (issue: forward mode and transforms).
//   hvp       the MLP of `mlp`: a Hessian-vector product of its loss with respect to all
//             parameters, reverse over reverse exactly as torch-ref does it (grad with
//             create_graph, then grad of <g, v>), and forward over reverse through adjoint's
//             hvp transform (jvp of grad), each as a ratio to one plain gradient.
//   jacobian  f: R^n -> R^m, f(x) = tanh(W2 tanh(W1 x)) with 256 hidden units, its full
//             Jacobian by jacrev (m backward passes) and jacfwd (n forward passes) for
//             (n, m) = (8, 256), (64, 64), (256, 8): where each mode wins.
#include <algorithm>
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "mlp_model.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

double norm_of(const std::vector<Tensor>& ts) {
  double sq = 0;
  for (const Tensor& t : ts) sq += (t * t).sum().item<double>();
  return std::sqrt(sq);
}

void hvp(const Opts& o, Json& j) {
  constexpr int kBatch = 128;
  adjoint::Generator gen(0);
  const Linear fc1(784, 1024, gen), fc2(1024, 1024, gen), fc3(1024, 10, gen);
  const std::vector<Tensor> params = {fc1.weight, fc1.bias,   fc2.weight,
                                      fc2.bias,   fc3.weight, fc3.bias};
  const Tensor x = adjoint::randn({kBatch, 784}, {}, &gen);
  const Tensor labels = adjoint::randint(0, 10, {kBatch}, &gen);
  adjoint::Generator vgen(1);
  std::vector<Tensor> v;
  for (const Tensor& p : params) v.push_back(adjoint::randn(p.shape(), {}, &vgen));
  auto loss_of = [&](const std::vector<Tensor>& p) {
    Tensor h = adjoint::relu(adjoint::linear(x, p[0], p[1]));
    h = adjoint::relu(adjoint::linear(h, p[2], p[3]));
    return adjoint::cross_entropy(adjoint::linear(h, p[4], p[5]), labels);
  };
  const int n = o.warmup + o.steps;

  // Forward over reverse goes through the transform, on detached parameters as a user would.
  std::vector<Tensor> primals;
  for (const Tensor& p : params) primals.push_back(p.detach());

  // The three are interleaved step by step (plain gradient, reverse over reverse, forward
  // over reverse), so that the ratios hold up while the machine's speed drifts; torch-ref
  // measures its plain gradient in a phase of its own first.
  Samples pf, pb, ptotal, fwd, grad1, grad2, hvp_t, total, fr, fr_total;
  std::vector<Tensor> hv_rr, hv_fr;
  for (int s = 0; s < n; ++s) {
    const bool timed = s >= o.warmup;
    {  // plain gradient: forward + loss, grad(loss, params), teardown
      const auto t0 = Clock::now();
      Tensor loss = loss_of(params);
      const auto t1 = Clock::now();
      std::vector<Tensor> g = adjoint::autograd::grad({loss}, params);
      const auto t2 = Clock::now();
      loss = Tensor();
      g.clear();
      const auto t3 = Clock::now();
      if (timed) {
        pf.add(ms(t0, t1));
        pb.add(ms(t1, t2));
        ptotal.add(ms(t0, t3));
      }
    }
    {  // reverse over reverse, the same steps as torch-ref
      const auto t0 = Clock::now();
      Tensor loss = loss_of(params);
      const auto t1 = Clock::now();
      std::vector<Tensor> g = adjoint::autograd::grad({loss}, params, {}, true, true);
      const auto t2 = Clock::now();
      Tensor dot = (g[0] * v[0]).sum();
      for (size_t i = 1; i < g.size(); ++i) dot = dot + (g[i] * v[i]).sum();
      std::vector<Tensor> hv = adjoint::autograd::grad({dot}, params);
      const auto t3 = Clock::now();
      if (s + 1 == n) hv_rr = hv;
      loss = Tensor();
      g.clear();
      dot = Tensor();
      hv.clear();
      const auto t4 = Clock::now();
      if (timed) {
        fwd.add(ms(t0, t1));
        grad1.add(ms(t1, t2));
        grad2.add(ms(t2, t3));
        hvp_t.add(ms(t0, t3));
        total.add(ms(t0, t4));
      }
    }
    {  // forward over reverse
      const auto t0 = Clock::now();
      std::vector<Tensor> hv = adjoint::hvp(loss_of, primals, v);
      const auto t1 = Clock::now();
      if (s + 1 == n) hv_fr = hv;
      hv.clear();
      const auto t2 = Clock::now();
      if (timed) {
        fr.add(ms(t0, t1));
        fr_total.add(ms(t0, t2));
      }
    }
  }

  double diff = 0;
  {
    std::vector<Tensor> d;
    for (size_t i = 0; i < hv_rr.size(); ++i) d.push_back(hv_rr[i] - hv_fr[i]);
    diff = norm_of(d) / norm_of(hv_rr);
  }
  const double plain = pf.median() + pb.median();
  common_fields(j, o, total);
  j.num("ms_per_hvp", hvp_t.median());
  j.num("fwd_ms", fwd.median());
  j.num("grad_create_graph_ms", grad1.median());
  j.num("hvp_bwd_ms", grad2.median());
  j.num("plain_fwd_ms", pf.median());
  j.num("plain_bwd_ms", pb.median());
  j.num("plain_grad_ms", ptotal.median());
  j.num("hvp_over_grad", hvp_t.median() / plain);
  j.num("hv_norm", norm_of(hv_rr));
  j.num("fwd_over_rev_ms_per_hvp", fr.median());
  j.num("fwd_over_rev_ms_per_step", fr_total.median());
  j.num("fwd_over_rev_hvp_over_grad", fr.median() / plain);
  j.num("fwd_over_rev_rel_diff", diff);
}

void jacobian(const Opts& o, Json& j) {
  constexpr int kHidden = 256;
  const int cases[][2] = {{8, 256}, {64, 64}, {256, 8}};
  // ms_per_step is the median over the cases' jacrev medians, as torch-ref reports it
  // (../shared/bench/README.md).
  Samples jacrev_medians;
  for (const auto& c : cases) {
    const int in = c[0], out = c[1];
    adjoint::Generator gen(0);
    const Tensor w1 = adjoint::randn({kHidden, in}, {}, &gen) * (1.0 / std::sqrt(in));
    const Tensor w2 = adjoint::randn({out, kHidden}, {}, &gen) * (1.0 / std::sqrt(kHidden));
    const Tensor x = adjoint::randn({in}, {}, &gen);
    auto f = [&](const Tensor& z) {
      return adjoint::tanh(adjoint::matmul(w2, adjoint::tanh(adjoint::matmul(w1, z))));
    };
    // The loops over rows (columns) that jacrev (jacfwd) vectorizes with vmap, as a user
    // without vmap writes them.
    auto list_f = [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{f(a[0])}; };
    Samples rev, fwd, rev_loop, fwd_loop;
    double max_diff = 0;
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      const auto t0 = Clock::now();
      Tensor jr = adjoint::jacrev(f)(x);
      const auto t1 = Clock::now();
      Tensor jf = adjoint::jacfwd(f)(x);
      const auto t2 = Clock::now();
      Tensor jrl =
          adjoint::detail::jacrev_loop_lists(list_f, {x}, {0}, adjoint::Unused::Zero)[0][0];
      const auto t3 = Clock::now();
      Tensor jfl = adjoint::detail::jacfwd_loop_lists(list_f, {x}, {0})[0][0];
      const auto t4 = Clock::now();
      if (s + 1 == o.warmup + o.steps)
        max_diff =
            std::max({(jr - jf).abs().max().item<double>(), (jr - jrl).abs().max().item<double>(),
                      (jf - jfl).abs().max().item<double>()});
      if (s >= o.warmup) {
        rev.add(ms(t0, t1));
        fwd.add(ms(t1, t2));
        rev_loop.add(ms(t2, t3));
        fwd_loop.add(ms(t3, t4));
      }
    }
    std::string tag = "_n";
    tag += std::to_string(in);
    tag += "_m";
    tag += std::to_string(out);
    j.num("jacrev_ms" + tag, rev.median());
    j.num("jacfwd_ms" + tag, fwd.median());
    j.num("jacrev_over_jacfwd" + tag, rev.median() / fwd.median());
    j.num("jacrev_loop_ms" + tag, rev_loop.median());
    j.num("jacfwd_loop_ms" + tag, fwd_loop.median());
    j.num("jacrev_over_loop" + tag, rev.median() / rev_loop.median());
    j.num("max_abs_diff" + tag, max_diff);
    jacrev_medians.add(rev.median());
  }
  common_fields(j, o, jacrev_medians);
}

}  // namespace

static RegisterWorkload register_hvp{"hvp", hvp, 50};
static RegisterWorkload register_jacobian{"jacobian", jacobian, 10};

}  // namespace bench
