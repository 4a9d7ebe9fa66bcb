// nn::LanguageModel: what a decoder-only model over token ids gives its trainer and sampler
// (adjoint-train, adjoint-sample): logits, the mean cross-entropy, its context and vocabulary,
// and the hook that runs its blocks (activation checkpointing). nn::GPT and nn::Llama are ones.
#pragma once

#include <cstdint>
#include <functional>

#include "adjoint/nn/container.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

class LanguageModel : public Module {
 public:
  using Module::Module;

  /// idx: [B, T] int64 token ids with T <= context(); returns logits [B, T, vocab()].
  Tensor forward(const Tensor& idx) override = 0;
  /// Mean cross-entropy of model(idx) against `targets` ([B, T] int64) over the B·T positions.
  virtual Tensor loss(const Tensor& idx, const Tensor& targets);

  virtual int64_t context() const = 0;
  virtual int64_t vocab() const = 0;

  /// How forward runs the blocks: blocks->forward(x) when empty. Setting it changes how
  /// the blocks execute, not what they compute: adjoint-train sets it to checkpoint each
  /// block, or segments of blocks (see docs/checkpointing.md).
  std::function<Tensor(Sequential& blocks, const Tensor& x)> run_blocks;

 protected:
  /// The checks every forward makes of token ids, naming `op`.
  void check_ids(const Tensor& idx, const char* op) const;
};

}  // namespace adjoint::nn
