// GradientHealth: per-parameter gradient and update norms every N steps, the vanish/explode
// warnings per layer and the NaN/Inf stop; see gradient_health.h. The files it writes are in
// gradient_plot.cpp.
#include "gradient_health.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"

namespace adjoint::tools {
namespace {

bool is_index(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The 2-norm in double from the values: slow, only for the rare tensor whose float32 norm
// overflowed (elements beyond ~1e19) or that holds NaN or Inf (then it counts them).
struct SlowNorm {
  double norm = 0;
  int64_t nan = 0, inf = 0;
};
SlowNorm slow_norm(const Tensor& t) {
  SlowNorm r;
  const std::vector<double> v = t.to_vector<double>();
  double scale = 0;
  for (double x : v) {
    if (std::isnan(x))
      ++r.nan;
    else if (std::isinf(x))
      ++r.inf;
    else
      scale = std::max(scale, std::abs(x));
  }
  if (scale == 0) return r;
  double sum = 0;
  for (double x : v)
    if (std::isfinite(x)) sum += (x / scale) * (x / scale);
  r.norm = scale * std::sqrt(sum);
  return r;
}

double norm_of(const Tensor& t) {
  const double n = norm(t).item<double>();
  return std::isfinite(n) ? n : slow_norm(t).norm;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::string layer_of(const std::string& name) {
  const std::size_t a = name.find('.');
  if (a == std::string::npos) return name;
  const std::size_t b = name.find('.', a + 1);
  if (b == std::string::npos) return name.substr(0, a);
  return is_index(name.substr(a + 1, b - a - 1)) ? name.substr(0, b) : name.substr(0, a);
}

GradientHealth::GradientHealth(std::vector<std::pair<std::string, Tensor>> named_parameters,
                               GradientHealthOptions options)
    : options_(options) {
  ADJOINT_CHECK(options.every >= 0 && options.vanish_records > 0 && options.vanish_below >= 0 &&
                    options.explode_above > options.vanish_below,
                Value, "train",
                "gradient health needs every >= 0, vanish_records > 0 and 0 <= vanish_below < "
                "explode_above; got every ",
                options.every, ", vanish_records ", options.vanish_records, ", vanish_below ",
                options.vanish_below, ", explode_above ", options.explode_above);
  for (auto& [name, p] : named_parameters) {
    const std::string layer = layer_of(name);
    auto it = std::find(layers_.begin(), layers_.end(), layer);
    layer_index_.push_back(static_cast<std::size_t>(it - layers_.begin()));
    if (it == layers_.end()) layers_.push_back(layer);
    names_.push_back(std::move(name));
    params_.push_back(std::move(p));
  }
  vanished_for_.assign(layers_.size(), 0);
  exploding_.assign(layers_.size(), false);
}

double GradientHealth::layer_norm(const std::vector<double>& norms, std::size_t layer) const {
  double sum = 0;
  for (std::size_t i = 0; i < norms.size(); ++i)
    if (layer_index_[i] == layer) sum += norms[i] * norms[i];
  return std::sqrt(sum);
}

void GradientHealth::after_backward(int64_t step, double loss) {
  NoGradGuard no_grad;
  const bool record = options_.every > 0 && step % options_.every == 0;
  GradientRecord r{.step = step, .grad_norm = {}, .weight_norm = {}, .update_norm = {}};
  // Every step, not only on records: one NaN step poisons the weights for good, and the
  // norms cost one read of the gradients (under 1 % of a step of the demo model).
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    double n = g.defined() ? norm(g).item<double>() : 0.0;
    if (!std::isfinite(n)) {
      const SlowNorm s = slow_norm(g);
      if (s.nan > 0 || s.inf > 0) throw_non_finite(step, loss, i, s.nan, s.inf);
      n = s.norm;  // finite values whose float32 sum of squares overflowed
    }
    if (record) r.grad_norm.push_back(n);
  }
  if (!record) return;
  before_.clear();
  for (const Tensor& p : params_) {
    r.weight_norm.push_back(norm_of(p));
    before_.push_back(p.detach().clone());
  }
  check_layers(r);
  records_.push_back(std::move(r));
}

void GradientHealth::throw_non_finite(int64_t step, double loss, std::size_t first, int64_t nan,
                                      int64_t inf) const {
  int64_t others = 0;  // is it one parameter or all of them?
  for (std::size_t i = first + 1; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined() || std::isfinite(norm(g).item<double>())) continue;
    const SlowNorm s = slow_norm(g);
    others += s.nan > 0 || s.inf > 0;
  }
  const Tensor g = params_[first].grad();
  throw Error(
      ErrorKind::Value, "train",
      detail::str("step ", step, ": the gradient of ", names_[first], " ", describe(g), " holds ",
                  nan, " NaN and ", inf, " infinite values",
                  others > 0 ? " (and " + std::to_string(others) + " later parameters' too)" : "",
                  "; loss ", std::isnan(loss) ? "NaN" : fmt(loss),
                  ". Stopped before the optimizer applied it. Lower --lr, or find the op "
                  "that made it (log of a negative, 0/0, an overflow) with --detect-anomaly"));
}

void GradientHealth::after_update() {
  if (before_.empty()) return;
  NoGradGuard no_grad;
  GradientRecord& r = records_.back();
  for (std::size_t i = 0; i < params_.size(); ++i)
    r.update_norm.push_back(norm_of(params_[i].detach() - before_[i]));
  before_.clear();
}

// Note [Vanishing and exploding layers]
// Judged per layer (layer_of), not per parameter: a bias or a LayerNorm gain may have a tiny
// gradient in a healthy layer. A layer vanishes when its norm stays below vanish_below for
// vanish_records records in a row (one quiet record is noise), and explodes on any record above
// explode_above. Each is reported once when it starts, and again only after the layer was
// healthy in between, so a long bad stretch is one line, not one per record.
void GradientHealth::check_layers(const GradientRecord& r) {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const double n = layer_norm(r.grad_norm, l);
    if (n < options_.vanish_below) {
      if (++vanished_for_[l] == options_.vanish_records)
        warnings_.push_back("step " + std::to_string(r.step) + ": the gradients of layer '" +
                            layers_[l] + "' vanish: norm below " + fmt(options_.vanish_below) +
                            " for " + std::to_string(options_.vanish_records) +
                            " records in a row (now " + fmt(n) + ")");
    } else {
      vanished_for_[l] = 0;
    }
    const bool exploding = n > options_.explode_above;
    if (exploding && !exploding_[l])
      warnings_.push_back("step " + std::to_string(r.step) + ": the gradients of layer '" +
                          layers_[l] + "' explode: norm " + fmt(n) + " above " +
                          fmt(options_.explode_above));
    exploding_[l] = exploding;
  }
}

std::vector<std::string> GradientHealth::take_warnings() { return std::exchange(warnings_, {}); }

}  // namespace adjoint::tools
