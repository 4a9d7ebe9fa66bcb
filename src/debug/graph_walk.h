// The nodes of a graph, found by walking next edges from the outputs: what every reader in
// src/debug starts from. Iterative, since graphs may be a million nodes deep.
#pragma once

#include <vector>

#include "adjoint/autograd.h"

namespace adjoint::debug {

/// Every node reachable from `outputs`, in creation order (the order the forward made them).
/// Throws adjoint::Error naming `op` when `outputs` is empty, holds an undefined tensor, or
/// none of them has a graph (no input needed a gradient).
std::vector<Node*> graph_nodes(const std::vector<Tensor>& outputs, const char* op);

/// "MulBackward" -> "mul", "LogSoftmaxBackward" -> "log_softmax": the forward op's name
/// when no recorder saw the op (undoing detail::backward_name).
std::string forward_name(const std::string& node_name);

}  // namespace adjoint::debug
