// The trainer's plots use the library's SVG line plot (include/adjoint/io/svg_plot.h), which
// the memory timelines draw with too; these names keep the tools' spelling of it.
#pragma once

#include "adjoint/io/svg_plot.h"

namespace adjoint::tools {

using Series = io::PlotSeries;
using io::write_svg_plot;

}  // namespace adjoint::tools
