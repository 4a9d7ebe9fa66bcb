// The I/O umbrella header: safetensors files and training checkpoints, in namespace adjoint::io.
// See docs/checkpoints.md.
#pragma once

#include "adjoint/io/checkpoint.h"
#include "adjoint/io/safetensors.h"
