// A small line-plot writer (SVG, no dependencies) for the trainer's loss curve and the memory
// timelines: axes with ticks, several series, a legend. Written atomically (temp + rename).
#pragma once

#include <string>
#include <vector>

namespace adjoint::tools {

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool markers = false;  ///< dots at the points instead of a line
};

/// Writes the plot to `path`; throws adjoint::Error (IO) when it cannot.
void write_svg_plot(const std::string& path, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<Series>& series);

}  // namespace adjoint::tools
