// What the function transforms (src/transforms) need from the engine: inputs with a node of
// their own, a test for whether a traced graph reaches tensors from outside the transform,
// and detaching that keeps forward-mode tangents.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::detail {

/// A handle on x's data that requires grad and has a gradient edge of its own, so that
/// gradients captured at it count only the uses through it. When x requires grad (an outer
/// transform is differentiating it) the handle is an alias op recorded on x's graph; else a
/// fresh leaf. Its tangents are x's.
Tensor fresh_input(const Tensor& x);

/// The sequence number the next node will get: nodes made before a transform started have
/// smaller ones.
uint64_t next_sequence_nr();

/// Takes a sequence number, as making a node does.
uint64_t take_sequence_nr();

/// Whether the graph behind `outputs` reaches a node made before `first_seq` or a leaf other
/// than `own_inputs` and the inputs of transforms started since `first_seq`: then the gradients a
/// transform computes depend on tensors an outer computation may differentiate, and must be
/// recorded (create_graph).
bool graph_reaches_outside(const std::vector<Tensor>& outputs,
                           const std::vector<Tensor>& own_inputs, uint64_t first_seq);

/// A handle on t's data without reverse-mode history but with t's visible tangents.
Tensor detach_keep_tangents(const Tensor& t);

}  // namespace adjoint::detail
