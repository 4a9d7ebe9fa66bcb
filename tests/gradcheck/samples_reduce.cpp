// Gradcheck samples for the reductions (src/ops/reduce.cpp, reduce_stats.cpp,
// reduce_extrema.cpp), named "reduce/<op>/<case>": all dims, negative dims, several dims,
// keepdim both ways, 0-d inputs, empty inputs where the reduction is defined, and transposed
// (non-contiguous) inputs. Extrema and norms with kinks get inputs without ties or zeros
// (continuous random draws), prod gets inputs bounded away from zero.
#include <cmath>
#include <limits>

#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

using ReduceFn = std::function<Tensor(const Tensor&)>;

std::string name(const std::string& op, const std::string& which) {
  return "reduce/" + op + "/" + which;
}

// Values in ±[0.5, 1.5]: away from zero (prod's quotient rule, |x| kinks) with both signs.
Tensor away_from_zero(const Shape& s) {
  Tensor mag = uniform64(s, 0.5, 1.5).detach();
  Tensor sign = gt(uniform64(s, 0, 1).detach(), 0.5).to(DType::Float64) * 2 - 1;
  return (mag * sign).detach().requires_grad_(true);
}

void add(SampleSink& sink, const std::string& op, const std::string& which, ReduceFn f, Tensor x) {
  sink.add(name(op, which), [f](const Inputs& in) { return f(in[0]); }, {std::move(x)});
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(reduce) {
  const double inf = std::numeric_limits<double>::infinity();

  // sum and mean
  add(
      sink, "sum", "all", [](const Tensor& x) { return sum(x); }, randn64({2, 3}));
  add(
      sink, "sum", "dim_neg", [](const Tensor& x) { return sum(x, {-1}); }, randn64({2, 3}));
  add(
      sink, "sum", "dims_keepdim",
      [](const Tensor& x) {
        return x.sum({0, 2}, true);
      },
      randn64({2, 3, 2}));
  add(
      sink, "sum", "scalar", [](const Tensor& x) { return sum(x); }, randn64({}));
  add(
      sink, "sum", "empty", [](const Tensor& x) { return sum(x, {0}); }, randn64({0, 3}));
  add(
      sink, "sum", "noncontiguous", [](const Tensor& x) { return sum(x, {1}); },
      randn64({3, 2}).t());
  add(
      sink, "mean", "all", [](const Tensor& x) { return mean(x); }, randn64({2, 3}));
  add(
      sink, "mean", "dim_neg_keepdim", [](const Tensor& x) { return x.mean({-2}, true); },
      randn64({2, 3}));
  add(
      sink, "mean", "scalar", [](const Tensor& x) { return mean(x); }, randn64({}));
  add(
      sink, "mean", "noncontiguous", [](const Tensor& x) { return mean(x, {0}); },
      randn64({3, 2}).t());

  // var and std
  add(
      sink, "var", "all", [](const Tensor& x) { return var(x); }, randn64({2, 3}));
  add(
      sink, "var", "dim_neg_keepdim", [](const Tensor& x) { return x.var({-1}, 1, true); },
      randn64({2, 3}));
  add(
      sink, "var", "dims_correction0",
      [](const Tensor& x) {
        return var(x, {0, 2}, 0);
      },
      randn64({2, 2, 3}));
  add(
      sink, "var", "noncontiguous", [](const Tensor& x) { return var(x, {0}); },
      randn64({3, 2}).t());
  add(
      sink, "var", "empty_batch", [](const Tensor& x) { return var(x, {1}); }, randn64({0, 3}));
  add(
      sink, "std", "all", [](const Tensor& x) { return adjoint::std(x); }, randn64({2, 3}));
  add(
      sink, "std", "dim_keepdim", [](const Tensor& x) { return x.std({1}, 1, true); },
      randn64({2, 3}));
  add(
      sink, "std", "noncontiguous", [](const Tensor& x) { return adjoint::std(x, {-1}, 0); },
      randn64({3, 2}).t());

  // prod
  add(
      sink, "prod", "all", [](const Tensor& x) { return prod(x); }, away_from_zero({2, 3}));
  add(
      sink, "prod", "dim_neg", [](const Tensor& x) { return prod(x, {-1}); },
      away_from_zero({2, 3}));
  add(
      sink, "prod", "dim_keepdim", [](const Tensor& x) { return x.prod({0}, true); },
      away_from_zero({3, 2}));
  add(
      sink, "prod", "scalar", [](const Tensor& x) { return prod(x); }, away_from_zero({}));
  add(
      sink, "prod", "empty_reduced", [](const Tensor& x) { return prod(x, {1}); }, randn64({2, 0}));
  add(
      sink, "prod", "noncontiguous", [](const Tensor& x) { return prod(x, {1}); },
      away_from_zero({3, 2}).t());

  // prod's gradient (the prod_partials op, an O(n) kernel whose derivatives are the scans'),
  // with zeros in a slice: one zero and two zeros, where dividing would fail.
  auto partials = [](const std::vector<int64_t>& dims) {
    return [dims](const Tensor& x) {
      return grad([&](const Tensor& v) { return prod(v, dims).sum(); })(x);
    };
  };
  add(sink, "prod_partials", "dim", partials({1}), away_from_zero({2, 4}));
  add(sink, "prod_partials", "dims", partials({0, 2}), away_from_zero({2, 2, 3}));
  add(
      sink, "prod_partials", "zeros",
      [](const Tensor& x) {
        return grad([](const Tensor& v) {
          return prod(v * tensor({1.0, 0.0, 1.0, 0.0}, DType::Float64), {0}).sum();
        })(x);
      },
      away_from_zero({4}));

  // logsumexp
  add(
      sink, "logsumexp", "dim", [](const Tensor& x) { return logsumexp(x, {1}); }, randn64({2, 3}));
  add(
      sink, "logsumexp", "dims_neg_keepdim",
      [](const Tensor& x) {
        return x.logsumexp({-1, 0}, true);
      },
      randn64({2, 3}));
  add(
      sink, "logsumexp", "scalar", [](const Tensor& x) { return logsumexp(x, {}); }, randn64({}));
  add(
      sink, "logsumexp", "large", [](const Tensor& x) { return logsumexp(x * 1000, {0}); },
      randn64({3}));
  add(
      sink, "logsumexp", "empty_batch", [](const Tensor& x) { return logsumexp(x, {1}); },
      randn64({0, 3}));
  add(
      sink, "logsumexp", "noncontiguous", [](const Tensor& x) { return logsumexp(x, {0}); },
      randn64({3, 2}).t());

  // norm
  add(
      sink, "norm", "p2_all", [](const Tensor& x) { return norm(x); }, randn64({2, 3}));
  add(
      sink, "norm", "p2_dim_neg_keepdim", [](const Tensor& x) { return x.norm(2, {-1}, true); },
      randn64({2, 3}));
  add(
      sink, "norm", "p2_scalar", [](const Tensor& x) { return norm(x); }, away_from_zero({}));
  add(
      sink, "norm", "p2_noncontiguous", [](const Tensor& x) { return norm(x, 2, {0}); },
      randn64({3, 2}).t());
  add(
      sink, "norm", "p2_empty_batch", [](const Tensor& x) { return norm(x, 2, {1}); },
      randn64({0, 3}));
  add(
      sink, "norm", "p1", [](const Tensor& x) { return norm(x, 1, {1}); }, away_from_zero({2, 3}));
  add(
      sink, "norm", "p3", [](const Tensor& x) { return norm(x, 3); }, away_from_zero({2, 3}));
  add(
      sink, "norm", "p_half", [](const Tensor& x) { return norm(x, 0.5, {0}); },
      away_from_zero({3, 2}));
  add(
      sink, "norm", "inf", [inf](const Tensor& x) { return norm(x, inf, {1}); }, randn64({2, 3}));
  add(
      sink, "norm", "neg_inf", [inf](const Tensor& x) { return x.norm(-inf); }, randn64({2, 3}));

  // amax, amin, max, min (continuous random inputs: no ties)
  add(
      sink, "amax", "all", [](const Tensor& x) { return amax(x); }, randn64({2, 3}));
  add(
      sink, "amax", "dim_neg", [](const Tensor& x) { return amax(x, {-1}); }, randn64({2, 3}));
  add(
      sink, "amax", "dims_keepdim",
      [](const Tensor& x) {
        return x.amax({0, 2}, true);
      },
      randn64({2, 3, 2}));
  add(
      sink, "amax", "scalar", [](const Tensor& x) { return amax(x); }, randn64({}));
  add(
      sink, "amax", "empty_batch", [](const Tensor& x) { return amax(x, {1}); }, randn64({0, 3}));
  add(
      sink, "amax", "noncontiguous", [](const Tensor& x) { return amax(x, {0}); },
      randn64({3, 2}).t());
  add(
      sink, "amin", "dim_keepdim", [](const Tensor& x) { return x.amin({1}, true); },
      randn64({2, 3}));
  add(
      sink, "amin", "noncontiguous", [](const Tensor& x) { return amin(x, {-1}); },
      randn64({3, 2}).t());
  add(
      sink, "max", "all", [](const Tensor& x) { return max(x); }, randn64({2, 3}));
  add(
      sink, "max", "all_scalar", [](const Tensor& x) { return x.max(); }, randn64({}));
  add(
      sink, "max", "dim", [](const Tensor& x) { return max(x, 1).first; }, randn64({2, 3}));
  add(
      sink, "max", "dim_neg_keepdim", [](const Tensor& x) { return x.max(-2, true).first; },
      randn64({2, 3}));
  add(
      sink, "max", "dim_scalar", [](const Tensor& x) { return max(x, 0).first; }, randn64({}));
  add(
      sink, "max", "dim_noncontiguous", [](const Tensor& x) { return max(x, 0).first; },
      randn64({3, 2}).t());
  add(
      sink, "min", "all", [](const Tensor& x) { return min(x); }, randn64({2, 3}));
  add(
      sink, "min", "dim", [](const Tensor& x) { return min(x, -1).first; }, randn64({2, 3}));
  add(
      sink, "min", "dim_keepdim_noncontiguous",
      [](const Tensor& x) { return x.min(1, true).first; }, randn64({3, 2}).t());
  // argmax and argmin over the flattened input (an int64 index, nothing to differentiate):
  // the element they pick, taken with index_select, so the gradient reaches it alone.
  auto pick = [](const Tensor& x, const Tensor& index) {
    return index_select(x.reshape({-1}), 0, index.reshape({1}));
  };
  add(
      sink, "argmax", "flat_pick", [pick](const Tensor& x) { return pick(x, argmax(x)); },
      randn64({3, 4}));
  add(
      sink, "argmin", "flat_keepdim_noncontiguous",
      [pick](const Tensor& x) { return pick(x, x.argmin(std::nullopt, true)); },
      randn64({4, 3}).t());
  add(
      sink, "argmax", "dim_gather",
      [](const Tensor& x) { return gather(x, 1, argmax(x, 1, true)); }, randn64({3, 4}));
}
