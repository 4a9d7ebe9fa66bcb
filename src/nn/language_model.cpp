// nn::LanguageModel's shared parts: the id checks and the loss.
#include "adjoint/nn/language_model.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

void LanguageModel::check_ids(const Tensor& idx, const char* op) const {
  ADJOINT_CHECK(idx.defined(), Value, op, "got undefined token ids");
  ADJOINT_CHECK(idx.dtype() == DType::Int64 || idx.dtype() == DType::Int32, DType, op,
                "token ids must be int64 or int32, got ", describe(idx));
  ADJOINT_CHECK(idx.dim() == 2, Shape, op, "token ids must be [B, T], got ", describe(idx));
  ADJOINT_CHECK(idx.size(1) <= context(), Shape, op, "sequence length ", idx.size(1),
                " exceeds the context ", context(), ": ", describe(idx));
}

Tensor LanguageModel::loss(const Tensor& idx, const Tensor& targets) {
  const std::string op = "nn." + type_name();
  ADJOINT_CHECK(targets.defined(), Value, op, "got undefined targets");
  ADJOINT_CHECK(targets.dtype() == DType::Int64 || targets.dtype() == DType::Int32, DType, op,
                "targets must be int64 or int32, got ", describe(targets));
  ADJOINT_CHECK(idx.defined() && targets.shape() == idx.shape(), Shape, op, "targets ",
                describe(targets), " must have the shape of the token ids ", describe(idx));
  Tensor logits = (*this)(idx);  // with the model's own hooks, as a call of model(idx)
  const int64_t rows = idx.numel();
  return cross_entropy(logits.reshape({rows, vocab()}), targets.reshape({rows}).to(DType::Int64));
}

}  // namespace adjoint::nn
