// The distributed sampler for data::ByteDataset: every rank draws different, seeded batches,
// which together are exactly the batch one process with world_size times the batch would draw
// from the same seed, and a saved state resumes the sequence exactly.
#pragma once

#include <cstdint>

#include "adjoint/data/text.h"
#include "adjoint/generator.h"

namespace adjoint::dist {

class DistributedBatchSampler {
 public:
  /// Rank `rank` of `world_size` gets `batch_per_rank` windows of `context` bytes per call.
  /// Keeps a reference to `dataset`, which must outlive the sampler.
  DistributedBatchSampler(const data::ByteDataset& dataset, data::Split split,
                          int64_t batch_per_rank, int64_t context, uint64_t seed, int rank,
                          int world_size);

  /// The next batch of this rank: rows [rank * batch_per_rank, (rank + 1) * batch_per_rank) of
  /// the global batch of world_size * batch_per_rank windows drawn from the shared generator.
  data::TextBatch next();

  /// What resume needs: the generator's state and how many batches were drawn.
  struct State {
    Generator::State generator;
    int64_t step = 0;
  };
  State state() const { return {gen_.state(), step_}; }
  void set_state(const State& state);
  int64_t step() const { return step_; }

 private:
  const data::ByteDataset& dataset_;
  data::Split split_;
  int64_t batch_, context_;
  int rank_, world_;
  Generator gen_;
  int64_t step_ = 0;
};

}  // namespace adjoint::dist
