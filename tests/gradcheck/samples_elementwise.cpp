// Gradcheck samples for the elementwise ops (src/ops/unary.cpp, binary.cpp, activation.cpp),
// named "elementwise/<op>/<case>". Unary ops get 0-d, matrix, non-contiguous and empty cases;
// binary ops add broadcasting, 0-d operands, constant operands and number operands. Inputs of
// ops with kinks (abs, relu, clamp, minimum, ...) stay away from them, so that central
// differences are smooth; domains are restricted where the op needs it (log, sqrt, tan, ...).
#include <cmath>

#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

using Make = std::function<Tensor(const Shape&)>;
using Unary = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

Tensor normal(const Shape& s) { return randn64(s); }

Make uniform(double lo, double hi) {
  return [lo, hi](const Shape& s) { return uniform64(s, lo, hi); };
}

// N(0, 1) samples pushed at least `margin` away from each of `points` (the op's kinks).
Make normal_away_from(std::vector<double> points, double margin = 0.1) {
  return [points, margin](const Shape& s) {
    std::vector<double> v = randn64(s).detach().to_vector<double>();
    for (double& x : v)
      for (double p : points)
        if (std::abs(x - p) < margin) x = p + (x >= p ? margin : -margin);
    return tensor(v, s).requires_grad_(true);
  };
}

// "elementwise/<op>/<variant>_<case>", or "elementwise/<op>/<case>" without a variant.
std::string name(const std::string& op, const std::string& variant, const std::string& which) {
  return "elementwise/" + op + "/" + (variant.empty() ? which : variant + "_" + which);
}

// 0-d, a matrix, a transposed (non-contiguous) matrix and an empty tensor.
void unary_cases(SampleSink& sink, const std::string& op, const std::string& variant, Unary fn,
                 Make make = normal) {
  SampleFn f = [fn](const Inputs& x) { return fn(x[0]); };
  sink.add(name(op, variant, "scalar"), f, {make({})});
  sink.add(name(op, variant, "matrix"), f, {make({3, 4})});
  sink.add(name(op, variant, "noncontiguous"), f, {make({4, 3}).t()});
  sink.add(name(op, variant, "empty"), f, {make({0, 3})});
}

// Same shapes, broadcasting both ways, 0-d against a matrix, non-contiguous operands, an empty
// operand, and one operand constant (no gradient asked for it).
void binary_cases(SampleSink& sink, const std::string& op, const std::string& variant, BinaryFn fn,
                  Make ma = normal, Make mb = normal) {
  SampleFn f = [fn](const Inputs& x) { return fn(x[0], x[1]); };
  sink.add(name(op, variant, "same_shape"), f, {ma({2, 3}), mb({2, 3})});
  sink.add(name(op, variant, "broadcast"), f, {ma({3, 1}), mb({4})});
  sink.add(name(op, variant, "scalar_lhs"), f, {ma({}), mb({2, 3})});
  sink.add(name(op, variant, "scalar_rhs"), f, {ma({2, 3}), mb({})});
  sink.add(name(op, variant, "scalars"), f, {ma({}), mb({})});
  sink.add(name(op, variant, "noncontiguous"), f, {ma({3, 2}).t(), mb({3, 2}).t()});
  sink.add(name(op, variant, "noncontiguous_broadcast"), f, {ma({4, 3}).t(), mb({4})});
  sink.add(name(op, variant, "empty"), f, {ma({0, 3}), mb({3})});
  sink.add(name(op, variant, "constant_lhs"), f, {constant(ma({2, 3})), mb({3})});
  sink.add(name(op, variant, "constant_rhs"), f, {ma({2, 3}), constant(mb({2, 3}))});
}

void register_unary(SampleSink& sink) {
  unary_cases(sink, "neg", "", [](const Tensor& x) { return neg(x); });
  unary_cases(sink, "exp", "", [](const Tensor& x) { return exp(x); });
  unary_cases(
      sink, "log", "", [](const Tensor& x) { return log(x); }, uniform(0.5, 2));
  unary_cases(
      sink, "log1p", "", [](const Tensor& x) { return log1p(x); }, uniform(-0.5, 2));
  unary_cases(sink, "expm1", "", [](const Tensor& x) { return expm1(x); });
  unary_cases(
      sink, "sqrt", "", [](const Tensor& x) { return sqrt(x); }, uniform(0.5, 2));
  unary_cases(
      sink, "rsqrt", "", [](const Tensor& x) { return rsqrt(x); }, uniform(0.5, 2));
  unary_cases(
      sink, "abs", "", [](const Tensor& x) { return abs(x); }, normal_away_from({0}));
  // sign is flat away from 0: every derivative is zero.
  unary_cases(
      sink, "sign", "", [](const Tensor& x) { return sign(x); }, normal_away_from({0}));
  unary_cases(sink, "sin", "", [](const Tensor& x) { return sin(x); });
  unary_cases(sink, "cos", "", [](const Tensor& x) { return cos(x); });
  unary_cases(
      sink, "tan", "", [](const Tensor& x) { return tan(x); }, uniform(-1, 1));
  unary_cases(sink, "tanh", "", [](const Tensor& x) { return tanh(x); });
  unary_cases(sink, "erf", "", [](const Tensor& x) { return erf(x); });
  unary_cases(sink, "square", "", [](const Tensor& x) { return square(x); });

  unary_cases(sink, "pow", "exponent_2", [](const Tensor& x) { return pow(x, 2); });
  unary_cases(sink, "pow", "exponent_3", [](const Tensor& x) { return pow(x, 3); });
  unary_cases(sink, "pow", "exponent_0", [](const Tensor& x) { return pow(x, 0.0); });
  unary_cases(sink, "pow", "exponent_1", [](const Tensor& x) { return pow(x, 1.0); });
  unary_cases(
      sink, "pow", "exponent_half", [](const Tensor& x) { return pow(x, 0.5); }, uniform(0.5, 2));
  unary_cases(
      sink, "pow", "exponent_minus_1.5", [](const Tensor& x) { return pow(x, -1.5); },
      uniform(0.5, 2));
  unary_cases(sink, "pow", "number_base_2.5", [](const Tensor& x) { return pow(2.5, x); });
  unary_cases(sink, "pow", "number_base_0.5", [](const Tensor& x) { return pow(0.5, x); });
}

void register_activations(SampleSink& sink) {
  unary_cases(
      sink, "relu", "", [](const Tensor& x) { return relu(x); }, normal_away_from({0}));
  unary_cases(
      sink, "leaky_relu", "", [](const Tensor& x) { return leaky_relu(x); }, normal_away_from({0}));
  unary_cases(
      sink, "leaky_relu", "slope_0.2", [](const Tensor& x) { return leaky_relu(x, 0.2); },
      normal_away_from({0}));
  unary_cases(sink, "sigmoid", "", [](const Tensor& x) { return sigmoid(x); });
  unary_cases(sink, "gelu", "", [](const Tensor& x) { return gelu(x); });
  unary_cases(sink, "gelu", "tanh",
              [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); });
  unary_cases(sink, "silu", "", [](const Tensor& x) { return silu(x); });
  unary_cases(sink, "softplus", "", [](const Tensor& x) { return softplus(x); });
  unary_cases(sink, "softplus", "beta_2", [](const Tensor& x) { return softplus(x, 2); });
  // beta x above the threshold (20): the linear region, where softplus(x) = x.
  unary_cases(
      sink, "softplus", "beta_2_linear_region", [](const Tensor& x) { return softplus(x, 2); },
      uniform(11, 12));
  unary_cases(
      sink, "clamp", "min_only", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); },
      normal_away_from({-0.5}));
  unary_cases(
      sink, "clamp", "max_only", [](const Tensor& x) { return clamp(x, std::nullopt, 0.5); },
      normal_away_from({0.5}));
  unary_cases(
      sink, "clamp", "min_max", [](const Tensor& x) { return clamp(x, -0.5, 0.5); },
      normal_away_from({-0.5, 0.5}));
}

void register_binary(SampleSink& sink) {
  binary_cases(sink, "add", "", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  binary_cases(sink, "add", "alpha",
               [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); });
  binary_cases(sink, "sub", "", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  binary_cases(sink, "sub", "alpha",
               [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); });
  binary_cases(sink, "mul", "", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  binary_cases(
      sink, "div", "", [](const Tensor& a, const Tensor& b) { return div(a, b); }, normal,
      normal_away_from({0}, 0.5));
  binary_cases(
      sink, "pow", "", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, uniform(0.5, 2));
  // Distinct draws are never tied; the gradient goes to the selected operand.
  binary_cases(sink, "minimum", "", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  binary_cases(sink, "maximum", "", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  // Operators chain several ops in one sample.
  binary_cases(sink, "operators", "",
               [](const Tensor& a, const Tensor& b) { return (a * b - a) / (b * b + 1.0); });
}

// Tensor-with-number forms: x + s, x - s, x * s, x / s and s + x, s - x, s * x, s / x.
void register_number_operands(SampleSink& sink) {
  unary_cases(sink, "add", "number_rhs", [](const Tensor& x) { return add(x, 2.5); });
  unary_cases(sink, "sub", "number_rhs", [](const Tensor& x) { return sub(x, 1.5); });
  unary_cases(sink, "mul", "number_rhs", [](const Tensor& x) { return mul(x, -3.0); });
  unary_cases(sink, "div", "number_rhs", [](const Tensor& x) { return div(x, 4.0); });
  unary_cases(sink, "add", "number_lhs", [](const Tensor& x) { return 2.5 + x; });
  unary_cases(sink, "sub", "number_lhs", [](const Tensor& x) { return 2.0 - x; });
  unary_cases(sink, "mul", "number_lhs", [](const Tensor& x) { return 3.0 * x; });
  unary_cases(
      sink, "div", "number_lhs", [](const Tensor& x) { return 3.0 / x; },
      normal_away_from({0}, 0.5));
}

// where(cond, a, b) with a constant bool condition, which broadcasts with both branches.
void register_where(SampleSink& sink) {
  auto cond = [](const Shape& s) { return constant(gt(randn64(s), 0)); };
  SampleFn f = [](const Inputs& x) { return where(x[0], x[1], x[2]); };
  sink.add(name("where", "", "same_shape"), f, {cond({2, 3}), randn64({2, 3}), randn64({2, 3})});
  sink.add(name("where", "", "broadcast"), f, {cond({2, 3}), randn64({3}), randn64({2, 1})});
  sink.add(name("where", "", "broadcast_cond"), f, {cond({3}), randn64({2, 3}), randn64({2, 3})});
  sink.add(name("where", "", "scalar_branch"), f, {cond({2, 3}), randn64({}), randn64({2, 3})});
  sink.add(name("where", "", "noncontiguous"), f,
           {cond({3, 2}).t(), randn64({3, 2}).t(), randn64({2, 3})});
  sink.add(name("where", "", "empty"), f, {cond({0, 3}), randn64({0, 3}), randn64({3})});
  sink.add(name("where", "", "number_branch"),
           [](const Inputs& x) { return where(x[0], x[1], 0.5); }, {cond({2, 3}), randn64({2, 3})});
}

// Comparisons and logical ops have bool results (nothing to differentiate), so each sample
// picks between two differentiable branches with one: the registry's vmap, compile, export,
// meta and 16-bit checks then run them, and gradcheck checks that the choice passes no
// gradient. Draws are never tied, and the number operands stay away from the inputs.
void register_comparisons(SampleSink& sink) {
  using Cmp = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Cmp> tensor_forms[] = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
  for (const auto& [op, cmp] : tensor_forms)
    binary_cases(sink, op, "pick",
                 [cmp](const Tensor& a, const Tensor& b) { return where(cmp(a, b), a, b * 2.0); });
  using CmpNumber = Tensor (*)(const Tensor&, Scalar);
  const std::pair<const char*, CmpNumber> number_forms[] = {
      {"eq", [](const Tensor& a, Scalar s) { return eq(a, s); }},
      {"ne", [](const Tensor& a, Scalar s) { return ne(a, s); }},
      {"lt", [](const Tensor& a, Scalar s) { return lt(a, s); }},
      {"le", [](const Tensor& a, Scalar s) { return le(a, s); }},
      {"gt", [](const Tensor& a, Scalar s) { return gt(a, s); }},
      {"ge", [](const Tensor& a, Scalar s) { return ge(a, s); }}};
  for (const auto& [op, cmp] : number_forms)
    unary_cases(
        sink, op, "number_pick",
        [cmp](const Tensor& x) { return where(cmp(x, 0.25), x * 3.0, -x); },
        normal_away_from({0.25}));
  binary_cases(
      sink, "logical", "and_or_not",
      [](const Tensor& a, const Tensor& b) {
        const Tensor both = logical_and(gt(a, 0.0), gt(b, 0.0));
        const Tensor either = logical_or(lt(a, -0.5), logical_not(lt(b, 0.5)));
        return where(both, a * b, where(either, a - b, a + b));
      },
      normal_away_from({-0.5, 0, 0.5}), normal_away_from({-0.5, 0, 0.5}));
}

// detach() passes no gradient: its value is used only where the true derivative is zero (a
// sign, a branch's choice), so finite differences agree with the gradient it cuts, and the
// registry's vmap, compile, export, meta and 16-bit checks run the op (Note [detach is an op]).
void register_detach(SampleSink& sink) {
  unary_cases(
      sink, "detach", "sign_and_choice",
      [](const Tensor& x) {
        const Tensor s = x.detach();
        return where(gt(s, 0.0), sin(x), x * 2.0) + x * sign(s);
      },
      normal_away_from({0}));
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(elementwise) {
  register_unary(sink);
  register_activations(sink);
  register_binary(sink);
  register_number_operands(sink);
  register_where(sink);
  register_comparisons(sink);
  register_detach(sink);
}
