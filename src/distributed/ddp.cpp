// DistributedDataParallel's reducer: buckets of gradients, each all-reduced as soon as its
// last gradient is final, in bucket order, while backward goes on; the end of backward waits
// for them and writes the averages into .grad. See Note [DDP reducer].
#include "adjoint/distributed/ddp.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <utility>

#include "adjoint/autograd.h"
#include "adjoint/distributed/data_parallel.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "backend/host_transfer.h"
#include "distributed/call_tag.h"

namespace adjoint::dist {

// Note [DDP reducer]
// Each parameter gets a post-accumulate-grad hook, which the engine runs once the parameter's
// .grad is final for the backward run (after fan-in is summed, also when linear's VJP added
// into .grad itself). The hook copies .grad into its slot of a flat bucket; when a bucket's
// last slot is filled, its all-reduce (average) is queued on the communication thread and
// runs while the engine goes on with earlier layers. Buckets are launched strictly in bucket
// order, even when a later one fills first: every rank must issue collectives in the same
// order, and the bucket order is the same everywhere while the ready order need not be.
// The first hook of a run queues the end-of-run callback (autograd::queue_callback), which
// fills the slots of parameters that got no gradient, launches what is left, waits for every
// bucket and copies the averages back into .grad.
//
// Buckets start in reverse parameter order (a model's last layers get their gradients first)
// and, after the first synchronising backward, are rebuilt in the order the gradients really
// became final there; rank 0's order is broadcast so every rank builds the same buckets. A
// bucket holds one dtype; the first is capped at first_bucket_bytes so that communication
// starts early, the rest at bucket_bytes.
//
// A parameter reached by no gradient in a run contributes its .grad as it stands (what it
// accumulated in no_sync micro-batches) or, without one, zeros. One more small all-reduce
// counts, for each parameter, the ranks that had a gradient, so that every rank decides the
// same: without find_unused_parameters a parameter missing on some rank is an error on every
// rank, raised after the collectives completed and before the bucket rebuild's broadcast
// (leaving zeros would make an optimizer decay and move a parameter that one process would
// skip); with it, the parameters no rank had a gradient for keep .grad as it was.
//
// A backward that fails before its end never runs the callback; the RunGuard it holds then
// waits for the buckets already launched and ends the run (abandon_run), so that the next
// backward starts clean. Each run begins a step of the group (ProcessGroup::advance_step) and
// its collectives are tagged as the step's gradient reduction, so that a rank that goes on
// after such a failure while the others finish the step fails at its next collective, on
// every rank, instead of averaging its next step with their current one (Note [Collectives
// know their step] in call_check.cpp).
//
// ZeRO (zero_stage, with ZeroOptimizer): buckets are padded to a multiple of the world size
// and keep reverse parameter order (no rebuild: the optimizer's shards are cut from them).
// Stage 2 reduce-scatters each bucket instead, so a rank receives only its chunk of the
// average (summed over synchronising runs until clear_shard_gradients), makes a bucket's
// buffer at its first gradient of a run and frees it once reduced, and releases each
// parameter's .grad as soon as it is copied in: between steps a rank holds gradient shards
// only. See Note [ZeRO shards] in zero.cpp.

struct DistributedDataParallel::Bucket {
  int64_t numel = 0;   // the members' elements
  int64_t padded = 0;  // numel rounded up to a multiple of the world size
  // The members' gradients, flattened one after another, then zeros. Stage 2 makes it at the
  // bucket's first gradient of a run and frees it once reduce-scattered.
  Tensor flat;
  Work work;
  Tensor shard_grad;  // stage 2: this rank's chunk of the average, summed over runs
};

double DdpStepStats::overlap() const {
  if (comm_ms <= 0) return 0;
  return std::clamp(1.0 - exposed_ms / comm_ms, 0.0, 1.0);
}

namespace {

constexpr const char* kOp = "dist.DistributedDataParallel";

double ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::vector<std::pair<std::string, Tensor>> numbered(const std::vector<Tensor>& params) {
  std::vector<std::pair<std::string, Tensor>> named;
  for (std::size_t i = 0; i < params.size(); ++i)
    named.emplace_back("parameter " + std::to_string(i), params[i]);
  return named;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, DdpOptions options)
    : DistributedDataParallel(module.named_parameters(), module.buffers(), options) {}

DistributedDataParallel::DistributedDataParallel(const std::vector<Tensor>& params,
                                                 DdpOptions options)
    : DistributedDataParallel(numbered(params), {}, options) {}

DistributedDataParallel::DistributedDataParallel(std::vector<std::pair<std::string, Tensor>> named,
                                                 std::vector<Tensor> buffers, DdpOptions options)
    : options_(options), group_(options.group ? *options.group : default_group()) {
  ADJOINT_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0, Value, kOp,
                "bucket sizes must be positive, got bucket_bytes ", options.bucket_bytes,
                " and first_bucket_bytes ", options.first_bucket_bytes);
  ADJOINT_CHECK(options.zero_stage >= 0 && options.zero_stage <= 2, Value, kOp,
                "zero_stage must be 0, 1 or 2, got ", options.zero_stage);
  ADJOINT_CHECK(options.zero_stage < 2 || !options.gradient_as_bucket_view, Value, kOp,
                "gradient_as_bucket_view does not combine with ZeRO stage 2, which keeps no whole "
                "gradient");
  ADJOINT_CHECK(options.zero_stage == 0 || !options.find_unused_parameters, Value, kOp,
                "find_unused_parameters does not combine with ZeRO stage ", options.zero_stage,
                ": a sharded optimizer would update a parameter no rank had a gradient for");
  std::vector<Tensor> all;
  for (auto& [name, p] : named) {
    ADJOINT_CHECK(p.defined(), Value, kOp, name, " is undefined");
    all.push_back(p);
    if (!p.requires_grad()) continue;
    ADJOINT_CHECK(is_floating(p.dtype()) && !p.grad_fn(), DType, kOp, name, " ", describe(p),
                  " must be a floating-point leaf");
    for (std::size_t j = 0; j < params_.size(); ++j)
      ADJOINT_CHECK(!params_[j].is_same(p), Value, kOp, name, " is the same tensor as ", names_[j],
                    ": each parameter may be given once");
    params_.push_back(p);
    names_.push_back(name);
  }
  // The same number of parameters everywhere (their shapes are checked by the broadcast).
  Tensor count = tensor(std::vector<int64_t>{static_cast<int64_t>(params_.size())});
  Tensor counts = group_.all_gather(count);
  const std::vector<int64_t> per_rank = adjoint::detail::host_values<int64_t>(counts, kOp);
  for (int r = 0; r < group_.world_size(); ++r)
    ADJOINT_CHECK(per_rank[r] == static_cast<int64_t>(params_.size()), Value, kOp, "rank ", r,
                  " has ", per_rank[r], " parameters that require grad, this rank (", group_.rank(),
                  ") has ", params_.size(), ": every rank must wrap the same model");
  if (options.broadcast_at_start) {
    broadcast_tensors(all, 0, &group_);
    broadcast_tensors(buffers, 0, &group_);
  }

  std::vector<int64_t> reverse(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    reverse[i] = static_cast<int64_t>(params_.size() - 1 - i);
  build_buckets(reverse);

  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, index](const Tensor&) { on_grad_ready(index); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (HookHandle& h : hooks_) h.remove();
}

void DistributedDataParallel::build_buckets(const std::vector<int64_t>& order) {
  const int64_t n = static_cast<int64_t>(params_.size());
  std::vector<int64_t> position(n);
  for (int64_t k = 0; k < n; ++k) position[order[k]] = k;

  // One open bucket per dtype, closed when it reaches its cap.
  std::map<DType, std::pair<std::vector<int64_t>, int64_t>> open;
  std::vector<std::vector<int64_t>> closed;
  for (int64_t i : order) {
    auto& [members, bytes] = open[params_[i].dtype()];
    members.push_back(i);
    bytes += static_cast<int64_t>(params_[i].nbytes());
    const int64_t cap = closed.empty() ? options_.first_bucket_bytes : options_.bucket_bytes;
    if (bytes >= cap) {
      closed.push_back(std::move(members));
      members.clear();
      bytes = 0;
    }
  }
  for (auto& [dtype, open_bucket] : open)
    if (!open_bucket.first.empty()) closed.push_back(std::move(open_bucket.first));
  // Launch order: by when each bucket's first member becomes final.
  std::stable_sort(closed.begin(), closed.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });

  bucket_members_ = std::move(closed);
  buckets_.assign(bucket_members_.size(), Bucket{});
  bucket_of_.assign(n, 0);
  offset_of_.assign(n, 0);
  for (std::size_t b = 0; b < bucket_members_.size(); ++b) {
    int64_t numel = 0;
    for (int64_t i : bucket_members_[b]) {
      bucket_of_[i] = static_cast<int64_t>(b);
      offset_of_[i] = numel;
      numel += params_[i].numel();
    }
    Bucket& bucket = buckets_[b];
    const int64_t world = group_.world_size();
    bucket.numel = numel;
    bucket.padded = (numel + world - 1) / world * world;
    if (options_.zero_stage < 2) bucket.flat = zeros({bucket.padded}, bucket_dtype(b));
  }
  // Gradients that were views of the old buckets (a rebuild) move into the new ones.
  if (options_.gradient_as_bucket_view) {
    NoGradGuard no_grad;
    for (int64_t i = 0; i < n; ++i) {
      const Tensor g = params_[i].grad();
      if (!g.defined()) continue;
      Tensor slot = bucket_slot(i);
      slot.copy_(g.reshape({-1}));
      params_[i].set_grad(slot.reshape(params_[i].shape()));
    }
  }
}

DType DistributedDataParallel::bucket_dtype(std::size_t b) const {
  return params_[bucket_members_[b].front()].dtype();
}

Tensor DistributedDataParallel::bucket_slot(int64_t index) {
  Bucket& b = buckets_[bucket_of_[index]];
  if (!b.flat.defined()) b.flat = zeros({b.padded}, bucket_dtype(bucket_of_[index]));
  return b.flat.narrow(0, offset_of_[index], params_[index].numel());
}

// The parameter's gradient goes into its bucket slot (zeros without one); stage 2 then
// releases .grad, so that only the shards stay.
// Whether the parameter's .grad is its bucket slot itself (gradient_as_bucket_view).
bool DistributedDataParallel::grad_is_slot(int64_t index) const {
  const Tensor g = params_[index].grad();
  const Tensor& flat = buckets_[bucket_of_[index]].flat;
  if (!g.defined() || !flat.defined() || !g.is_contiguous() || g.numel() == 0) return false;
  return g.impl()->storage == flat.impl()->storage &&
         g.impl()->offset == flat.impl()->offset + offset_of_[index];
}

void DistributedDataParallel::fill_slot(int64_t index) {
  if (options_.gradient_as_bucket_view && grad_is_slot(index)) return;  // already in place
  NoGradGuard no_grad;
  Tensor slot = bucket_slot(index);
  const Tensor& p = params_[index];
  const Tensor g = p.grad();
  if (g.defined()) {
    slot.copy_(g.reshape({-1}));
  } else {
    slot.zero_();
  }
  if (options_.zero_stage == 2) p.set_grad(Tensor());
}

int64_t DistributedDataParallel::bucket_numel(std::size_t b) const { return buckets_.at(b).numel; }
int64_t DistributedDataParallel::bucket_padded_numel(std::size_t b) const {
  return buckets_.at(b).padded;
}
const Tensor& DistributedDataParallel::shard_gradient(std::size_t b) const {
  return buckets_.at(b).shard_grad;
}
void DistributedDataParallel::clear_shard_gradients() {
  for (Bucket& b : buckets_) b.shard_grad = Tensor();
}
int64_t DistributedDataParallel::gradient_bytes() const {
  int64_t bytes = buffer_bytes();
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined() && !grad_is_slot(static_cast<int64_t>(i)))
      bytes += static_cast<int64_t>(params_[i].grad().nbytes());
  return bytes;
}

int64_t DistributedDataParallel::buffer_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    if (b.flat.defined()) bytes += static_cast<int64_t>(b.flat.nbytes());
    if (b.shard_grad.defined()) bytes += static_cast<int64_t>(b.shard_grad.nbytes());
  }
  return bytes;
}

void DistributedDataParallel::reset_run() {
  ready_.assign(params_.size(), 0);
  pending_.resize(bucket_members_.size());
  for (std::size_t b = 0; b < bucket_members_.size(); ++b)
    pending_[b] = static_cast<int64_t>(bucket_members_[b].size());
  next_launch_ = 0;
  launched_from_hooks_ = 0;
  order_.clear();
}

// The end-of-run callback's companion: a run that fails before its end (a node throws)
// destroys its queued callbacks unrun, and with them this guard, which then waits for the
// buckets already launched (the other ranks complete them) and ends the run, so the next
// backward starts clean.
struct DistributedDataParallel::RunGuard {
  explicit RunGuard(DistributedDataParallel* d) : ddp(d) {}
  RunGuard(const RunGuard&) = delete;  // one guard per run: a copy would end it twice
  RunGuard& operator=(const RunGuard&) = delete;
  ~RunGuard() {
    if (!finished) ddp->abandon_run();
  }
  DistributedDataParallel* ddp;
  bool finished = false;
};

void DistributedDataParallel::abandon_run() {
  for (std::size_t b = 0; b < next_launch_; ++b) {
    try {
      buckets_[b].work.wait();
    } catch (...) {  // the run's own error is on its way; this one adds nothing
    }
  }
  if (options_.zero_stage == 2)
    for (Bucket& b : buckets_) b.flat = Tensor();
  in_run_ = false;
}

void DistributedDataParallel::on_grad_ready(int64_t index) {
  if (!sync_) return;  // no_sync: .grad just accumulates
  if (!in_run_) {
    reset_run();
    in_run_ = true;
    group_.advance_step();
    auto guard = std::make_shared<RunGuard>(this);
    autograd::queue_callback([this, guard] {
      guard->finished = true;
      finish_backward();
    });
  }
  ADJOINT_CHECK(!ready_[index], Autograd, kOp, "the gradient of ", names_[index],
                " became final twice in one backward run: two backward runs reach the model "
                "at once, or a backward nested in another reached it");
  fill_slot(index);
  ready_[index] = 1;
  order_.push_back(index);
  if (--pending_[bucket_of_[index]] == 0) launch_ready_buckets(true);
}

void DistributedDataParallel::launch_ready_buckets(bool from_hook) {
  const detail::ScopedStepPhase phase(detail::StepPhase::GradientReduction);
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = options_.zero_stage == 2 ? group_.reduce_scatter_async(b.flat, ReduceOp::Average)
                                      : group_.all_reduce_async(b.flat, ReduceOp::Average);
    if (from_hook) ++launched_from_hooks_;
  }
}

void DistributedDataParallel::finish_backward() {
  struct EndRun {
    bool& in_run;
    ~EndRun() { in_run = false; }
  } end_run{in_run_};
  const detail::ScopedStepPhase phase(detail::StepPhase::GradientReduction);
  const auto start = std::chrono::steady_clock::now();
  NoGradGuard no_grad;

  // Parameters no gradient reached in this run: their .grad as it stands, or zeros.
  const int64_t n = static_cast<int64_t>(params_.size());
  std::vector<int64_t> had(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    had[i] = ready_[i] || params_[i].grad().defined();
    if (ready_[i]) continue;
    fill_slot(i);
    --pending_[bucket_of_[i]];
  }
  launch_ready_buckets(false);
  ADJOINT_ASSERT(next_launch_ == buckets_.size(), "every bucket launched at the end of backward");
  // How many ranks had a gradient for each parameter: every rank decides the same from it
  // (an error raised on one rank only would leave the others' collectives out of step).
  Tensor had_grad = tensor(had);
  Work counting = group_.all_reduce_async(had_grad, ReduceOp::Sum);

  // Every launched collective is waited for, even after one failed.
  stats_ = DdpStepStats{};
  std::exception_ptr failed;
  auto wait = [&](const Work& w) {
    try {
      w.wait();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  };
  for (Bucket& b : buckets_) {
    wait(b.work);
    stats_.bytes += static_cast<int64_t>(b.flat.nbytes());
  }
  wait(counting);
  if (failed) {
    abandon_run();
    std::rethrow_exception(failed);
  }
  had = adjoint::detail::host_values<int64_t>(had_grad, kOp);  // summed over the ranks
  for (Bucket& b : buckets_) stats_.comm_ms += ms(b.work.elapsed());
  if (options_.zero_stage == 2) {
    for (Bucket& b : buckets_) {
      const Tensor mine = b.work.result();  // this rank's chunk of the average
      if (b.shard_grad.defined()) {
        b.shard_grad.add_(mine);
      } else {
        b.shard_grad = mine;
      }
      b.flat = Tensor();
    }
  }
  stats_.exposed_ms = ms(std::chrono::steady_clock::now() - start);
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.launched_during_backward = launched_from_hooks_;

  const int64_t world = group_.world_size();
  for (int64_t i = 0; i < n && options_.zero_stage < 2; ++i) {
    if (options_.find_unused_parameters && had[i] == 0) continue;  // no gradient on any rank
    const Tensor& p = params_[i];
    const Tensor avg = bucket_slot(i).reshape(p.shape());
    Tensor g = p.grad();
    if (options_.gradient_as_bucket_view) {
      if (!grad_is_slot(i)) p.set_grad(avg);  // the average is in place already otherwise
    } else if (g.defined()) {
      g.copy_(avg);
    } else {
      p.set_grad(avg.clone());
    }
  }

  if (!options_.find_unused_parameters) {
    std::string list;
    for (int64_t i = 0; i < n; ++i)
      if (had[i] < world)
        list += (list.empty() ? "" : ", ") + names_[i] + " " + describe(params_[i]) + " on " +
                std::to_string(world - had[i]) + " of " + std::to_string(world) + " ranks";
    if (!list.empty())  // the same on every rank
      throw Error(
          ErrorKind::Autograd, kOp,
          adjoint::detail::str("no gradient reached ", list,
                               " in this backward; if parameters may go unused in a step, "
                               "construct with DdpOptions{.find_unused_parameters = true}"));
  }

  if (options_.rebuild_buckets && options_.zero_stage == 0 && !rebuilt_) {
    rebuilt_ = true;
    first_order_ = order_;
    for (int64_t i = n - 1; i >= 0; --i)
      if (!ready_[i]) first_order_.push_back(i);
    Tensor order = tensor(first_order_);
    group_.broadcast(order, 0);  // every rank builds rank 0's buckets
    build_buckets(order.to_vector<int64_t>());
  }
}

}  // namespace adjoint::dist
