// Training on several processes (docs/distributed.md): the process group and its collectives,
// the differentiable collectives, data-parallel helpers and the distributed sampler.
#pragma once

#include "adjoint/distributed/comm_backend.h"
#include "adjoint/distributed/data_parallel.h"
#include "adjoint/distributed/ddp.h"
#include "adjoint/distributed/functional.h"
#include "adjoint/distributed/process_group.h"
#include "adjoint/distributed/sampler.h"
#include "adjoint/distributed/sync_batchnorm.h"
#include "adjoint/distributed/work.h"
#include "adjoint/distributed/zero.h"
