// What compile does to a traced graph before running it: common-subexpression and dead-code
// elimination, the split into a forward and a backward, and when each value can be let go.
#pragma once

#include <vector>

#include "adjoint/compile.h"
#include "compile/graph.h"

namespace adjoint::detail {

/// Nodes merged into an earlier identical one (same op, same attributes, same inputs); the
/// graph keeps them, unused, for dead-code elimination to drop. Returns how many.
int eliminate_common_subexpressions(Graph& g);

/// Drops the nodes nothing needed depends on (random draws stay: dropping one would change
/// the generator's stream). Returns how many.
int eliminate_dead_code(Graph& g);

/// The order a graph runs in, and when each value is let go.
struct Schedule {
  std::vector<int> nodes;              ///< in order
  std::vector<std::vector<int>> drop;  ///< after step i, the values it used last
};

/// A traced graph ready to run: the forward, which keeps `saved` for the backward, and the
/// backward.
struct Plan {
  Graph graph;
  Schedule forward;
  Schedule backward;
  std::vector<int> saved;         ///< values of forward nodes the backward reads
  std::vector<int> capture_ids;   ///< value id of each captured tensor
  std::vector<int> constant_ids;  ///< value id of each constant
  /// A forward node reads what another saved for its backward (the function takes a gradient
  /// itself): the graph cannot run op by op through the stack, which does not hand those out.
  bool forward_reads_saved = false;
  /// A backward node reads what another backward node saved: a backward over transformed
  /// cotangents, which goes op by op through the stack, runs eagerly instead.
  bool backward_reads_saved = false;
  int nodes_traced = 0;
  int merged = 0;
  int dropped = 0;
  int recomputed = 0;
  int fused = 0;
  /// The memory plan: the most bytes each run holds at once of the values it makes (the
  /// allocator's size classes; views cost nothing), and the bytes the forward keeps for the
  /// backward. Kernels' own temporaries are not counted.
  std::size_t forward_peak_bytes = 0;
  std::size_t backward_peak_bytes = 0;
  std::size_t saved_bytes = 0;
};

/// Runs the passes the options ask for and schedules the graph.
Plan make_plan(Graph traced, const CompileOptions& options);

}  // namespace adjoint::detail
