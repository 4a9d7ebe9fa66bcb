// grads.csv and grads.svg of adjoint-train, from a GradientHealth's records (see
// gradient_health.h). The plot is two of the library's line plots stacked in one SVG: norms
// span decades, so both panels show log10 values.
#include <cmath>
#include <sstream>

#include "adjoint/io/text_file.h"
#include "gradient_health.h"
#include "svg_plot.h"

namespace adjoint::tools {
namespace {

// Ten distinguishable colours (matplotlib's tab10); layers beyond ten reuse them dashed.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr double kPanelHeight = 420;  // render_svg_plot's height

double log10_or_nan(double v) { return v > 0 ? std::log10(v) : NAN; }

// One series per layer: f(record, layer) against the step.
template <class F>
std::vector<Series> per_layer(const GradientHealth& h, F&& f) {
  std::vector<Series> out;
  for (std::size_t l = 0; l < h.layers().size(); ++l) {
    Series s{.name = h.layers()[l], .x = {}, .y = {}, .color = kPalette[l % 10], .dashed = l >= 10};
    for (const GradientRecord& r : h.records()) {
      s.x.push_back(static_cast<double>(r.step));
      s.y.push_back(f(r, l));
    }
    out.push_back(std::move(s));
  }
  return out;
}

Series threshold(const GradientHealth& h, double value) {
  Series s{.name = "", .x = {}, .y = {}, .color = "#999", .dashed = true};
  if (h.records().empty() || value <= 0) return s;
  for (double step : {h.records().front().step, h.records().back().step}) {
    s.x.push_back(step);
    s.y.push_back(std::log10(value));
  }
  return s;
}

}  // namespace

void write_gradient_csv(const GradientHealth& h, const std::string& path) {
  std::ostringstream o;
  o.precision(9);
  o << "step,parameter,layer,grad_norm,weight_norm,update_norm,update_ratio\n";
  for (const GradientRecord& r : h.records())
    for (std::size_t i = 0; i < r.grad_norm.size(); ++i) {
      const bool updated = i < r.update_norm.size();
      o << r.step << "," << h.names()[i] << "," << layer_of(h.names()[i]) << "," << r.grad_norm[i]
        << "," << r.weight_norm[i] << ",";
      if (updated)
        o << r.update_norm[i] << ","
          << (r.weight_norm[i] > 0 ? r.update_norm[i] / r.weight_norm[i] : NAN);
      else
        o << ",";  // the run stopped between backward and the update
      o << "\n";
    }
  io::write_text_file_atomic(path, o.str(), "train");
}

void write_gradient_svg(const GradientHealth& h, const std::string& path,
                        const std::string& title) {
  std::vector<Series> grads = per_layer(h, [&](const GradientRecord& r, std::size_t l) {
    return log10_or_nan(h.layer_norm(r.grad_norm, l));
  });
  grads.push_back(threshold(h, h.options().explode_above));
  grads.push_back(threshold(h, h.options().vanish_below));
  const std::vector<Series> ratios = per_layer(h, [&](const GradientRecord& r, std::size_t l) {
    if (r.update_norm.empty()) return static_cast<double>(NAN);
    const double w = h.layer_norm(r.weight_norm, l);
    return w > 0 ? log10_or_nan(h.layer_norm(r.update_norm, l) / w) : NAN;
  });
  const std::string top = io::render_svg_plot(
      title + ": gradient norm per layer (dashed: vanish and explode thresholds)", "step",
      "log10 gradient norm", grads);
  std::string bottom = io::render_svg_plot(title + ": update / weight per layer", "step",
                                           "log10 (update norm / weight norm)", ratios);
  bottom.replace(0, 4, "<svg y=\"" + std::to_string(static_cast<int>(kPanelHeight)) + "\"");
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"" << 2 * kPanelHeight
    << "\">\n"
    << top << bottom << "</svg>\n";
  io::write_text_file_atomic(path, o.str(), "train");
}

}  // namespace adjoint::tools
