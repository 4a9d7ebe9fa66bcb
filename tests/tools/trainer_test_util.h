// Shared by the trainer tests: a small repetitive corpus and a tiny model configuration whose
// steps take milliseconds.
#pragma once

#include <string>
#include <vector>

#include "gpt_trainer.h"

namespace adjoint::trainer_test {

inline data::ByteDataset corpus(const std::string& text =
                                    "the quick brown fox jumps over the lazy dog. a stitch in "
                                    "time saves nine. ") {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 40; ++i) bytes.insert(bytes.end(), text.begin(), text.end());
  return data::ByteDataset(std::move(bytes), 0.1);
}

inline tools::TrainConfig tiny() {
  tools::TrainConfig c;
  c.model = {.vocab = 256, .context = 16, .d_model = 16, .heads = 2, .layers = 2};
  c.batch = 4;
  c.steps = 8;
  c.warmup = 2;
  c.eval_batches = 2;
  c.seed = 3;
  return c;
}

}  // namespace adjoint::trainer_test
