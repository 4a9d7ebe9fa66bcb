// gradcheck samples for the scans (src/ops/scan.cpp): cumsum, cumprod (with exact zeros, where
// its gradient must not divide) and linear_recurrence (forward and reverse, broadcast
// coefficients), along first, middle and last dims, of transposed views, 0-d, one-element and
// empty inputs. Their rules are ops on the recurrence (Note [Scan rules]), so the registry's
// double backward and forward-over-reverse differentiate it again.
#include <vector>

#include "adjoint/adjoint.h"
#include "support/registry.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

// A leaf with exact zeros at every third element.
Tensor with_zeros(const Shape& shape) {
  const Tensor x = randn64(shape).detach();
  std::vector<double> keep(static_cast<std::size_t>(x.numel()));
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = i % 3 == 1 ? 0.0 : 1.0;
  return (x * tensor(keep, shape)).requires_grad_(true);
}

void register_cumulative(SampleSink& sink, const std::string& op,
                         Tensor (*f)(const Tensor&, int64_t)) {
  auto along = [f](int64_t dim) { return [f, dim](const Inputs& x) { return f(x[0], dim); }; };
  const std::string p = "scan/" + op + "/";
  sink.add(p + "vector", along(0), {randn64({7})});
  sink.add(p + "rows", along(-1), {randn64({3, 5})});
  sink.add(p + "columns", along(0), {randn64({4, 3})});
  sink.add(p + "middle_dim", along(1), {randn64({2, 4, 3})});
  sink.add(p + "transposed", along(1), {randn64({5, 3}).t()});
  sink.add(p + "scalar", along(0), {randn64({})});
  sink.add(p + "one_element", along(0), {randn64({1, 2})});
  sink.add(p + "empty", along(1), {randn64({2, 0})});
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(scan) {
  register_cumulative(sink, "cumsum", [](const Tensor& x, int64_t d) { return cumsum(x, d); });
  register_cumulative(sink, "cumprod", [](const Tensor& x, int64_t d) { return cumprod(x, d); });
  auto cumprod_rows = [](const Inputs& x) { return cumprod(x[0], -1); };
  sink.add("scan/cumprod/zeros", cumprod_rows, {with_zeros({3, 6})});
  sink.add("scan/cumprod/zeros_columns", [](const Inputs& x) { return cumprod(x[0], 0); },
           {with_zeros({6, 2})});

  auto rec = [](int64_t dim, bool reverse) {
    return [dim, reverse](const Inputs& x) { return linear_recurrence(x[0], x[1], dim, reverse); };
  };
  const std::string p = "scan/linear_recurrence/";
  // Coefficients of either sign around |a| < 1, as a decaying filter has.
  sink.add(p + "vector", rec(0, false), {uniform64({6}, -0.9, 0.9), randn64({6})});
  sink.add(p + "reverse", rec(0, true), {uniform64({6}, -0.9, 0.9), randn64({6})});
  sink.add(p + "rows", rec(-1, false), {uniform64({3, 5}, -1.2, 1.2), randn64({3, 5})});
  sink.add(p + "columns_reverse", rec(0, true), {uniform64({5, 2}, -1.2, 1.2), randn64({5, 2})});
  sink.add(p + "broadcast_a", rec(1, false), {uniform64({1, 4, 1}, -0.9, 0.9), randn64({2, 4, 3})});
  sink.add(p + "transposed_b", rec(0, false), {uniform64({4, 3}, -0.9, 0.9), randn64({3, 4}).t()});
  sink.add(p + "constant_a", rec(0, false), {constant(uniform64({5}, -0.9, 0.9)), randn64({5})});
  sink.add(p + "scalar", rec(0, false), {randn64({}), randn64({})});
  sink.add(p + "empty", rec(0, false), {randn64({0, 2}), randn64({0, 2})});
}
