// nn::GPT: a GPT-2 style decoder-only language model (token and learned position
// embeddings, pre-LayerNorm blocks, a final LayerNorm and an output head tied to the token
// embedding). With GPTConfig{256, 128, 256, 4, 4} it is the gpt-tiny benchmark model.
#pragma once

#include <cstdint>
#include <memory>

#include "adjoint/generator.h"
#include "adjoint/nn/container.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/embedding.h"
#include "adjoint/nn/language_model.h"
#include "adjoint/nn/normalization.h"
#include "adjoint/nn/transformer.h"

namespace adjoint::nn {

struct GPTConfig {
  int64_t vocab = 256;    ///< number of token ids
  int64_t context = 128;  ///< longest sequence (rows of wpe, size of the causal mask)
  int64_t d_model = 256;  ///< width of the residual stream
  int64_t heads = 4;      ///< attention heads; must divide d_model
  int64_t layers = 4;     ///< transformer blocks
  double dropout = 0;  ///< after the embeddings, on attention weights, after each residual branch
};

/// logits = ln_f(blocks(drop(wte[idx] + wpe[0..T-1]))) wteᵀ, shape [B, T, vocab].
///
/// Parameters, in this order and with these names:
///   wte.weight [vocab, d], wpe.weight [context, d]  (both N(0, 0.02²))
///   blocks.{i}.ln1.{weight,bias}, blocks.{i}.attn.qkv.{weight,bias},
///   blocks.{i}.attn.proj.{weight,bias}, blocks.{i}.ln2.{weight,bias},
///   blocks.{i}.mlp.fc.{weight,bias}, blocks.{i}.mlp.fc_out.{weight,bias}
///   ln_f.{weight,bias}
/// Linear layers have libtorch's default init and LayerNorms weight 1, bias 0. The output
/// head has no parameter of its own: it multiplies by wte.weight, so the tie is one tensor
/// that receives both gradients. Random draws come from `gen` (the default generator when
/// null), in the order above.
class GPT : public LanguageModel {
 public:
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);

  /// idx: [B, T] int64 token ids with T <= context; returns logits [B, T, vocab]. The loss
  /// (LanguageModel::loss) is the mean cross-entropy of these over the B·T positions; the
  /// blocks run through run_blocks when it is set.
  Tensor forward(const Tensor& idx) override;

  const GPTConfig& config() const { return config_; }
  int64_t context() const override { return config_.context; }
  int64_t vocab() const override { return config_.vocab; }

  std::shared_ptr<Embedding> wte;
  std::shared_ptr<Embedding> wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Sequential> blocks;  ///< children "0" .. "layers-1", each a Block
  std::shared_ptr<LayerNorm> ln_f;

 private:
  GPTConfig config_;
};

}  // namespace adjoint::nn
