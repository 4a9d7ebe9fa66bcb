// DistributedBatchSampler. Every rank draws the whole global batch's offsets from the same
// seeded generator and keeps its rows: drawing offsets is cheap next to a training step, and it
// makes N ranks with batch B see exactly what one process with batch N * B sees (the property
// the data-parallel equivalence tests rely on), with no communication.
#include "adjoint/distributed/sampler.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::dist {

DistributedBatchSampler::DistributedBatchSampler(const data::ByteDataset& dataset,
                                                 data::Split split, int64_t batch_per_rank,
                                                 int64_t context, uint64_t seed, int rank,
                                                 int world_size)
    : dataset_(dataset),
      split_(split),
      batch_(batch_per_rank),
      context_(context),
      rank_(rank),
      world_(world_size),
      gen_(seed) {
  ADJOINT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, Value,
                "dist.DistributedBatchSampler", "rank ", rank, " is not in a world of ",
                world_size);
  ADJOINT_CHECK(batch_per_rank > 0 && context > 0, Value, "dist.DistributedBatchSampler",
                "batch_per_rank and context must be positive, got ", batch_per_rank, " and ",
                context);
}

data::TextBatch DistributedBatchSampler::next() {
  data::TextBatch all = dataset_.batch(split_, batch_ * world_, context_, gen_);
  ++step_;
  return {all.inputs.narrow(0, rank_ * batch_, batch_).clone(),
          all.targets.narrow(0, rank_ * batch_, batch_).clone()};
}

void DistributedBatchSampler::set_state(const State& state) {
  ADJOINT_CHECK(state.step >= 0, Value, "dist.DistributedBatchSampler",
                "step must be non-negative, got ", state.step);
  gen_.set_state(state.generator);
  step_ = state.step;
}

}  // namespace adjoint::dist
