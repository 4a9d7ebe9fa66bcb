// Seeing activation memory: live and peak bytes of the tensors saved for backward and of all
// tensor storage, a summary of what a graph holds (like JAX's print_saved_residuals), and a
// timeline of both after every op of a forward and a backward pass, as CSV and SVG.
// What is counted, and how to read a timeline: docs/memory.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/shape.h"
#include "adjoint/tensor.h"

namespace adjoint {

// ---------------------------------------------------------------------------------------------
// Live and peak bytes
// ---------------------------------------------------------------------------------------------

/// Counts the tensors saved for backward while alive (process-wide; trackers nest). Counting
/// is off otherwise, so recording ops costs nothing extra; a tensor saved while it was off is
/// never counted. The first tracker resets the saved peak to the current bytes.
class SavedMemoryTracker {
 public:
  SavedMemoryTracker();
  ~SavedMemoryTracker();
  SavedMemoryTracker(const SavedMemoryTracker&) = delete;
  SavedMemoryTracker& operator=(const SavedMemoryTracker&) = delete;
};

/// Whether a SavedMemoryTracker (or a MemoryTimeline) is alive.
bool saved_memory_tracking();

/// Bytes held by tensors saved for backward (counted while tracking). Each storage counts
/// once and whole, however many saved tensors or views of it there are.
struct SavedMemoryStats {
  std::size_t current_bytes = 0;  ///< distinct storages held by live saved tensors
  std::size_t peak_bytes = 0;     ///< most current_bytes since tracking began or the last reset
  std::size_t tensors = 0;        ///< live saved tensors counted
  std::size_t storages = 0;       ///< distinct storages among them
};

SavedMemoryStats saved_memory_stats();
/// Sets the saved peak to the current bytes.
void reset_peak_saved_memory_stats();

/// Saved activations and all tensor storage (the caching allocator's memory_stats(), whose
/// bytes are rounded up to its size classes) side by side.
struct MemoryUsage {
  std::size_t saved_bytes = 0;
  std::size_t saved_peak_bytes = 0;
  std::size_t storage_bytes = 0;
  std::size_t storage_peak_bytes = 0;
};

MemoryUsage memory_usage();
/// Resets both peaks to the current bytes.
void reset_peak_memory_usage();

// ---------------------------------------------------------------------------------------------
// What a graph holds
// ---------------------------------------------------------------------------------------------

struct SavedTensorInfo {
  std::string role;       ///< "input", "output" or "saved" (an extra tensor the forward kept)
  std::size_t index = 0;  ///< which input (or extra) of the node
  Shape shape;
  DType dtype = kDefaultFloat;
  std::size_t bytes = 0;          ///< the tensor's own elements: numel * itemsize
  std::size_t storage_bytes = 0;  ///< the storage it keeps alive (0 when freed, or when a
                                  ///< saved-tensor hook keeps the data elsewhere)
  bool shared = false;            ///< an earlier entry holds the same storage (counted there)
  bool freed = false;             ///< released by a backward pass
  bool leaf = false;              ///< had no grad_fn: a parameter or input data, no activation
};

struct SavedNodeInfo {
  std::string name;  ///< the node's name(): "ExpBackward"
  uint64_t sequence_nr = 0;
  std::vector<SavedTensorInfo> saved;
};

struct SavedTensorsSummary {
  std::vector<SavedNodeInfo> nodes;  ///< every node of the graph, in creation (forward) order
  std::size_t num_saved = 0;         ///< saved tensors over all nodes
  std::size_t num_storages = 0;      ///< distinct storages they hold
  std::size_t total_bytes = 0;       ///< bytes of those storages: what the graph keeps alive
  std::size_t leaf_bytes = 0;        ///< of those, storages first saved as a leaf (parameters,
                                     ///< inputs): total - leaf is the activations' share
  /// A table of the nodes that save something, one row per saved tensor, and the totals.
  std::string to_string() const;
};

/// Walks the graph behind `outputs` (typically a loss) and lists what each node saved for
/// backward. Needs no tracking: it reads the graph as it is now. A tensor without a graph
/// gives an empty summary.
SavedTensorsSummary saved_tensors_summary(const std::vector<Tensor>& outputs);
SavedTensorsSummary saved_tensors_summary(const Tensor& output);
std::ostream& operator<<(std::ostream& os, const SavedTensorsSummary& s);

// ---------------------------------------------------------------------------------------------
// Timeline
// ---------------------------------------------------------------------------------------------

enum class MemoryPhase { Start, Forward, Backward };

/// Memory right after one op (forward) or one node of the backward engine (backward).
struct MemoryEvent {
  std::string op;  ///< "exp" for a forward op, "ExpBackward" for a backward node
  MemoryPhase phase = MemoryPhase::Forward;
  std::size_t saved_bytes = 0;       ///< saved activations after the op
  std::size_t saved_peak_bytes = 0;  ///< most saved bytes since the previous event, this one
                                     ///< included: above both, a node held more while it ran
                                     ///< (a checkpoint's recomputation)
  std::size_t storage_bytes = 0;     ///< all tensor storage after the op
};

/// Records a MemoryEvent after every op on this thread that goes through the autograd layer
/// and after every backward node, while alive (or until stop()). Turns saved-tensor counting
/// on while recording (SavedMemoryTracker). Timelines nest: each records the events of its
/// own lifetime. Stop it on the thread that made it.
class MemoryTimeline {
 public:
  MemoryTimeline();
  ~MemoryTimeline();
  MemoryTimeline(const MemoryTimeline&) = delete;
  MemoryTimeline& operator=(const MemoryTimeline&) = delete;

  /// Stops recording; the events stay. Idempotent.
  void stop();
  bool recording() const;

  /// The bytes when recording began (phase Start, op "start").
  const MemoryEvent& start() const;
  /// One per op and backward node, in order.
  const std::vector<MemoryEvent>& events() const;

  /// "index,phase,op,saved_bytes,saved_peak_bytes,storage_bytes", then start() as index 0
  /// and the events as 1..n.
  std::string csv() const;
  /// The plot: saved and storage bytes over the op index, dashed lines where each backward
  /// pass starts, and dots where an op held more saved bytes while it ran than after.
  std::string svg(const std::string& title = "memory timeline") const;
  /// Write csv() / svg() atomically (temp file + rename); adjoint::Error (IO) when they cannot.
  void write_csv(const std::string& path) const;
  void write_svg(const std::string& path, const std::string& title = "memory timeline") const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;  // shared with the thread's dispatcher while recording
};

/// "start", "forward", "backward".
const char* to_string(MemoryPhase phase);

}  // namespace adjoint
