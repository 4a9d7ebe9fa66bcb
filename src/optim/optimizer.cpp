// Optimizer: parameter checks, step() and zero_grad(), the shared scratch buffers, and the
// generic half of state_dict()/load_state_dict() (step count, lr, and StateReader, which
// subclasses use to read their own entries with validation).
#include "adjoint/optim/optimizer.h"

#include <cmath>
#include <mutex>
#include <set>
#include <span>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "autograd/memory_hooks.h"
#include "core/op_tracer.h"

namespace adjoint::optim {

namespace {
/// A name that lives as long as the program, for graph nodes and profiles (which keep a
/// const char*).
const char* lasting_name(const std::string& name) {
  static std::mutex mutex;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}
}  // namespace

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, double lr)
    : name_(std::move(name)),
      params_(std::move(params)),
      lr_(lr),
      master_(params_.size()),
      alive_(std::make_shared<Optimizer*>(this)),
      step_name_(lasting_name(name_ + ".step")) {
  ADJOINT_CHECK(!params_.empty(), Value, name_, "got an empty parameter list");
  std::set<const TensorImpl*> seen;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    ADJOINT_CHECK(p.defined(), Value, name_, "parameter ", i, " is an undefined tensor");
    ADJOINT_CHECK(p.is_floating_point(), DType, name_, "parameter ", i, " (", describe(p),
                  ") is not a floating-point tensor");
    ADJOINT_CHECK(p.is_leaf() && p.requires_grad(), Value, name_, "parameter ", i, " (",
                  describe(p),
                  ") must be a leaf tensor that requires grad; call requires_grad_() on it, or "
                  "detach() it first");
    // A parameter listed twice would be updated twice per step: always a bug.
    ADJOINT_CHECK(seen.insert(p.impl()).second, Value, name_, "parameter ", i, " (", describe(p),
                  ") appears more than once in the parameter list");
  }
  set_lr(lr);
}

Optimizer::~Optimizer() = default;

void Optimizer::check(bool ok, const std::string& what, double value) const {
  ADJOINT_CHECK(ok, Value, name_, what, ": got ", value);
}

void Optimizer::set_lr(double lr) {
  check(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0", lr);
  lr_ = lr;
}

void Optimizer::keep_master_weights(bool on) {
  ADJOINT_CHECK(step_count_ == 0 || on == keep_master_, Value, name_,
                "keep_master_weights must be chosen before the first step");
  keep_master_ = on;
}

bool Optimizer::uses_master(std::size_t i) const {
  return keep_master_ && is_reduced_float(params_[i].dtype());
}

void Optimizer::step() {
  if (::adjoint::detail::tracing_writes()) [[unlikely]] {
    record_traced_step();
    return;
  }
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  // A profile or a memory timeline sees the step as one op ("optim.AdamW.step"), as a
  // compiled replay reports its node; its in-place updates run below the stack.
  ::adjoint::detail::OpObserver* const observer = ::adjoint::detail::tls_op_observer;
  if (observer == nullptr) [[likely]] {
    step_with(grads);
    return;
  }
  observer->before_forward_op(step_name_);
  try {
    step_with(grads);
  } catch (...) {
    observer->forward_op_failed(step_name_);
    throw;
  }
  observer->after_forward_op(step_name_);
}

void Optimizer::record_traced_step() {
  // Inside a compiled function: an effect that each replay runs with that replay's gradients
  // (Note [Training steps under compile] in src/compile/trace.cpp). The update itself is
  // the eager one, so it reads lr, step counts and state as they are at that call.
  std::vector<Tensor> grads;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    which.push_back(i);
  }
  std::weak_ptr<Optimizer*> alive = alive_;
  const std::string owner = name();
  ::adjoint::detail::tls_op_tracer->record_effect(
      step_name_, grads, params_, [alive, owner, which](std::span<const Tensor> in) {
        const std::shared_ptr<Optimizer*> self = alive.lock();
        ADJOINT_CHECK(self != nullptr, Value, owner,
                      "step: the optimizer was destroyed, and a compiled function that steps "
                      "it was called afterwards");
        std::vector<Tensor> all((*self)->params_.size());
        for (std::size_t k = 0; k < which.size(); ++k) all[which[k]] = in[k];
        (*self)->step_with(all);
        return Tensor();
      });
}

void Optimizer::step_with(const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;  // as PyTorch: no gradient, no update and no state change
    if (uses_master(i)) {
      // The update runs in float32 on the master copy; the parameter gets it rounded once.
      Tensor& master = master_[i];
      if (!master.defined()) master = detail::detach_alias(p).to(DType::Float32);
      update(i, master, g.to(DType::Float32));
      p.copy_(master);
      continue;
    }
    update(i, p, g);
  }
  ++step_count_;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) p.zero_grad(set_to_none);
}

Tensor Optimizer::scratch_like(const Tensor& like, int slot) {
  Tensor& buf = scratch_[{like.dtype(), slot}];
  const int64_t n = like.numel();
  if (!buf.defined() || buf.numel() < n) buf = empty({n}, like.dtype());
  return buf.narrow(0, 0, n).view(like.shape());
}

StateDict Optimizer::state_dict() const {
  NoGradGuard no_grad;
  StateDict out;
  out.emplace_back("step", scalar_tensor(step_count_, DType::Int64));
  out.emplace_back("hparams.lr", scalar_tensor(lr_, DType::Float64));
  save_state(out);
  for (std::size_t i = 0; i < master_.size(); ++i)
    if (master_[i].defined())
      out.emplace_back("state." + std::to_string(i) + ".master", master_[i].clone());
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  // What each parameter's state looks like: the parameter, or its float32 master copy.
  std::vector<Tensor> state_like = params_;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (uses_master(i)) state_like[i] = empty(params_[i].shape(), DType::Float32);
  StateReader in(name_, state, state_like);
  const int64_t step = in.count("step");
  ADJOINT_CHECK(step >= 0, Value, name_, "load_state_dict: 'step' must be >= 0: got ", step);
  const double lr = in.hparam("lr");
  check(std::isfinite(lr) && lr >= 0, "load_state_dict: learning rate must be finite and >= 0", lr);
  std::function<void()> install = load_state(in);
  std::vector<Tensor> master(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (uses_master(i)) master[i] = in.param_state(i, "master");
  in.check_all_used();
  // Every entry has been checked: from here on nothing throws.
  step_count_ = step;
  lr_ = lr;
  install();
  master_ = std::move(master);
}

// ---- StateReader ----

StateReader::StateReader(const std::string& owner, const StateDict& state,
                         const std::vector<Tensor>& params)
    : owner_(owner), params_(params) {
  for (const auto& [key, t] : state) {
    if (!t.defined()) fail(key, "is an undefined tensor");
    if (!entries_.emplace(key, std::make_pair(t, false)).second) fail(key, "appears twice");
  }
}

void StateReader::fail(const std::string& key, const std::string& what) const {
  throw Error(ErrorKind::Value, owner_, "load_state_dict: '" + key + "' " + what);
}

const Tensor* StateReader::find(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.second = true;
  return &it->second.first;
}

double StateReader::hparam(const std::string& name) { return value("hparams." + name); }

double StateReader::value(const std::string& key) {
  const Tensor* t = find(key);
  if (!t) fail(key, "is missing (not a state dict of " + owner_ + "?)");
  if (t->dim() != 0 || !t->is_floating_point())
    fail(key, "must be a 0-d floating-point tensor, got " + describe(*t));
  return t->item<double>();
}

bool StateReader::hparam_flag(const std::string& name) {
  const std::string key = "hparams." + name;
  const Tensor* t = find(key);
  if (!t) fail(key, "is missing (not a state dict of " + owner_ + "?)");
  if (t->dim() != 0 || t->dtype() != DType::Bool)
    fail(key, "must be a 0-d bool tensor, got " + describe(*t));
  return t->item<bool>();
}

int64_t StateReader::count(const std::string& key) {
  const Tensor* t = find(key);
  if (!t) fail(key, "is missing (not a state dict of " + owner_ + "?)");
  if (t->dim() != 0 || t->dtype() != DType::Int64)
    fail(key, "must be a 0-d int64 tensor, got " + describe(*t));
  return t->item<int64_t>();
}

Tensor StateReader::param_state(std::size_t index, const std::string& slot) {
  const std::string key = "state." + std::to_string(index) + "." + slot;
  const Tensor* t = find(key);
  if (!t) return {};
  const Tensor& p = params_[index];
  if (!(t->shape() == p.shape()) || t->dtype() != p.dtype())
    fail(key,
         "is " + describe(*t) + " but parameter " + std::to_string(index) + " is " + describe(p));
  // A copy: the optimizer must own its state, not alias the caller's tensors.
  return t->detach().clone();
}

std::optional<int64_t> StateReader::param_count(std::size_t index, const std::string& slot) {
  const std::string key = "state." + std::to_string(index) + "." + slot;
  if (!entries_.count(key)) return std::nullopt;
  return count(key);
}

void StateReader::check_all_used() const {
  for (const auto& [key, entry] : entries_)
    if (!entry.second)
      fail(key,
           "is not an entry of this optimizer's state (another optimizer's state dict, or "
           "one saved for a different parameter list?)");
}

}  // namespace adjoint::optim
