// nn::Embedding: a lookup table of learned rows, indexed by int64 token ids.
#pragma once

#include <cstdint>

#include "adjoint/generator.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// Rows of "weight" [num_embeddings, dim] picked by int64 indices of any shape: the output
/// has the indices' shape plus [dim]. The gradient sums over repeated indices. Initialised
/// N(0, init_std^2) (N(0, 1), as libtorch, unless told), drawn from `gen` (default when null).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator* gen = nullptr, double init_std = 1.0);
  /// Throws a DType error for non-int64 indices and an Index error for ids out of range.
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

  Tensor weight;  ///< [num_embeddings, dim]

 private:
  int64_t num_, dim_;
};

}  // namespace adjoint::nn
