// Pointwise fusion and recomputation: the passes that turn chains and trees of pointwise ops
// into one pass over memory (Note [Pointwise fusion] in fusion.cpp).
#pragma once

#include "compile/graph.h"

namespace adjoint::detail {

/// Whether node n is a pointwise op compile can fuse: an op with a `fusion()` rule whose
/// inputs and result share one dtype, float32 or float64.
bool fusible(const Graph& g, const GraphNode& n);

/// Makes the backward compute again the forward's pointwise values it reads, from what they
/// were computed from, instead of keeping them (what PyTorch's partitioner does for pointwise
/// ops). Returns how many nodes it copied into the backward.
int recompute_pointwise(Graph& g);

/// Replaces each group of two or more fusible nodes of one phase, one dtype and one shape by a
/// fused node that runs them as one loop over blocks of elements. Returns how many nodes were
/// fused away.
int fuse_pointwise(Graph& g);

}  // namespace adjoint::detail
