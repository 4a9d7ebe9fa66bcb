// The umbrella header: everything a user of adjoint needs.
#pragma once

#include "adjoint/allocator.h"
#include "adjoint/autograd.h"
#include "adjoint/checkpoint_loop.h"
#include "adjoint/dtype.h"
#include "adjoint/error.h"
#include "adjoint/generator.h"
#include "adjoint/grad_mode.h"
#include "adjoint/offload.h"
#include "adjoint/gradcheck.h"
#include "adjoint/ops.h"
#include "adjoint/transforms.h"
#include "adjoint/scalar.h"
#include "adjoint/shape.h"
#include "adjoint/tensor.h"
#include "adjoint/threading.h"
