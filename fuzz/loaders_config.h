// What the loader target loads into, shared with the seed generator so that the seeds match
// it: two parameters for load_checkpoint, and the trainer configuration Trainer::resume expects.
#pragma once

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "gpt_trainer.h"

namespace adjoint::fuzz {

/// Fresh parameters "w" [2, 3] float32 and "b" [3] float64, both requiring grad.
inline io::NamedTensors loaders_params() {
  Tensor w = tensor({0.5, -1, 2, 0.25, 3, -4}, Shape{2, 3}).requires_grad_();
  Tensor b = tensor({1, 2, 3}, TensorOptions(DType::Float64)).requires_grad_();
  return {{"w", w}, {"b", b}};
}

/// The smallest GPT the trainer builds: its checkpoint is a few KB.
inline tools::TrainConfig loaders_trainer_config() {
  tools::TrainConfig c;
  c.model = {.vocab = 4, .context = 2, .d_model = 2, .heads = 1, .layers = 1};
  c.batch = 1;
  c.steps = 2;
  c.warmup = 1;
  c.eval_batches = 1;
  return c;
}

}  // namespace adjoint::fuzz
