// The tracer behind compile: runs the function once and records every op into a Graph.
#include "compile/trace.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "adjoint/autograd.h"
#include "adjoint/generator.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "core/made_watcher.h"
#include "core/op_tracer.h"
#include "dispatch/external_op.h"

namespace adjoint::detail {

// Note [Tracing]
// compile traces by running the function once on real tensors (torch.jit.trace, JAX's jit on
// concrete values would be the cousins), with a tracer installed as the Trace layer of the
// dispatch stack. Every op call becomes a GraphNode holding a copy of its op struct (TracedOp,
// able to run its kernel again) and the ids of its input values; its result, and the tensors
// its forward saved for backward, become values. A call runs with the Trace layer off below
// it, so an op is one node however it is computed. The function gets leaf aliases of its
// arguments; a tensor it reads from outside (a module's parameter) becomes a captured value,
// held by the graph and read again at every replay, and is handed on as a leaf alias too, so
// that the trace's own recording never reaches the caller's graph.
//
// The backward is traced by running it: when an input or a captured tensor requires grad, the
// trace calls autograd::grad on the outputs with cotangent values, and the VJPs' ops are
// recorded as backward nodes. The joint graph is then split (passes.cpp) into a forward that
// keeps what the backward reads, and a backward that runs as one node of the engine.
//
// What a graph cannot hold is never taken in silently; it is a GraphBreak:
// - values read into C++ (item, to_vector): control flow may depend on them;
// - a traced tensor changed in place by code the tracer does not see (a kernel's raw write):
//   each value is registered with its storage's version, checked when it is used and at the
//   end (in-place ops themselves are recorded: Note [In-place ops under compile], below);
// - a tensor made during the trace by code the tracer does not see, fed to a traced op or
//   returned: the storages allocated outside traced ops are noted (storage_made), and such a
//   tensor is accepted only as a factory's constant (constant_made) or as an alias with the
//   same storage and layout as a traced value (detach, a saved tensor unpacked).
// Comparisons and logical ops (outside the stack) record themselves through record_external;
// random factories too, as draws that replay from the generator's state at each call, like
// eager code. The generators a trace drew from are restored afterwards, so the first call's
// replay draws what an eager call would.

// Note [In-place ops under compile]
// A graph's values never change, so an in-place op is traced as what it computes: x.add_(y)
// records add(x, y) (src/ops/inplace.cpp calls the out-of-place op, through the stack), and
// then record_write rebinds x to that result: every later op that reads x reads the new value
// (the tracer hands the result on in x's place, as it hands a captured tensor's alias). Nothing
// is written while tracing, so a trace that breaks later has changed nothing, and the eager
// run that follows a break does the writes once.
// - A write to an argument or a captured tensor (an optimizer state, a running statistic) is a
//   write the caller sees: its final value becomes an extra output of the graph
//   (Graph::writes), which each replay copies into the caller's tensor at the end, bumping its
//   version as the eager op would.
// - A write to a tensor whose memory another value of the trace shares (a view of it, or the
//   tensor it views) is refused: the other would have to change too, and a graph holds no
//   aliasing. clone() first, or use the out-of-place op.
// - Under vmap or jvp a compiled function that writes runs eagerly (the transforms' own
//   in-place rules apply), and a graph that writes is not exported.

// Note [Training steps under compile]
// A training step (zero_grad, the loss, backward, the optimizer's step) is traced whole:
// - backward() inside the function (record_backward) is traced as autograd::grad of its
//   outputs for every argument and captured tensor that requires grad, so the VJPs' ops are
//   nodes of the graph like any other, and each gradient is added to that tensor's traced .grad
//   (its gradient so far, or none). `.grad` reads inside the function (traced_grad) see those
//   values; zero_grad and set_grad set them. The final .grad of each tensor the function set is
//   an extra output, written into the caller's tensor at the end of each replay (in place where
//   it holds a gradient of that shape and dtype, else set), as the eager engine would leave it.
//   A .grad the function reads before setting it must be none at the trace (a guard: a call
//   where it is not traces again); a defined one read for its values stops the trace, since
//   its values come from outside the graph. A function that ran backward returns its results
//   detached (eager code's loss still has a history, whose buffers that backward freed).
// - The optimizer's step is an effect (record_effect): a node that each replay runs, not
//   traced op by op. Its run is the eager update (Optimizer::step_with), given that replay's
//   gradients, so it reads the learning rate, step counts and state as they are at that call
//   (a scheduler's set_lr, Adam's bias corrections) and takes the fused Adam kernel: the
//   compiled step is the eager step, bit for bit. The tensors it changes (the parameters) may
//   not be read by the function after it (the trace would see them unchanged). A graph with an
//   effect is not exported and runs eagerly under the transforms.
// - A GradScaler's step is traced unscaling plus an effect (Note [GradScaler under compile]
//   in src/optim/grad_scaler.cpp).
// - Refused: backward with create_graph, leaves with gradient hooks (a replay would not run
//   them), and arguments with a history outside the function (eager backward would go on
//   into the caller's graph).

namespace {

bool same_layout(const TensorImpl& a, const TensorImpl& b) {
  return a.shape == b.shape && a.strides == b.strides && a.offset == b.offset && a.dtype == b.dtype;
}

class Tracer final : public OpTracer, public MadeWatcher {
 public:
  /// Throws GraphBreak, and remembers why: a function that catches adjoint::Error and goes on
  /// (a loop that tries ops and skips those that fail) must still not be taken as traced.
  [[noreturn]] void break_trace(std::string reason) {
    if (broken_.empty()) broken_ = reason;
    throw GraphBreak(reason);
  }
  /// Why the trace broke, or empty.
  const std::string& broken() const { return broken_; }

  explicit Tracer(Graph& g)
      : g_(g),
        previous_(tls_op_tracer),
        previous_watcher_(tls_made_watcher),
        previous_layers_(tls_mode.layers) {
    tls_op_tracer = this;
    tls_made_watcher = this;
    set_layer_active(Layer::Trace, true);
  }
  ~Tracer() override {
    tls_op_tracer = previous_;
    tls_made_watcher = previous_watcher_;
    tls_mode.layers = previous_layers_;
    for (auto& [gen, state] : generators_) gen->set_state(state);
  }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  /// Turns the Trace layer off while alive (an op's own work, the tracer's own tensors).
  struct Pause {
    uint8_t layers = tls_mode.layers;
    Pause() { set_layer_active(Layer::Trace, false); }
    ~Pause() { set_layer_active(Layer::Trace, (layers & layer_bit(Layer::Trace)) != 0); }
  };

  /// Argument i: the alias the function gets.
  Tensor add_input(const Tensor& x, int i) {
    if (!x.defined()) {
      g_.inputs.push_back(-1);
      return x;
    }
    const int id = g_.add_value({ValueKind::Input, i, -1, x.shape(), x.dtype()});
    g_.inputs.push_back(id);
    Tensor alias = leaf_alias(x);
    leaves_.push_back({id, x, alias});
    known(alias, id);
    return alias;
  }

  Tensor record(OpCall& call) override {
    Generator* const rng = call.generator();  // a random draw's (Note [Random draws in the stack])
    if (watching_ != nullptr) [[unlikely]] {
      check_watched(call.inputs(), call.name());
      restore_after_trace(rng);
      return call.next(Layer::Trace);
    }
    std::vector<int> ins;
    ins.reserve(call.inputs().size());
    for (Tensor& x : call.inputs()) ins.push_back(use(x, call.name()));
    const bool local = note_draw(rng);
    Tensor out;
    {
      Pause pause;
      out = call.next(Layer::Trace);
    }
    if (local) {
      constants_[out.impl()] = {};
      return out;
    }
    add_node(call.traced_op(), std::move(ins), out, call.saved(), rng != nullptr);
    return out;
  }

  // A draw inside a custom function is not recorded (each replay runs the function again), but
  // its generator is restored after the trace all the same, so the first replay draws what
  // eager code would.
  void restore_after_trace(Generator* rng) {
    if (rng && !local_generators_.contains(rng)) generators_.try_emplace(rng, rng->state());
  }

  // Before a recorded draw: its generator's state is kept to be restored after the trace, and
  // the graph draws from it. Returns whether the generator was made inside the function: seeded
  // there from C++ values, its draws are the same at every call, constants of the trace.
  bool note_draw(Generator* rng) {
    const bool local = rng && local_generators_.contains(rng);
    if (rng && !local && !generators_.contains(rng)) {
      generators_.emplace(rng, rng->state());
      g_.generators.push_back(rng);
    }
    return local;
  }

  Tensor record_custom(OpCall& call) override {
    const char* const name = call.name();
    CustomReplay replay = call.custom_replay();
    if (replay.why_not) untraceable(name, replay.why_not);
    for (const Tensor& x : call.inputs()) {
      // The node replays on plain values: a batched input would need the vmap level rebuilt
      // around the call, and a tangent the jvp rule's ops, which run unseen by the tracer.
      if (batch_level(x) != 0)
        untraceable(name,
                    "a custom function under vmap is not traced (vmap of the compiled function "
                    "is)");
      if (has_visible_tangent(x))
        untraceable(name,
                    "a custom function under jvp is not traced (jvp of the compiled function is)");
    }
    std::vector<int> ins;
    for (Tensor& x : call.inputs()) ins.push_back(use(x, name));
    Watched watched{name, {}};
    for (const Tensor& x : call.inputs())
      if (x.defined()) watched.storages.insert(x.impl()->storage.get());
    Tensor out;
    {
      watching_ = &watched;
      struct Unwatch {
        const Watched*& w;
        ~Unwatch() { w = nullptr; }
      } unwatch{watching_};
      out = call.next(Layer::Trace);
    }
    const auto arity = static_cast<std::ptrdiff_t>(ins.size());
    add_node(std::make_shared<ExternalOp>(name, std::move(replay.run), ExternalExport{}, arity),
             std::move(ins), out, {}, false);
    return out;
  }

  bool watching() const override { return watching_ != nullptr; }

  void record_write(const Tensor& self, const Tensor& value, const char* op) override {
    Tensor target = self, v = value;
    use(target, op);  // registers a tensor from outside as a capture
    const int now = use(v, op);
    Known& k = known_.at(self.impl());
    const int was = k.id;
    // The memory the function reads as `self` now: its last written value's, or its own.
    const Tensor& current = k.stand_in.defined() ? k.stand_in : self;
    const Leaf* leaf = leaf_of(self);
    for (int id : by_storage_[current.impl()->storage.get()])
      if (id != was)
        break_trace(str(op, ": writes in place to a tensor (", self.shape(), ", ", self.dtype(),
                        ") whose memory another tensor of the function shares (a view of it, "
                        "or the tensor it views), which would have to change too; clone() it "
                        "first, or use the out-of-place op"));
    k.id = now;
    k.stand_in = v;
    written_[self.impl()] = v;
    if (leaf == nullptr) return;
    const auto it = std::ranges::find(writes_, leaf->id, &std::pair<int, int>::first);
    if (it != writes_.end())
      it->second = now;
    else
      writes_.emplace_back(leaf->id, now);
  }

  void record_backward(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs,
                       bool create_graph) override {
    if (create_graph)
      break_trace(
          "backward(create_graph=true) inside a compiled function: the graph would have to "
          "record its own backward (use grad() with create_graph, or run it outside)");
    std::vector<std::size_t> which;  // leaves that receive a gradient
    std::vector<Tensor> aliases;
    for (std::size_t i = 0; i < leaves_.size(); ++i) {
      const Leaf& l = leaves_[i];
      if (!l.alias.requires_grad()) continue;
      const AutogradMeta* m = l.caller.impl()->autograd.get();
      // An argument with a history: eager backward would flow on into the caller's graph.
      if (!l.caller.is_leaf())
        break_trace(str("backward inside a compiled function reaches ", describe_leaf(l.id),
                        ", which has a history of its own outside the function; its gradient "
                        "would flow on into the caller's graph (detach it, or run backward "
                        "outside)"));
      if (m && (!m->leaf_hooks.empty() || !m->post_accumulate_hooks.empty()))
        break_trace(str("backward inside a compiled function: ", describe_leaf(l.id),
                        " has a gradient hook, which a replay would not run (run backward "
                        "outside the compiled function)"));
      which.push_back(i);
      aliases.push_back(l.alias);
    }
    const std::vector<Tensor> roots(outputs.begin(), outputs.end());
    const std::vector<Tensor> seeds(grad_outputs.begin(), grad_outputs.end());
    ran_backward_ = true;
    if (aliases.empty()) return;
    const std::vector<Tensor> grads =
        autograd::grad(roots, aliases, seeds, false, false, /*allow_unused=*/true);
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;
      const Tensor old = traced_grad(leaves_[which[k]].caller);
      set_grad_value(which[k], old.defined() ? old + grads[k] : grads[k]);
    }
  }

  Tensor traced_grad(const Tensor& t) override {
    const Leaf* leaf = leaf_for(t, "grad");
    if (leaf == nullptr) {  // a tensor the function made: its own .grad (none unless retained)
      Pause pause;
      return t.grad();
    }
    const TensorImpl* key = leaf->caller.impl();
    if (const auto it = grads_.find(key); it != grads_.end()) return current(it->second);
    if (caller_grad(*leaf).defined())
      break_trace(str("reads the .grad of ", describe_leaf(leaf->id),
                      " that it did not compute; a replay could not read it again (call "
                      "zero_grad() first, inside the function or outside)"));
    return Tensor();
  }

  void set_traced_grad(const Tensor& t, const Tensor& g) override {
    const Leaf* leaf = leaf_for(t, "set_grad");
    if (leaf == nullptr)
      break_trace(str("set_grad inside a compiled function: the tensor (", t.shape(), ", ",
                      t.dtype(), ") was made inside it, and a replay keeps no .grad of its"));
    set_grad_value(static_cast<std::size_t>(leaf - leaves_.data()), g);
  }

  void zero_traced_grad(const Tensor& t, bool set_to_none) override {
    const Leaf* leaf = leaf_for(t, "zero_grad");
    if (leaf == nullptr) return;  // made inside the function: it holds no gradient
    const auto i = static_cast<std::size_t>(leaf - leaves_.data());
    if (set_to_none) {
      set_grad_value(i, Tensor());
      return;
    }
    // zero_() of the gradient it holds, if any: its shape and dtype are the tensor's own.
    const auto it = grads_.find(leaf->caller.impl());
    const Tensor held = it != grads_.end() ? current(it->second) : caller_grad(*leaf);
    if (held.defined()) set_grad_value(i, zeros(held.shape(), held.dtype()));
  }

  void record_effect(const char* name, std::span<const Tensor> inputs,
                     std::span<const Tensor> changes, ExternalFn run) override {
    std::vector<int> ins;
    std::vector<Tensor> args(inputs.begin(), inputs.end());
    for (Tensor& x : args) ins.push_back(use(x, name));
    for (const Tensor& c : changes) {
      changed_[c.impl()] = name;
      if (const Leaf* l = leaf_of(c)) {
        changed_[l->caller.impl()] = name;
        changed_[l->alias.impl()] = name;
      }
    }
    const auto arity = static_cast<std::ptrdiff_t>(ins.size());
    add_node(std::make_shared<ExternalOp>(name, std::move(run), ExternalExport{}, arity),
             std::move(ins), Tensor(), {}, false);
    g_.nodes.back().effect = true;
  }

  bool ran_backward() const { return ran_backward_; }
  /// The .grad writes: (leaf value, final gradient value or -1 for none), in order.
  std::vector<std::pair<int, int>> grad_writes() {
    std::vector<std::pair<int, int>> out;
    for (std::size_t i : grad_order_) {
      Tensor v = current(grads_.at(leaves_[i].caller.impl()));
      out.emplace_back(leaves_[i].id, v.defined() ? use(v, "backward") : -1);
    }
    return out;
  }
  /// The leaves whose .grad the function read before setting it: (leaf value, defined).
  const std::vector<std::pair<int, bool>>& grad_guards() const { return grad_guards_; }

  /// What the function's tensor t holds now: the last value written into it, else t itself.
  Tensor current(const Tensor& t) const {
    if (!t.defined()) return t;
    const auto it = written_.find(t.impl());
    return it == written_.end() ? t : it->second;
  }

  /// The arguments and captured tensors the function wrote: (leaf value, final value).
  const std::vector<std::pair<int, int>>& writes() const { return writes_; }

  [[noreturn]] void untraceable(const char* op, const char* why) override {
    break_trace(str(op, " inside a compiled function: ", why));
  }

  void constant_made(const Tensor& t, ExternalExport recipe) override {
    if (watching_ != nullptr) return;  // inside a custom function: made again at each replay
    constants_[t.impl()] = {std::move(recipe), t.impl()->storage->version()};
  }
  // Memory made while tracing counts, paused or not (Note [Things made below the stack] in
  // src/core/made_watcher.h); generators only while the trace is on (not paused, as inside
  // the tracer's own work).
  void generator_made(const Generator* gen) override {
    if (tracing()) local_generators_.insert(gen);
  }
  void generator_reseeded(const Generator* gen) override {
    if (tracing() && !local_generators_.contains(gen) && watching_ == nullptr)
      break_trace(
          "the function seeds or sets the state of a generator made outside it; a replay "
          "would not do that again (seed it outside, or make the generator inside)");
  }
  void storage_made(const StorageImpl* s) override { made_while_tracing_.insert(s); }

  /// The value of a tensor the function returned.
  int output(const Tensor& t) {
    if (!t.defined()) return -1;
    Tensor copy = t;
    return use(copy, "the function's result");
  }

  void start_backward() { backward_ = true; }

  /// A cotangent value for output k, and the tensor that stands for it while tracing.
  Tensor cotangent(int k, const Tensor& out) {
    Tensor c;
    {
      Pause pause;
      c = ones(out.shape(), out.dtype());
    }
    known(c, g_.add_value({ValueKind::Cotangent, k, -1, out.shape(), out.dtype()}));
    return c;
  }

  struct Leaf {
    int id;
    Tensor caller;  ///< the caller's tensor (an argument, or a captured one)
    Tensor alias;   ///< what the traced function computed with
  };
  const std::vector<Leaf>& leaves() const { return leaves_; }

  /// Throws unless every argument and captured tensor still has the version it had.
  void check_leaves_unchanged() {
    for (const Leaf& l : leaves_)
      if (l.alias.impl()->storage->version() != known_.at(l.alias.impl()).version)
        break_trace(str("the function changed ", describe_leaf(l.id),
                        " in place; a compiled function must not modify its inputs or "
                        "the tensors it reads from outside"));
  }

 private:
  struct Known {
    int id;
    uint64_t version;
    Tensor stand_in;  ///< for a captured tensor: its alias
  };

  /// A custom function's forward may read its arguments (and their views), what it makes, and
  /// tensors from outside the compiled function (read again at each replay, as eager code
  /// would); not another traced value, which its closure could only hold from this call.
  void check_watched(std::span<const Tensor> inputs, const char* op) {
    for (const Tensor& x : inputs) {
      if (!x.defined()) continue;
      const StorageImpl* storage = x.impl()->storage.get();
      if (watching_->storages.contains(storage)) continue;
      auto it = by_storage_.find(storage);
      if (it == by_storage_.end()) continue;
      for (int id : it->second) {
        const ValueKind kind = g_.values[static_cast<std::size_t>(id)].kind;
        if (kind == ValueKind::Capture || kind == ValueKind::Constant) continue;
        break_trace(str(watching_->name, ": its forward reads a tensor (", x.shape(), ", ",
                        x.dtype(), ", in ", op,
                        ") that the compiled function computed or was given, but not as an "
                        "argument of the custom function; a replay would hand it this call's "
                        "tensor (pass it as an argument, e.g. in params)"));
      }
    }
  }

  /// The leaf t is, capturing it if the function had not used it yet; null for a tensor the
  /// function made.
  const Leaf* leaf_for(const Tensor& t, const char* op) {
    if (const Leaf* l = leaf_of(t)) return l;
    Tensor copy = t;
    use(copy, op);
    return leaf_of(t);
  }

  /// The .grad the caller's tensor holds as the function first reads it, guarded: a call where
  /// it is none, or defined, where it was not traces again. None is then the traced value.
  Tensor caller_grad(const Leaf& leaf) {
    Tensor held;
    {
      Pause pause;
      held = leaf.caller.grad();
    }
    grad_guards_.emplace_back(leaf.id, held.defined());
    if (!held.defined()) grads_.emplace(leaf.caller.impl(), Tensor());
    return held;
  }

  /// Leaf i's traced .grad is now g (undefined: none).
  void set_grad_value(std::size_t i, const Tensor& g) {
    Tensor v = g;
    if (v.defined()) use(v, "set_grad");
    grads_.insert_or_assign(leaves_[i].caller.impl(), v);
    if (std::ranges::find(grad_order_, i) == grad_order_.end()) grad_order_.push_back(i);
  }

  /// The argument or captured tensor t is (the caller's tensor or its alias), or null.
  const Leaf* leaf_of(const Tensor& t) const {
    for (const Leaf& l : leaves_)
      if (l.caller.impl() == t.impl() || l.alias.impl() == t.impl()) return &l;
    return nullptr;
  }

  std::string describe_leaf(int id) const {
    const Value& v = g_.values[static_cast<std::size_t>(id)];
    return str(v.kind == ValueKind::Input ? "argument " : "captured tensor ", v.index, " (",
               v.shape, ", ", v.dtype, ")");
  }

  // The same memory and layout (ops decide by strides: reshape views or copies), without the
  // caller's history or hooks. Nothing is written through it: in-place ops stop the trace
  // before they write (check_inplace in src/ops/inplace.cpp).
  Tensor leaf_alias(const Tensor& x) const {
    Pause pause;
    Tensor alias = detail::detach_alias(x);
    if (is_grad_enabled() && x.requires_grad()) alias.requires_grad_(true);
    return alias;
  }

  /// Registers t as a tensor of value id; `stand_in`: what to compute with instead of t.
  void known(const Tensor& t, int id, const Tensor& stand_in = Tensor()) {
    TensorImpl* impl = t.impl();
    known_[impl] = Known{id, impl->storage->version(), stand_in};
    by_storage_[impl->storage.get()].push_back(id);
    alive_.push_back(t);  // so that no new tensor reuses the address while tracing
    if (first_.size() <= static_cast<std::size_t>(id)) first_.resize(id + 1);
    if (!first_[static_cast<std::size_t>(id)].defined()) first_[static_cast<std::size_t>(id)] = t;
  }

  /// The value x stands for; a captured tensor is replaced by the alias the trace computes
  /// with.
  int use(Tensor& x, const char* op) {
    if (!x.defined()) return -1;
    TensorImpl* impl = x.impl();
    if (!changed_.empty()) [[unlikely]]
      if (const auto c = changed_.find(impl); c != changed_.end())
        break_trace(str(op, ": reads a tensor (", impl->shape, ", ", impl->dtype, ") that ",
                        c->second,
                        " changed earlier in the function; a trace sees it as it was (read it "
                        "after the compiled function returns)"));
    if (auto it = known_.find(impl); it != known_.end()) {
      if (impl->storage->version() != it->second.version)
        break_trace(str(op, ": one of its inputs (", impl->shape, ", ", impl->dtype,
                        ") was changed in place while tracing; a compiled function may "
                        "not modify tensors in place"));
      if (it->second.stand_in.defined()) x = it->second.stand_in;
      return it->second.id;
    }
    // The same memory and layout as a traced value: an alias of it (detach, a saved tensor
    // unpacked). It stays what it is (a detached alias carries no gradient), with its value.
    if (auto s = by_storage_.find(impl->storage.get()); s != by_storage_.end()) {
      for (int id : s->second) {
        const TensorImpl& v = *first_[static_cast<std::size_t>(id)].impl();
        if (same_layout(v, *impl) && v.storage->version() == impl->storage->version()) {
          known(x, id);
          return id;
        }
      }
      if (!made_while_tracing_.contains(impl->storage.get()) && !constants_.contains(impl))
        break_trace(str(op, ": got a view (", impl->shape, ", ", impl->dtype,
                        ") of a traced tensor made by code compile cannot trace"));
    }
    if (auto c = constants_.find(impl); c != constants_.end()) {
      const int id = g_.add_value({ValueKind::Constant, static_cast<int>(g_.constants.size()), -1,
                                   impl->shape, impl->dtype});
      g_.constants.push_back(x);
      // A recipe holds only while the factory's values are there: not after an in-place write.
      const bool kept = c->second.version == impl->storage->version();
      g_.constant_recipes.push_back(kept ? c->second.recipe : ExternalExport{});
      known(x, id);
      return id;
    }
    if (made_while_tracing_.contains(impl->storage.get()))
      break_trace(str(op, ": got a tensor (", impl->shape, ", ", impl->dtype,
                      ") made inside the function by code compile cannot trace (only ops, "
                      "comparisons, factories and random draws are recorded)"));
    // From outside the function: captured, read again at every call.
    const int id = g_.add_value(
        {ValueKind::Capture, static_cast<int>(g_.captures.size()), -1, impl->shape, impl->dtype});
    g_.captures.push_back(x);
    Tensor alias = leaf_alias(x);
    leaves_.push_back({id, x, alias});
    known(alias, id);
    known(x, id, alias);
    x = alias;
    return id;
  }

  void add_node(std::shared_ptr<const TracedOp> op, std::vector<int> ins, const Tensor& out,
                const std::vector<Tensor>& saved, bool random) {
    const int node = static_cast<int>(g_.nodes.size());
    GraphNode n{std::move(op), std::move(ins), {}, backward_, random};
    // Which input a result shares memory with (a view), for the memory plan.
    auto alias_of = [&](const Tensor& t) {
      for (int id : n.inputs)
        if (id >= 0 && first_[static_cast<std::size_t>(id)].impl()->storage == t.impl()->storage)
          return id;
      return -1;
    };
    auto add_output = [&](const Tensor& t) {
      const int k = static_cast<int>(n.outputs.size());
      const int id =
          t.defined()
              ? g_.add_value({ValueKind::Result, k, node, t.shape(), t.dtype(), alias_of(t)})
              : g_.add_value({ValueKind::Result, k, node, {}, kDefaultFloat});
      n.outputs.push_back(id);
      if (t.defined()) known(t, id);
    };
    add_output(out);
    for (const Tensor& s : saved) add_output(s);
    g_.nodes.push_back(std::move(n));
  }

  struct Watched {
    const char* name;                                 ///< the custom function
    std::unordered_set<const StorageImpl*> storages;  ///< of its arguments
  };
  const Watched* watching_ = nullptr;
  Graph& g_;
  OpTracer* previous_;
  MadeWatcher* previous_watcher_;
  uint8_t previous_layers_;
  bool backward_ = false;
  std::unordered_map<const TensorImpl*, Known> known_;
  std::unordered_map<const StorageImpl*, std::vector<int>> by_storage_;
  std::unordered_set<const StorageImpl*> made_while_tracing_;
  struct Constant {
    ExternalExport recipe;  ///< how its factory made it (no key: unknown)
    uint64_t version = 0;   ///< its storage's version then
  };
  std::unordered_map<const TensorImpl*, Constant> constants_;
  std::unordered_map<Generator*, Generator::State> generators_;
  std::unordered_set<const Generator*> local_generators_;
  std::vector<Tensor> first_;  ///< by value id: the first tensor registered for it
  std::vector<Tensor> alive_;
  std::vector<Leaf> leaves_;
  std::vector<std::pair<int, int>> writes_;
  std::unordered_map<const TensorImpl*, Tensor> written_;  ///< by tensor: its last value
  std::unordered_map<const TensorImpl*, Tensor> grads_;    ///< by caller's tensor: its .grad
  std::vector<std::size_t> grad_order_;                    ///< the leaves whose .grad was set
  std::vector<std::pair<int, bool>> grad_guards_;
  std::unordered_map<const TensorImpl*, const char*> changed_;  ///< by an effect, named
  bool ran_backward_ = false;
  std::string broken_;
};

}  // namespace

Graph trace_function(const CompiledFunction::Fn& f, const std::vector<Tensor>& inputs,
                     const StaticArgs& statics) {
  Graph g;
  Tracer tracer(g);
  std::vector<Tensor> args;
  args.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    args.push_back(tracer.add_input(inputs[i], static_cast<int>(i)));
  std::vector<Tensor> outs = f(args, statics);
  for (Tensor& o : outs) o = tracer.current(o);  // a tensor written in place: its last value
  // A break the function caught (or a backward hook of its, below) still breaks the trace.
  auto refuse_if_broken = [&] {
    if (!tracer.broken().empty())
      throw GraphBreak(tracer.broken() + " (the function caught that error and went on)");
  };
  refuse_if_broken();
  // A function that ran backward returns its results detached (Note [Training steps under
  // compile]): the graph of its loss was used up by that backward.
  const bool ran_backward = tracer.ran_backward();
  for (const Tensor& o : outs) {
    g.outputs.push_back(tracer.output(o));
    g.output_detached.push_back(o.defined() && (ran_backward || !o.requires_grad()));
  }

  // The backward: gradients of the outputs that require grad, w.r.t. the leaves that do.
  std::vector<Tensor> roots, cotangents, leaves;
  g.cotangents.assign(outs.size(), -1);
  if (is_grad_enabled() && !ran_backward) {
    for (const Tracer::Leaf& l : tracer.leaves())
      if (l.alias.requires_grad()) {
        g.grad_leaves.push_back(l.id);
        leaves.push_back(l.alias);
      }
    for (std::size_t k = 0; k < outs.size(); ++k)
      if (outs[k].defined() && outs[k].requires_grad() && is_floating(outs[k].dtype())) {
        roots.push_back(outs[k]);
        cotangents.push_back(tracer.cotangent(static_cast<int>(k), outs[k]));
        g.cotangents[k] = g.values.size() - 1;
      }
  }
  if (!leaves.empty() && !roots.empty()) {
    tracer.start_backward();
    const std::vector<Tensor> grads =
        autograd::grad(roots, leaves, cotangents, false, false, /*allow_unused=*/true);
    for (const Tensor& gr : grads) g.grads.push_back(tracer.output(gr));
  } else {
    g.grad_leaves.clear();
  }
  tracer.check_leaves_unchanged();
  refuse_if_broken();
  // The caller's tensors written in place, and the .grad set: their final values are the
  // last outputs.
  if (g.has_effects() && g.has_backward())
    throw GraphBreak(
        "the function steps an optimizer and returns a result that requires grad without "
        "running backward itself; a compiled backward would read the parameters as they were "
        "before the step (call backward() inside the function, or step outside it)");
  if (!tracer.writes().empty() && g.has_backward())
    throw GraphBreak(
        "the function writes in place to an argument or a captured tensor and computes "
        "gradients; a compiled backward reads those tensors as they were, which the write "
        "changes (not supported yet: write them outside the compiled function, or under "
        "NoGradGuard)");
  auto add_write = [&](int leaf, int value, bool grad) {
    const Value& v = g.values[static_cast<std::size_t>(leaf)];
    g.writes.push_back({v.kind, v.index, grad});
    g.outputs.push_back(value);
    g.output_detached.push_back(true);
    g.cotangents.push_back(-1);
  };
  for (const auto& [leaf, value] : tracer.writes()) add_write(leaf, value, false);
  for (const auto& [leaf, value] : tracer.grad_writes()) add_write(leaf, value, true);
  for (const auto& [leaf, defined] : tracer.grad_guards()) {
    const Value& v = g.values[static_cast<std::size_t>(leaf)];
    g.grad_guards.push_back({v.kind, v.index, defined});
  }
  return g;
}

}  // namespace adjoint::detail
