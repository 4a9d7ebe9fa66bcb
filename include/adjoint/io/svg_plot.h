// A small line-plot writer (SVG, no dependencies): axes with "nice" ticks, several series and
// a legend. The trainer's loss curve and the memory timelines (memory.h) draw with it.
#pragma once

#include <string>
#include <vector>

namespace adjoint::io {

struct PlotSeries {
  std::string name;  ///< legend entry; an empty name gets none
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool markers = false;  ///< dots at the points instead of a line
  bool dashed = false;   ///< a dashed line (guides such as "backward starts here")
};

/// The plot as SVG text. Non-finite y values are skipped.
std::string render_svg_plot(const std::string& title, const std::string& xlabel,
                            const std::string& ylabel, const std::vector<PlotSeries>& series);

/// Writes render_svg_plot(...) to `path` atomically (io/text_file.h); throws adjoint::Error
/// (IO, op "io.write_svg_plot") when it cannot.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<PlotSeries>& series);

}  // namespace adjoint::io
