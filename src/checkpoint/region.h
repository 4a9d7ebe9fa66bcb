// Region: one call of checkpoint(). It runs the function under saved-tensor hooks that keep an
// index instead of the tensor, and in backward runs it again to fill those indices.
// The public entry points are in checkpoint.cpp and sequential.cpp.
//
// Note [Checkpointed regions]
// This is PyTorch's non-reentrant checkpoint. The first run records the graph as usual, but
// every tensor an op saves goes to the region's pack hook, which returns a Holder (an index
// into the region's slots). The first unpack of a Holder whose slot is empty, during a
// backward, runs the function again with grad on, on the inputs the region saved, with the
// generator states of the first run and with recompute hooks that put the k-th saved tensor
// into slot k. Backward then goes on through the first run's nodes: a recomputed tensor gets
// the gradient edge of the tensor it stands for (SavedTensor re-attaches it), so the
// recomputed graph itself is dropped at once. An unpack consumes its slot, so a later
// backward (retain_graph, double backward) recomputes again rather than holding everything.
// While the function runs the first time the slots do hold the tensors: a backward inside
// it (grad() of an inner function) needs them. They are dropped when it returns.
//
// The region's inputs are saved as SavedTensors under the hooks active when checkpoint is
// called: an enclosing region's when nested, so an inner region keeps only an index as well
// and its recomputation first asks the enclosing one for its inputs. Unpacking them also runs
// the in-place version check: an input modified between forward and backward throws.
//
// Note [Op log]
// Every op of the first run is logged (the OpCache layer, see src/dispatch/op_cache.h) and the
// recomputation must run the same ops in the same order, saving tensors of the same shapes
// and dtypes; anything else throws, naming the op. Under a selective policy the log also keeps
// the results of the ops the policy saves: the recomputation takes those instead of running
// the op (skipping the ops nested inside it), and a saved tensor whose storage is a kept
// result is held directly, so its node needs no recomputation at all.
#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adjoint/checkpoint.h"
#include "autograd/memory_hooks.h"
#include "autograd/saved_tensor.h"
#include "checkpoint/rng.h"
#include "dispatch/op_cache.h"

namespace adjoint::detail {

class Region final : public OpCache, public std::enable_shared_from_this<Region> {
 public:
  Region(CheckpointFn fn, CheckpointOptions options);
  ~Region() override;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  /// The first run: saves the inputs, then runs fn under the region's hooks.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  // OpCache: see Note [Op log].
  std::optional<KeptOpResult> before_op(const char* op) override;
  bool after_op(const char* op, const Tensor& output) override;
  void keep_op(KeptOpResult result) override;

  /// Slot `index`, recomputing first when it is empty; consumes it after the first run.
  Tensor take(std::size_t index);
  /// A Holder died (its node released its saved tensors): its slot is not needed again.
  void drop(std::size_t index);

 private:
  enum class Mode { Idle, FirstRun, Recompute };

  // What the first run saved at each pack index, to check the recomputation against.
  struct SavedMeta {
    Shape shape;
    DType dtype;
    const char* op;  // the op that saved it (static storage: Op::name)
    bool held;       // held directly (a kept result's storage); no slot
  };
  struct Slot {
    Tensor value;
    uint64_t version = 0;   // the value's version when packed; see take()
    bool alive = true;      // its Holder still exists
    SavedBytesClaim claim;  // counted by memory tracking while it holds a value
    void fill(const Tensor& t);
    void clear();
  };
  struct LoggedOp {
    const char* name;
    std::size_t end = 0;  // index after the last op nested inside it
  };
  struct Kept {
    KeptOpResult result;
    uint64_t version;  // of the output when kept: an in-place change disables the replay
    std::vector<SavedBytesClaim> claims;
  };

  std::any pack_first(const Tensor& t);
  std::any pack_recomputed(const Tensor& t);
  void recompute();

  CheckpointFn fn_;
  CheckpointOptions options_;
  RngSnapshot rng_;
  uint8_t autocast_ = 0;  // the autocast state of the first run, restored to recompute
  std::vector<SavedTensor> inputs_;
  std::vector<Shape> output_shapes_;
  std::vector<DType> output_dtypes_;
  std::vector<bool> output_defined_;
  std::vector<SavedMeta> meta_;
  std::vector<Slot> slots_;
  std::vector<LoggedOp> ops_;
  std::vector<std::size_t> open_ops_;  // first run: ops whose forward is running
  std::unordered_map<std::size_t, Kept> kept_;
  std::unordered_set<const StorageImpl*> kept_storages_;
  std::size_t pending_keep_ = 0;  // the op after_op asked to keep
  std::size_t cursor_ = 0;        // recomputation: the next op expected
  std::size_t next_pack_ = 0;     // recomputation: the next pack index
  const char* current_op_ = "";   // names the op in errors about the tensors it saves
  Mode mode_ = Mode::Idle;
  int64_t kept_tensors_ = 0, kept_bytes_ = 0;
};

/// What the region's pack hook returns for a tensor it does not hold directly.
struct Holder {
  std::shared_ptr<Region> region;
  std::size_t index;
  Holder(std::shared_ptr<Region> r, std::size_t i) : region(std::move(r)), index(i) {}
  ~Holder() { region->drop(index); }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
};

}  // namespace adjoint::detail
