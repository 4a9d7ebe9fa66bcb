// A byte-level text dataset for language models: the bytes of some files, split into a
// training and a validation part, with seeded random batches of (inputs, next-byte targets).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint::data {

/// A batch: inputs [batch, context] and targets [batch, context] (the next byte of each
/// input position), both int64.
struct TextBatch {
  Tensor inputs;
  Tensor targets;
};

enum class Split { Train, Validation };

class ByteDataset {
 public:
  /// The bytes of `path`: one file, or every regular file under a directory (recursively, in
  /// name order, identical files once: a directory of licenses holds symlinks to the same
  /// text). The last `validation_fraction` of the bytes is the validation split. Throws an
  /// IO error naming the path when it is missing, unreadable or holds no bytes.
  explicit ByteDataset(const std::string& path, double validation_fraction = 0.1);
  /// From bytes in memory (tests, generated corpora).
  ByteDataset(std::vector<uint8_t> bytes, double validation_fraction = 0.1);

  /// `batch` windows of context + 1 bytes at uniformly random offsets of the split, drawn
  /// from `gen` (the same generator state gives the same batch). Throws when the split is
  /// shorter than context + 1 bytes.
  TextBatch batch(Split split, int64_t batch, int64_t context, Generator& gen) const;

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  int64_t train_size() const { return split_; }
  int64_t validation_size() const { return static_cast<int64_t>(bytes_.size()) - split_; }
  /// The files read (empty when built from bytes).
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<std::string> files_;
  int64_t split_ = 0;  // bytes_[0, split_) train, the rest validation
};

}  // namespace adjoint::data
