// The SVG line plot; see svg_plot.h. Ticks are "nice" numbers (1, 2, 5 times a power of ten).
#include "adjoint/io/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "adjoint/io/text_file.h"

namespace adjoint::io {
namespace {

constexpr double kWidth = 720, kHeight = 420, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

double nice_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<')
      r += "&lt;";
    else if (c == '>')
      r += "&gt;";
    else if (c == '&')
      r += "&amp;";
    else
      r += c;
  }
  return r;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string render_svg_plot(const std::string& title, const std::string& xlabel,
                            const std::string& ylabel, const std::vector<PlotSeries>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const PlotSeries& s : series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  // Headroom for the legend box in the top right, so no curve runs beneath it.
  int named = 0;
  for (const PlotSeries& s : series) named += !s.name.empty();
  const double legend_h = named > 0 ? 18.0 * named + 12 : 0, f = legend_h / ph;
  y1 = (y1 - f * y0) / (1 - f);
  const double ystep = nice_step(y1 - y0, 6), xstep = nice_step(x1 - x0, 8);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep) * ystep;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << escape(title) << "</text>\n";
  for (double y = y0; y <= y1 + ystep / 2; y += ystep) {
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << py(y) << "\" y2=\""
      << py(y) << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4
      << "\" text-anchor=\"end\">" << fmt(y) << "</text>\n";
  }
  for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + xstep / 2; x += xstep) {
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << kTop << "\" y2=\""
      << kTop + ph << "\" stroke=\"#eee\"/>\n<text x=\"" << px(x) << "\" y=\"" << kTop + ph + 16
      << "\" text-anchor=\"middle\">" << fmt(x) << "</text>\n";
  }
  o << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\"/>\n"
    << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 10 << "\" text-anchor=\"middle\">"
    << escape(xlabel) << "</text>\n"
    << "<text transform=\"translate(16," << kTop + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape(ylabel) << "</text>\n";
  for (const PlotSeries& s : series) {
    if (s.markers) {
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]))
          o << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"3\" fill=\""
            << s.color << "\"/>\n";
    } else {
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.5\""
        << (s.dashed ? " stroke-dasharray=\"5,4\"" : "") << " points=\"";
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i])) o << px(s.x[i]) << "," << py(s.y[i]) << " ";
      o << "\"/>\n";
    }
  }
  // The legend last, on a white box.
  if (named > 0)
    o << "<rect x=\"" << kLeft + pw - 176 << "\" y=\"" << kTop + 4 << "\" width=\"170\" height=\""
      << 18 * named + 6 << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  int legend = 0;
  for (const PlotSeries& s : series) {
    if (s.name.empty()) continue;
    const double ly = kTop + 16 + 18 * static_cast<double>(legend++);
    o << "<rect x=\"" << kLeft + pw - 170 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"12\" "
      << "fill=\"" << s.color << "\"/>\n<text x=\"" << kLeft + pw - 152 << "\" y=\"" << ly + 1
      << "\">" << escape(s.name) << "</text>\n";
  }
  o << "</svg>\n";

  return o.str();
}

void write_svg_plot(const std::string& path, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<PlotSeries>& series) {
  write_text_file_atomic(path, render_svg_plot(title, xlabel, ylabel, series), "io.write_svg_plot");
}

}  // namespace adjoint::io
