// nn::Embedding: N(0, init_std^2) rows, looked up with adjoint::embedding (index_select
// forward, index_add backward).
#include "adjoint/nn/embedding.h"

#include "adjoint/error.h"
#include "adjoint/nn/init.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator* gen, double init_std)
    : Module("Embedding"), num_(num_embeddings), dim_(dim) {
  ADJOINT_CHECK(num_embeddings >= 0 && dim >= 0, Value, "nn.Embedding",
                "sizes must be non-negative, got ", num_embeddings, " x ", dim);
  weight = register_parameter("weight", empty({num_embeddings, dim}));
  init::normal_(weight, gen ? *gen : default_generator(), 0.0, init_std);
}

Tensor Embedding::forward(const Tensor& indices) {
  ADJOINT_CHECK(indices.defined(), Value, "nn.Embedding", "got undefined indices");
  ADJOINT_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, DType,
                "nn.Embedding", "indices must be int64 or int32, got ", describe(indices));
  // Token ids often arrive as int32 (as PyTorch's Embedding, both are taken).
  return embedding(weight, indices.dtype() == DType::Int64 ? indices : indices.to(DType::Int64));
}

}  // namespace adjoint::nn
