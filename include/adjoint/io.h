// The I/O umbrella header: safetensors files, training checkpoints, SVG line plots and atomic
// text files, in namespace adjoint::io. See docs/checkpoints.md.
#pragma once

#include "adjoint/io/checkpoint.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/io/svg_plot.h"
#include "adjoint/io/text_file.h"
