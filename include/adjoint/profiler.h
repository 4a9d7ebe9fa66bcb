// Profiles: where the time of a step goes, op by op. A Profiler guard records every forward op
// and every backward node its thread runs while it is alive, with start and end times, input
// shapes and dtypes, FLOPs and bytes; it writes the Chrome trace-event JSON that
// chrome://tracing and Perfetto (ui.perfetto.dev) open, and sums the events per op into a
// table like torch.profiler's key_averages(). With no profiler alive it costs nothing: the
// per-op path already tests one thread-local pointer for observers. docs/debugging.md shows a
// trace and a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/shape.h"

namespace adjoint {

/// One forward op or backward node.
struct ProfileEvent {
  std::string name;       ///< the op ("matmul") or the node ("MatmulBackward")
  bool backward = false;  ///< a backward node (else a forward op)
  /// Nanoseconds since the profiler started.
  int64_t start_ns = 0, end_ns = 0;
  /// Forward ops called inside another op's forward (a composite such as layer_norm calling
  /// its parts) have depth > 0; top-level events have depth 0 and never overlap.
  int depth = 0;
  /// A small id of the thread that ran it (1, 2, ... in the order threads first profiled).
  uint32_t thread = 0;
  /// Forward: the inputs (undefined ones as empty shapes) and the output. Backward: the
  /// gradients the node returned, one per input, and no output.
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  Shape output_shape;
  /// Forward: Note [FLOP counting] (2mnk for matmuls, one per element otherwise). Backward:
  /// twice the forward op's, the usual estimate, when its forward ran under this profiler;
  /// otherwise 0.
  uint64_t flops = 0;
  /// Forward: bytes of the inputs and the output. Backward: bytes of the gradients returned.
  uint64_t bytes = 0;
  double duration_ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

/// Events summed per (name, direction): what a profile's table shows.
struct ProfileSummary {
  std::string name;
  bool backward = false;
  int64_t count = 0;
  double total_ms = 0;  ///< of the top-level events only (nested ones are inside their parent)
  double mean_ms = 0;
  double share = 0;  ///< total_ms / the profile's wall time
  uint64_t flops = 0;
  uint64_t bytes = 0;
};

/// Records this thread's forward ops and backward nodes while alive (backward runs on the
/// thread that called it, so a training step is one thread's work; ops of other threads are
/// not recorded). Nestable with memory timelines, graph recorders and other profilers: each
/// sees every event.
class Profiler {
 public:
  Profiler();
  /// Stops recording (if stop() was not called).
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// Stops recording; the events stay. Call it on the thread that made the profiler. Stopped
  /// or destroyed while a memory timeline or profiler made after it is still recording, it
  /// keeps passing their events on (a few bytes stay allocated until the thread's chain is
  /// gone).
  void stop();
  const std::vector<ProfileEvent>& events() const;
  /// From construction to stop() (or to now while recording).
  double wall_ms() const;

  /// Per op, sorted by total time, longest first (like key_averages()).
  std::vector<ProfileSummary> summary() const;
  /// summary() as a text table of its first `rows` rows, with the totals.
  std::string table(std::size_t rows = 20) const;
  /// The events as Chrome trace-event JSON ("X" complete events, microseconds).
  std::string chrome_trace() const;
  /// Writes chrome_trace() to `path` atomically (a temporary file renamed into place).
  void write_chrome_trace(const std::string& path) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace adjoint
