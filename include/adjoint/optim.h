// The optimizers umbrella header: Optimizer, SGD, Adam, AdamW, learning-rate schedules and
// gradient clipping, all in namespace adjoint::optim. See docs/optim.md.
#pragma once

#include "adjoint/optim/adam.h"
#include "adjoint/optim/clip_grad.h"
#include "adjoint/optim/grad_scaler.h"
#include "adjoint/optim/optimizer.h"
#include "adjoint/optim/schedule.h"
#include "adjoint/optim/sgd.h"
