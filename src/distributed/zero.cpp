// ZeroOptimizer: the optimizer state of this rank's shard only (ZeRO stage 1), with stage 2's
// sharded gradients coming from DDP's reduce-scatter; consolidated checkpoints. See
// Note [ZeRO shards].
#include "adjoint/distributed/zero.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "backend/host_transfer.h"
#include "distributed/call_tag.h"

namespace adjoint::dist {

// Note [ZeRO shards]
// DDP's buckets lay the parameters out flat: bucket b holds its members' elements one after
// another, padded with zeros to a multiple of the world size W, and rank r owns the r-th of
// its W equal chunks. That is exactly the block a reduce-scatter of the bucket hands rank r,
// so stage 2 needs no copy to find its gradient shard. This rank's shard of the parameters is
// one flat leaf per bucket (its chunk), and the optimizer the user chose runs over those
// leaves: SGD, Adam and AdamW work element by element, so an element is updated as it would be
// inside its parameter in one process, and its state (moments, step) lives on one rank only.
// After the update, an all-gather of each bucket's chunks gives every rank every parameter,
// bitwise the owner's values. The padding stays zero: its gradient is zero, so its moments
// and its weight-decayed value stay zero too.
//
// Checkpoints are consolidated: state_dict() all-gathers each chunk-shaped state tensor and
// cuts it back into per-parameter tensors under the keys a plain optimizer over the model's
// parameters uses ("state.<i>.<slot>"); scalars (a shard's step) are given to each of its
// members. load_state_dict() does the reverse for whatever world size it runs under, so a
// checkpoint moves between world sizes, and between ZeRO and a plain optimizer.

namespace {

constexpr const char* kOp = "dist.ZeroOptimizer";

// Calls fn(param, offset in the parameter, offset in the chunk, length) for each piece of a
// member of bucket b that lies in the chunk [lo, lo + len) of the bucket.
template <class Fn>
void for_each_piece(const DistributedDataParallel& ddp, std::size_t b, int64_t lo, int64_t len,
                    Fn&& fn) {
  for (int64_t i : ddp.buckets()[b]) {
    const int64_t start = ddp.offset_in_bucket(i);
    const int64_t end = start + ddp.parameters()[i].numel();
    const int64_t a = std::max(start, lo), z = std::min(end, lo + len);
    if (a < z) fn(i, a - start, a - lo, z - a);
  }
}

// "state.<i>.<slot>" -> (i, slot); nullopt for other keys.
std::optional<std::pair<int64_t, std::string>> parse_state_key(const std::string& key) {
  const std::string prefix = "state.";
  if (key.rfind(prefix, 0) != 0) return std::nullopt;
  const std::size_t dot = key.find('.', prefix.size());
  ADJOINT_CHECK(dot != std::string::npos && dot > prefix.size(), Value, kOp, "state key '", key,
                "' is not state.<index>.<slot>");
  const std::string digits = key.substr(prefix.size(), dot - prefix.size());
  ADJOINT_CHECK(std::all_of(digits.begin(), digits.end(), ::isdigit) && digits.size() < 10, Value,
                kOp, "state key '", key, "' has no parameter index");
  return std::make_pair(std::stoll(digits), key.substr(dot + 1));
}

int64_t state_bytes(const optim::StateDict& state) {
  int64_t bytes = 0;
  for (const auto& [key, t] : state)
    if (key.rfind("state.", 0) == 0) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp,
                             const ShardOptimizerFactory& make_optimizer)
    : ddp_(ddp), group_(ddp.group()) {
  ADJOINT_CHECK(ddp.zero_stage() >= 1, Value, kOp,
                "needs a DistributedDataParallel built with zero_stage 1 or 2 (DdpOptions), got "
                "stage ",
                ddp.zero_stage());
  const int64_t world = group_.world_size();
  for (std::size_t b = 0; b < ddp.buckets().size(); ++b) {
    const int64_t chunk = ddp.bucket_padded_numel(b) / world;
    const DType dtype = ddp.parameters()[ddp.buckets()[b].front()].dtype();
    shard_.push_back(zeros({chunk}, dtype).requires_grad_(true));
  }
  refresh_shards();
  inner_ = make_optimizer(shard_);
  ADJOINT_CHECK(inner_ && inner_->params().size() == shard_.size(), Value, kOp,
                "the factory must return an optimizer over the shard tensors it was given");
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : ddp_.parameters()) p.zero_grad(set_to_none);
  ddp_.clear_shard_gradients();
  for (const Tensor& s : shard_) s.set_grad(Tensor());
  grads_ready_ = false;
}

void ZeroOptimizer::gather_shard_gradients() {
  if (grads_ready_) return;
  NoGradGuard no_grad;
  const int64_t rank = group_.rank();
  for (std::size_t b = 0; b < shard_.size(); ++b) {
    if (ddp_.zero_stage() == 2) {
      const Tensor& g = ddp_.shard_gradient(b);  // already this rank's chunk of the average
      if (!g.defined())
        for (int64_t i : ddp_.buckets()[b])
          ADJOINT_CHECK(!ddp_.parameters()[i].grad().defined(), Value, kOp,
                        "step: a parameter holds a local .grad but no synchronising backward ran "
                        "since zero_grad (all of them under no_sync?): stage 2 steps on the "
                        "reduce-scattered shards only");
      shard_[b].set_grad(g);
      continue;
    }
    // Stage 1: every rank has the whole averaged gradient in .grad; keep this rank's chunk.
    // Whether the shard has a gradient depends on the bucket, not on the chunk, so that every
    // rank's optimizer steps (and keeps state for) the same shards.
    bool any = false;
    for (int64_t i : ddp_.buckets()[b]) any |= ddp_.parameters()[i].grad().defined();
    const int64_t chunk = shard_[b].numel();
    Tensor g = any ? zeros({chunk}, shard_[b].dtype()) : Tensor();
    for_each_piece(ddp_, b, rank * chunk, chunk,
                   [&](int64_t i, int64_t from, int64_t to, int64_t n) {
                     const Tensor pg = ddp_.parameters()[i].grad();
                     if (pg.defined())
                       g.narrow(0, to, n).copy_(pg.reshape({-1}).narrow(0, from, n));
                   });
    shard_[b].set_grad(g);
  }
  grads_ready_ = true;
}

double ZeroOptimizer::clip_grad_norm_(double max_norm) {
  ADJOINT_CHECK(max_norm >= 0, Value, kOp, "clip_grad_norm_: max_norm must be >= 0, got ",
                max_norm);
  const detail::ScopedStepPhase phase(detail::StepPhase::ShardedUpdate);
  gather_shard_gradients();
  NoGradGuard no_grad;
  double local = 0;
  for (const Tensor& s : shard_)
    if (s.grad().defined()) local += s.grad().to(DType::Float64).square().sum().item<double>();
  Tensor sum = full({1}, local, DType::Float64);
  group_.all_reduce(sum, ReduceOp::Sum);  // every rank's shard: the norm of the whole model
  const double total = std::sqrt(sum.item<double>());
  const double coef = max_norm / (total + 1e-6);  // as optim::clip_grad_norm_
  if (coef < 1)
    for (const Tensor& s : shard_)
      if (Tensor g = s.grad(); g.defined()) g.mul_(coef);
  return total;
}

// The shard starts each update from the model's current values (a loaded model, say).
void ZeroOptimizer::refresh_shards() {
  NoGradGuard no_grad;
  const int64_t rank = group_.rank();
  for (std::size_t b = 0; b < shard_.size(); ++b) {
    const int64_t chunk = shard_[b].numel();
    for_each_piece(
        ddp_, b, rank * chunk, chunk, [&](int64_t i, int64_t from, int64_t to, int64_t n) {
          Tensor(shard_[b]).narrow(0, to, n).copy_(
              adjoint::detail::detach_alias(ddp_.parameters()[i]).reshape({-1}).narrow(0, from, n));
        });
  }
}

void ZeroOptimizer::step() { update(nullptr); }

void ZeroOptimizer::unscale_(optim::GradScaler& scaler) {
  const detail::ScopedStepPhase phase(detail::StepPhase::ShardedUpdate);  // the overflow flag
  gather_shard_gradients();
  scaler.unscale_(*inner_);
}

bool ZeroOptimizer::step(optim::GradScaler& scaler) { return update(&scaler); }

// This rank's shard updated (by the scaler's step when given, which may skip it), then the
// parameters all-gathered from their owners.
bool ZeroOptimizer::update(optim::GradScaler* scaler) {
  // Its collectives are the step's update: a rank out of step fails at them (Note
  // [Collectives know their step] in call_check.cpp).
  const detail::ScopedStepPhase phase(detail::StepPhase::ShardedUpdate);
  gather_shard_gradients();
  refresh_shards();
  bool stepped = true;
  if (scaler) {
    stepped = scaler->step(*inner_);
    // Every rank must agree, or some would all-gather while others do not.
    Tensor flags = tensor(std::vector<int64_t>{stepped ? 1 : 0, stepped ? 0 : 1});
    group_.all_reduce(flags, ReduceOp::Max);
    const std::vector<int64_t> any = adjoint::detail::host_values<int64_t>(flags, kOp);
    ADJOINT_CHECK(any[0] == 0 || any[1] == 0, Value, kOp,
                  "the ranks disagree on skipping this step (some saw an Inf or NaN gradient in "
                  "their shard, others not): construct the GradScaler with combine_found_inf = "
                  "dist::found_inf_on_any_rank(group)");
  } else {
    inner_->step();
  }
  if (stepped) all_gather_parameters();
  grads_ready_ = false;
  return stepped;
}

std::function<bool(bool)> found_inf_on_any_rank(ProcessGroup& group) {
  return [&group](bool found) {
    Tensor flag = full({1}, found ? 1.0 : 0.0, DType::Int64);
    group.all_reduce(flag, ReduceOp::Max);
    return flag.item<int64_t>() != 0;
  };
}

void ZeroOptimizer::all_gather_parameters() {
  NoGradGuard no_grad;
  std::vector<Work> pending;
  for (const Tensor& s : shard_)
    pending.push_back(group_.all_gather_async(adjoint::detail::detach_alias(s)));
  for (std::size_t b = 0; b < shard_.size(); ++b) {
    const Tensor full_bucket = pending[b].result();
    for (int64_t i : ddp_.buckets()[b]) {
      const Tensor& p = ddp_.parameters()[i];
      Tensor(p).copy_(
          full_bucket.narrow(0, ddp_.offset_in_bucket(i), p.numel()).reshape(p.shape()));
    }
  }
}

optim::StateDict ZeroOptimizer::state_dict() {
  const optim::StateDict inner = inner_->state_dict();
  optim::StateDict out;
  std::map<int64_t, optim::StateDict> per_param;
  for (const auto& [key, value] : inner) {
    const auto parsed = parse_state_key(key);
    if (!parsed) {
      out.emplace_back(key, value);
      continue;
    }
    const auto [b, slot] = *parsed;
    const auto& members = ddp_.buckets().at(b);
    if (value.dim() == 0) {  // a per-shard scalar (the step): each member's
      for (int64_t i : members) per_param[i].emplace_back(slot, value.clone());
      continue;
    }
    // Every rank holds the same keys (the shards step together): gather the bucket's chunks.
    const Tensor full_bucket = group_.all_gather(value.contiguous());
    for (int64_t i : members) {
      const Tensor& p = ddp_.parameters()[i];
      per_param[i].emplace_back(
          slot,
          full_bucket.narrow(0, ddp_.offset_in_bucket(i), p.numel()).reshape(p.shape()).clone());
    }
  }
  for (auto& [i, slots] : per_param)
    for (auto& [slot, t] : slots) out.emplace_back("state." + std::to_string(i) + "." + slot, t);
  return out;
}

void ZeroOptimizer::load_state_dict(const optim::StateDict& state) {
  const int64_t n = static_cast<int64_t>(ddp_.parameters().size());
  const int64_t rank = group_.rank();
  optim::StateDict inner;
  std::map<int64_t, std::map<std::string, Tensor>> per_param;
  for (const auto& [key, value] : state) {
    const auto parsed = parse_state_key(key);
    if (!parsed) {
      inner.emplace_back(key, value);
      continue;
    }
    const auto& [i, slot] = *parsed;
    ADJOINT_CHECK(i < n, Value, kOp, "load_state_dict: '", key, "' names parameter ", i,
                  ", but the model has ", n);
    per_param[i][slot] = value;
  }
  NoGradGuard no_grad;
  for (std::size_t b = 0; b < shard_.size(); ++b) {
    std::map<std::string, Tensor> slots;  // this bucket's state, shard-shaped
    const int64_t chunk = shard_[b].numel();
    // A shard keeps one value of each scalar (the step) for all its elements: its members
    // must agree on it, and all have state or none (a parameter never updated has no moments
    // but would inherit the others' step).
    int64_t with_state = 0, first = -1;
    for (int64_t i : ddp_.buckets()[b]) {
      auto it = per_param.find(i);
      if (it == per_param.end()) continue;
      ++with_state;
      if (first < 0) first = i;
      for (const auto& [slot, t] : it->second) {
        if (t.dim() == 0) {
          auto [at, fresh] = slots.emplace(slot, t);
          ADJOINT_CHECK(fresh || at->second.to(DType::Float64).item<double>() ==
                                     t.to(DType::Float64).item<double>(),
                        Value, kOp, "load_state_dict: 'state.", i, ".", slot,
                        "' differs from 'state.", first, ".", slot,
                        "', and the two parameters share a shard, which keeps one ", slot,
                        " for all its elements");
          continue;
        }
        const Tensor& p = ddp_.parameters()[i];
        ADJOINT_CHECK(t.shape() == p.shape(), Shape, kOp, "load_state_dict: 'state.", i, ".", slot,
                      "' is ", describe(t), ", parameter ", i, " is ", describe(p));
        if (!slots.count(slot)) slots.emplace(slot, zeros({chunk}, t.dtype()));
      }
    }
    ADJOINT_CHECK(with_state == 0 || with_state == static_cast<int64_t>(ddp_.buckets()[b].size()),
                  Value, kOp, "load_state_dict: parameter ", first,
                  " has optimizer state but another parameter of its shard has none (never "
                  "updated); ZeRO updates a shard's parameters together");
    for (auto& entry : slots) {  // (not a structured binding: clang 14 cannot capture one)
      const std::string& slot = entry.first;
      Tensor& dst = entry.second;
      if (dst.dim() == 0) continue;
      for_each_piece(
          ddp_, b, rank * chunk, chunk, [&](int64_t i, int64_t from, int64_t to, int64_t len) {
            auto it = per_param.find(i);
            if (it == per_param.end() || !it->second.count(slot)) return;
            const Tensor& src = it->second.at(slot);
            dst.narrow(0, to, len).copy_(src.reshape({-1}).narrow(0, from, len).to(dst.dtype()));
          });
    }
    for (auto& [slot, t] : slots) inner.emplace_back("state." + std::to_string(b) + "." + slot, t);
  }
  inner_->load_state_dict(inner);
}

ZeroMemory ZeroOptimizer::memory() const {
  ZeroMemory m;
  for (const Tensor& p : ddp_.parameters()) m.parameters += static_cast<int64_t>(p.nbytes());
  m.gradients = ddp_.gradient_bytes();
  if (ddp_.zero_stage() == 1)  // stage 2's shard gradients are DDP's, counted above
    for (const Tensor& s : shard_)
      if (s.grad().defined()) m.gradients += static_cast<int64_t>(s.grad().nbytes());
  m.optimizer_state = state_bytes(inner_->state_dict());
  return m;
}

}  // namespace adjoint::dist
