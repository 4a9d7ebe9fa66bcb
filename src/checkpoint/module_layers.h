// The layers and Dropout generators of an nn::Sequential, for the checkpointing entry points
// that take either a list of layers or an nn::Sequential (checkpoint_sequential, the budget
// planner and runner).
#pragma once

#include <cstddef>
#include <vector>

#include "adjoint/checkpoint.h"
#include "adjoint/nn/container.h"

namespace adjoint::detail {

/// One CheckpointLayer per module, each keeping its module alive.
inline std::vector<CheckpointLayer> module_layers(const nn::Sequential& seq) {
  std::vector<CheckpointLayer> layers;
  for (std::size_t i = 0; i < seq.size(); ++i)
    layers.push_back([m = seq[i]](const Tensor& x) { return (*m)(x); });
  return layers;
}

/// `options` with the Dropout generators of every module added.
inline CheckpointOptions with_module_generators(const nn::Sequential& seq,
                                                CheckpointOptions options) {
  for (std::size_t i = 0; i < seq.size(); ++i)
    for (Generator* g : module_generators(*seq[i])) options.generators.push_back(g);
  return options;
}

/// layers[begin, end) applied to x in order (one segment of a checkpointed chain).
inline Tensor run_layers(const std::vector<CheckpointLayer>& layers, std::size_t begin,
                         std::size_t end, Tensor x) {
  for (std::size_t i = begin; i < end; ++i) x = layers[i](x);
  return x;
}

}  // namespace adjoint::detail
