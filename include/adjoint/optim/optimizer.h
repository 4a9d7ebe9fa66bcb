// adjoint::optim::Optimizer: the base of the optimizers (SGD, Adam, AdamW). It owns the list of
// parameters, the learning rate and the step counter, runs step() without recording a graph,
// and turns its state into named tensors (state_dict) and back (load_state_dict).
// The update rules themselves live in sgd.h and adam.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/tensor.h"

namespace adjoint::optim {

/// Named tensors in a fixed order: what state_dict() returns and checkpoints store.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class StateReader;
class GradScaler;

/// Base class of the optimizers. Holds leaf tensors that require grad and updates them in place
/// (the same tensor objects, no new storage), skipping those whose .grad is undefined.
///
///   optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
///   for (...) {
///     opt.zero_grad();
///     loss(batch).backward();
///     opt.step();
///   }
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient; runs under NoGradGuard. Counts a step
  /// even when no parameter has a gradient. Inside a compiled function it is one node that
  /// each replay runs (docs/compile.md, "Training steps"); the optimizer must then outlive the
  /// compiled function, or the replay throws.
  void step();
  /// Drops each parameter's .grad (set_to_none, the default) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  /// The learning rate of the next step.
  double lr() const { return lr_; }
  /// Sets the learning rate; throws for a negative or non-finite value.
  void set_lr(double lr);
  /// How many times step() has run (restored by load_state_dict).
  int64_t step_count() const { return step_count_; }
  /// The parameters, in the order given to the constructor; "state.<i>" names index this list.
  const std::vector<Tensor>& params() const { return params_; }
  /// "optim.SGD", "optim.Adam", ...: the component named in errors.
  const std::string& name() const { return name_; }

  /// Pure low-precision training, the memory-saving mode: keep a float32 copy (the "master
  /// weight") of every float16/bfloat16 parameter. step() then widens the gradient, updates the
  /// copy (and float32 optimizer state) and rounds the copy into the parameter, so updates
  /// smaller than the parameter's rounding step accumulate instead of vanishing. Call before
  /// the first step; float32 and float64 parameters are unaffected. The copies are part of
  /// state_dict() ("state.<i>.master").
  void keep_master_weights(bool on = true);
  bool keeps_master_weights() const { return keep_master_; }
  /// Parameter i's float32 master copy: undefined until its first update, or when none is kept.
  const Tensor& master_weight(std::size_t i) const { return master_.at(i); }

  /// A snapshot (copies) of everything needed to continue bit-identically:
  ///   "step"                  0-d int64, step_count()
  ///   "hparams.<name>"        0-d float64 (bool flags as 0-d bool): lr and the rest
  ///   "state.<i>.<slot>"      per-parameter state, e.g. "state.3.exp_avg"
  /// Parameters that never had a gradient have no state entries. With master weights, the
  /// state of a 16-bit parameter is float32, as its master copy "state.<i>.master" is.
  StateDict state_dict() const;
  /// Restores a state_dict() of the same kind of optimizer over parameters of the same shapes
  /// and dtypes, hyper-parameters included (as PyTorch). Validates every entry first: on an
  /// error (missing or unexpected key, wrong shape or dtype) nothing changes.
  void load_state_dict(const StateDict& state);

 protected:
  Optimizer(std::string name, std::vector<Tensor> params, double lr);

  /// Updates params()[index] from its gradient `grad` (defined, same shape and dtype).
  virtual void update(std::size_t index, Tensor& param, const Tensor& grad) = 0;
  /// Appends the hyper-parameters other than lr ("hparams.<name>") and per-parameter state.
  virtual void save_state(StateDict& out) const = 0;
  /// Reads what save_state wrote from `in`, validating it, and returns a function that installs
  /// it. Must not change the optimizer itself: the base class calls the returned function only
  /// after every entry was checked.
  virtual std::function<void()> load_state(StateReader& in) = 0;

  /// Checks a hyper-parameter, throwing "[optim.X] what: got value" unless ok.
  void check(bool ok, const std::string& what, double value) const;
  /// A contiguous scratch tensor shaped and typed like `like`, shared across parameters: its
  /// storage (one buffer per dtype and slot, grown to the largest parameter) is reused, so
  /// that a step does not allocate per parameter. Valid until the next call with that slot.
  Tensor scratch_like(const Tensor& like, int slot = 0);

 private:
  friend class GradScaler;  // its compiled step runs step_with at each replay

  /// Whether parameter i is updated through a float32 master copy.
  bool uses_master(std::size_t i) const;
  /// step() with gradients[i] for params()[i] (undefined: no update of it).
  void step_with(const std::vector<Tensor>& grads);
  /// step() inside a compiled function: recorded as an effect each replay runs.
  void record_traced_step();

  std::string name_;
  std::vector<Tensor> params_;
  double lr_;
  int64_t step_count_ = 0;
  std::map<std::pair<DType, int>, Tensor> scratch_;  // flat buffers by (dtype, slot)
  bool keep_master_ = false;
  std::vector<Tensor> master_;  // per parameter: its float32 copy, or undefined
  /// Points at this optimizer while it lives: a compiled step holds it weakly, to fail with a
  /// named error rather than touch a destroyed optimizer.
  std::shared_ptr<Optimizer*> alive_;
  const char* step_name_;  ///< "optim.AdamW.step": its node in graphs and profiles
};

/// Entries of a state dict by name, for load_state: each read marks its key as used, so that
/// the base class can reject keys nobody read. Errors name the optimizer and the key.
class StateReader {
 public:
  StateReader(const std::string& owner, const StateDict& state, const std::vector<Tensor>& params);
  /// A required 0-d float64 "hparams.<name>".
  double hparam(const std::string& name);
  /// A required 0-d bool "hparams.<name>".
  bool hparam_flag(const std::string& name);
  /// A required 0-d floating-point entry, as a double.
  double value(const std::string& key);
  /// A required 0-d int64 entry.
  int64_t count(const std::string& key);
  /// "state.<index>.<slot>" as a copy shaped and typed like params[index]; undefined if absent.
  Tensor param_state(std::size_t index, const std::string& slot);
  /// "state.<index>.<slot>" as a 0-d int64 value; nullopt when absent.
  std::optional<int64_t> param_count(std::size_t index, const std::string& slot);
  /// Throws for any key that no read asked for.
  void check_all_used() const;
  const std::string& owner() const { return owner_; }

 private:
  const Tensor* find(const std::string& key);
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  std::string owner_;
  const std::vector<Tensor>& params_;
  std::map<std::string, std::pair<Tensor, bool>> entries_;  // key -> (tensor, used)
};

}  // namespace adjoint::optim
