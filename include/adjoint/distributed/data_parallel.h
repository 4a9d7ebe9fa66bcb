// Data parallelism by hand: parameters broadcast from one rank, gradients averaged after
// backward (no overlap). DistributedDataParallel (ddp.h) averages them during backward.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/distributed/process_group.h"
#include "adjoint/nn/module.h"

namespace adjoint::dist {

/// Overwrites each tensor, in place, with root's values (parameters, buffers), so that every
/// rank starts from the same model. Every rank passes the same list (shape-checked).
void broadcast_tensors(const std::vector<Tensor>& tensors, int root = 0,
                       ProcessGroup* group = nullptr);
/// broadcast_tensors over the module's parameters, then its buffers.
void broadcast_module(nn::Module& module, int root = 0, ProcessGroup* group = nullptr);

/// Replaces each parameter's .grad with its average over the ranks, after backward and before
/// the optimizer step. Gradients of one dtype travel flattened in buckets of at most
/// `bucket_bytes`, all queued before the first is waited on. A parameter with no .grad on some
/// ranks counts as zero there; one with no .grad on any rank keeps none (so optimizers still
/// skip it). Every rank passes the same parameters in the same order.
void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group = nullptr,
                       int64_t bucket_bytes = 25 << 20);

}  // namespace adjoint::dist
