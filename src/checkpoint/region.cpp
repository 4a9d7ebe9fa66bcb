// Region: the first run, the recomputation and the slots in between.
// See Note [Checkpointed regions] and Note [Op log] in region.h.
#include "checkpoint/region.h"

#include <cstring>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"  // alias_with_history
#include "checkpoint/stats.h"
#include "dispatch/autocast.h"

namespace adjoint::detail {
namespace {

constexpr const char* kDeterminism =
    "a checkpointed function must do the same work each time it runs: pass the generators it "
    "draws from in CheckpointOptions::generators, and do not branch on state that changes "
    "between forward and backward";

// Names the region in the errors of its saved inputs (an input modified in place).
class CheckpointNode final : public Node {
 public:
  std::string name() const override { return "CheckpointBackward"; }
  TensorList apply(TensorList&&, const BackwardRun&) override {
    ADJOINT_ASSERT(false, "CheckpointBackward is never part of a graph");
  }
};

const StorageImpl* storage_of(const Tensor& t) { return t.impl()->storage.get(); }

// Saves outside apply<Op> (custom functions) happen before any op reported itself.
const char* saver_name(const char* op) { return *op ? op : "a custom function"; }

Tensor unpack_checkpointed(const std::any& packed) {
  if (const Tensor* t = std::any_cast<Tensor>(&packed)) return *t;
  const auto& holder = std::any_cast<const std::shared_ptr<Holder>&>(packed);
  return holder->region->take(holder->index);
}

template <class T>
class ValueScope {
 public:
  ValueScope(T& slot, T value) : slot_(slot), prev_(slot) { slot_ = value; }
  ~ValueScope() { slot_ = prev_; }
  ValueScope(const ValueScope&) = delete;
  ValueScope& operator=(const ValueScope&) = delete;

 private:
  T& slot_;
  T prev_;
};

void check_same(const Shape& shape, DType dtype, const Tensor& now, const std::string& what) {
  ADJOINT_CHECK(now.shape() == shape, Shape, "checkpoint",
                "the recomputation differs from the first run: ", what, " was ", shape, " (", dtype,
                ") but is now ", describe(now), "; ", kDeterminism);
  ADJOINT_CHECK(now.dtype() == dtype, DType, "checkpoint",
                "the recomputation differs from the first run: ", what, " was ", shape, " (", dtype,
                ") but is now ", describe(now), "; ", kDeterminism);
}

}  // namespace

// The claim on the old storage goes before the storage can die: a storage freed while still
// registered could be reallocated at the same address and merged with it in the accounting.
void Region::Slot::fill(const Tensor& t) {
  claim.reset();
  value = t;
  version = t.version();
  if (saved_tracking_enabled()) claim.claim(storage_of(t));
}

void Region::Slot::clear() {
  claim.reset();
  value = Tensor();
}

Region::Region(CheckpointFn fn, CheckpointOptions options)
    : fn_(std::move(fn)), options_(std::move(options)) {}

Region::~Region() {
  CheckpointCounters& c = checkpoint_counters();
  c.kept_tensors -= kept_tensors_;
  c.kept_bytes -= kept_bytes_;
}

std::vector<Tensor> Region::run(const std::vector<Tensor>& inputs) {
  // Saved under the hooks active now: see Note [Checkpointed regions]. Each as an alias with
  // the history it has now: fn may modify an input in place and give it a history through
  // nodes that hold this region, which must not then hold that history (a reference cycle;
  // the version check still catches the change). A leaf that requires grad stays itself, so
  // that the recomputation sees a leaf as the first run did (in-place ops on it are refused
  // the same way, and it cannot take a history).
  inputs_.reserve(inputs.size());
  for (const Tensor& x : inputs)
    inputs_.emplace_back(
        x.defined() && !(x.is_leaf() && x.requires_grad()) ? alias_with_history(x) : x, false);
  if (options_.preserve_rng_state) rng_ = RngSnapshot::capture(options_.generators);
  autocast_ = tls_mode.autocast;
  checkpoint_counters().regions++;
  std::vector<Tensor> outs;
  {
    ValueScope<Mode> mode(mode_, Mode::FirstRun);
    OpCacheScope watch(this);
    SavedTensorHooks hooks([this](const Tensor& t) { return pack_first(t); }, unpack_checkpointed);
    outs = fn_(inputs);
  }
  // Held only for a backward inside fn; from now on they are recomputed.
  for (Slot& s : slots_) s.clear();
  for (const Tensor& y : outs) {
    output_defined_.push_back(y.defined());
    output_shapes_.push_back(y.defined() ? y.shape() : Shape());
    output_dtypes_.push_back(y.defined() ? y.dtype() : kDefaultFloat);
  }
  return outs;
}

std::any Region::pack_first(const Tensor& t) {
  const std::size_t index = meta_.size();
  const bool held = kept_storages_.count(storage_of(t)) != 0;
  meta_.push_back(SavedMeta{t.shape(), t.dtype(), current_op_, held});
  slots_.emplace_back();
  // A kept result's storage is alive anyway; holding it here spares its node a recomputation.
  if (held) return std::any(t);
  slots_.back().fill(t);
  return std::any(std::make_shared<Holder>(shared_from_this(), index));
}

std::any Region::pack_recomputed(const Tensor& t) {
  const std::size_t index = next_pack_++;
  ADJOINT_CHECK(index < meta_.size(), Value, "checkpoint",
                "the recomputation saved more tensors for backward than the first run (",
                meta_.size(), "): ", current_op_, " saved ", describe(t), "; ", kDeterminism);
  const SavedMeta& m = meta_[index];
  check_same(m.shape, m.dtype, t,
             detail::str("tensor ", index, " saved for backward (by ", saver_name(m.op), ")"));
  Slot& s = slots_[index];
  if (!m.held && s.alive) s.fill(t);
  // What the recomputed graph's own nodes unpack (a backward inside fn); dropped with it.
  return std::any(t);
}

Tensor Region::take(std::size_t index) {
  ADJOINT_CHECK(mode_ != Mode::Recompute, Autograd, "checkpoint",
                "a checkpointed function needed its own saved tensors while being recomputed");
  if (!slots_[index].value.defined()) {
    ADJOINT_ASSERT(mode_ == Mode::Idle, "checkpoint slot ", index, " empty in the first run");
    recompute();
  }
  Slot& s = slots_[index];
  ADJOINT_ASSERT(s.value.defined(), "checkpoint slot ", index, " not filled by recomputation");
  Tensor t = s.value;
  ADJOINT_CHECK(t.version() == s.version, Autograd, "backward",
                "a tensor needed for the gradient of ", saver_name(meta_[index].op),
                " inside a checkpointed function was modified by an in-place operation: ",
                describe(t), " saved at version ", s.version, " is now at version ", t.version(),
                "; use an out-of-place op, or clone() the tensor before modifying it");
  // Consumed: a later backward recomputes rather than the region holding everything.
  if (mode_ == Mode::Idle) s.clear();
  return t;
}

void Region::drop(std::size_t index) {
  slots_[index].alive = false;
  slots_[index].clear();
}

void Region::recompute() {
  // The inputs first: this may recompute an enclosing region, and the version check of an
  // input modified in place since the first run fires here.
  const auto owner = std::make_shared<CheckpointNode>();
  std::vector<Tensor> xs;
  xs.reserve(inputs_.size());
  for (const SavedTensor& s : inputs_) xs.push_back(s.unpack(owner));
  RngReplay replay(rng_);
  cursor_ = 0;
  next_pack_ = 0;
  current_op_ = "";
  try {
    ValueScope<Mode> mode(mode_, Mode::Recompute);
    OpCacheScope watch(this);
    SavedTensorHooks hooks([this](const Tensor& t) { return pack_recomputed(t); },
                           unpack_checkpointed);
    EnableGradGuard grad;            // backward runs with grad off unless create_graph
    NoForwardGradGuard no_tangents;  // the first run had none (checkpoint_lists)
    // Backward turned autocast off; the ops must run in the dtypes they first ran in.
    detail::AutocastStateScope autocast(autocast_);
    const std::vector<Tensor> outs = fn_(xs);
    ADJOINT_CHECK(cursor_ == ops_.size(), Value, "checkpoint", "the recomputation ran ", cursor_,
                  " ops but the first run ", ops_.size(), "; ", kDeterminism);
    ADJOINT_CHECK(next_pack_ == meta_.size(), Value, "checkpoint", "the recomputation saved ",
                  next_pack_, " tensors for backward but the first run ", meta_.size(), "; ",
                  kDeterminism);
    ADJOINT_CHECK(outs.size() == output_shapes_.size(), Value, "checkpoint",
                  "the recomputation returned ", outs.size(), " outputs but the first run ",
                  output_shapes_.size(), "; ", kDeterminism);
    for (std::size_t i = 0; i < outs.size(); ++i) {
      ADJOINT_CHECK(outs[i].defined() == output_defined_[i], Value, "checkpoint",
                    "the recomputation differs from the first run: output ", i, " is ",
                    outs[i].defined() ? "defined" : "undefined", " now; ", kDeterminism);
      if (outs[i].defined())
        check_same(output_shapes_[i], output_dtypes_[i], outs[i], detail::str("output ", i));
    }
  } catch (...) {
    for (Slot& s : slots_) s.clear();
    throw;
  }
  checkpoint_counters().recomputations++;
}

std::optional<KeptOpResult> Region::before_op(const char* op) {
  if (mode_ == Mode::FirstRun) {
    open_ops_.push_back(ops_.size());
    ops_.push_back(LoggedOp{op});
    current_op_ = op;
    return std::nullopt;
  }
  ADJOINT_CHECK(cursor_ < ops_.size(), Value, "checkpoint",
                "the recomputation ran more ops than the first run (", ops_.size(),
                "): the next one is ", op, "; ", kDeterminism);
  const LoggedOp& logged = ops_[cursor_];
  ADJOINT_CHECK(std::strcmp(logged.name, op) == 0, Value, "checkpoint",
                "the recomputation differs from the first run: op ", cursor_, " was ", logged.name,
                " but is now ", op, "; ", kDeterminism);
  current_op_ = op;
  auto it = kept_.find(cursor_);
  // A kept result modified in place since (by fn itself, or by the caller) is not the op's
  // result any more: run the op instead.
  if (it != kept_.end() && it->second.result.output.version() == it->second.version) {
    cursor_ = logged.end;  // the ops nested in its forward do not run either
    checkpoint_counters().replayed_ops++;
    KeptOpResult r = it->second.result;
    r.output =
        detail::detach_alias(r.output);  // apply<Op> attaches the recomputed node to this handle
    return r;
  }
  ++cursor_;
  return std::nullopt;
}

bool Region::after_op(const char* op, const Tensor& output) {
  current_op_ = op;  // ops nested in its forward renamed it; the saves that follow are op's
  if (mode_ != Mode::FirstRun) return false;
  const std::size_t index = open_ops_.back();
  open_ops_.pop_back();
  ops_[index].end = ops_.size();
  if (!options_.policy || !output.defined()) return false;
  if (options_.policy(op, output) != CheckpointAction::Save) return false;
  pending_keep_ = index;
  return true;
}

void Region::keep_op(KeptOpResult result) {
  Kept k{std::move(result), 0, {}};
  // No history: the region must not own nodes of the graph that owns it.
  k.result.output = detail::detach_alias(k.result.output);
  for (Tensor& e : k.result.extras)
    if (e.defined()) e = detail::detach_alias(e);
  k.version = k.result.output.version();
  CheckpointCounters& c = checkpoint_counters();
  auto count = [&](const Tensor& t) {
    if (!t.defined()) return;
    kept_storages_.insert(storage_of(t));
    const auto bytes = static_cast<int64_t>(t.nbytes());
    kept_tensors_++;
    kept_bytes_ += bytes;
    c.kept_tensors++;
    c.kept_bytes += bytes;
    // Memory tracking counts what the region keeps as saved (Note [Saved tensor accounting]).
    if (saved_tracking_enabled()) k.claims.emplace_back().claim(storage_of(t));
  };
  count(k.result.output);
  for (const Tensor& e : k.result.extras) count(e);
  kept_.emplace(pending_keep_, std::move(k));
}

}  // namespace adjoint::detail
