// apply<Op>: the one generic step every differentiable op goes through. It hands the call to
// the dispatch stack (Note [The dispatch stack] in src/dispatch/layer.h); its Autograd layer
// decides whether to record (grad mode on and some input requires grad), runs the layers
// below (the kernel, on the eager path), builds the node with its edges and saved tensors, and
// propagates forward-mode tangents through the op's JVP. In backward, OpNode<Op> unpacks what
// was saved, calls the VJP and sums each gradient back to its input's shape (unbroadcasting),
// so no op repeats these chores.
//
// An op is a small struct (see src/ops/unary.cpp for many):
//   struct Exp {
//     static constexpr const char* name = "exp";
//     static constexpr Save save = Save::Output;
//     Tensor forward(const Tensor& x) const { return kernels::unary(Unary::Exp, x); }
//     Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy * c.output(); }  // d exp = exp
//     Tensor jvp(const Ctx& c, const Tensor& tx) const { return tx * c.output(); }
//   };
// forward may take a `Saver&` first to save extra tensors (layer_norm's mean and rstd), and
// may set members of the op (they are copied into the node afterwards). vjp returns a Tensor
// for one input or std::array<Tensor, N>; an undefined gradient means zero. Ops over a list
// of tensors (cat, stack) set `static constexpr bool variadic = true` and take and return
// std::vector<Tensor>. The batching rule for vmap sits beside them (src/vmap/batch_rule.h).
// An op that autocast should convert names its policy,
// `static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;` (src/dispatch/autocast.h).
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/detail/pool.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/accumulate_grad.h"
#include "autograd/anomaly.h"
#include "autograd/forward_ad.h"
#include "autograd/op_census.h"
#include "autograd/saved_tensor.h"
#include "autograd/view_tracking.h"
#include "core/mode_state.h"
#include "core/op_scope.h"
#include "dispatch/autocast.h"
#include "dispatch/layer.h"
#include "vmap/batch_rule.h"

namespace adjoint {

template <class Op, class... Ts>
Tensor apply(Op op, const Ts&... xs);
template <class Op>
Tensor apply_list(Op op, const std::vector<Tensor>& inputs);

enum class Save : uint8_t { None = 0, Inputs = 1, Output = 2, InputsAndOutput = 3 };

/// Extra tensors a forward keeps for backward.
struct Saver {
  std::vector<Tensor> tensors;
  void save(const Tensor& t) { tensors.push_back(t); }
};

/// An input's shape and dtype, kept by the node for unbroadcasting and for the rules.
struct InputInfo {
  Shape shape;
  DType dtype = kDefaultFloat;
};

/// What an op's VJP and JVP see: the inputs and output (saved ones in backward, live ones in
/// forward mode), extra saved tensors, and which inputs need a gradient. It only points at
/// data owned by the caller, so building one costs nothing.
class Ctx {
 public:
  const Tensor& input(std::size_t i) const { return inputs_[i]; }
  const Tensor& output() const { return *out_; }
  const Tensor& saved(std::size_t i) const { return extras_[i]; }
  bool needs_grad(std::size_t i) const { return !edges_ || edges_[i].valid(); }
  const Shape& input_shape(std::size_t i) const { return info_[i].shape; }
  DType input_dtype(std::size_t i) const { return info_[i].dtype; }
  std::size_t num_inputs() const { return n_; }
  /// The .grad that the VJP may add input i's gradient into itself (then returning undefined
  /// for it), or undefined, with the lock to hold while adding: see Note [Adding into .grad
  /// in place].
  autograd::GradInto grad_to_add_into(std::size_t i) const {
    return run_ ? autograd::grad_to_add_into(edges_[i], info_[i].shape, info_[i].dtype, *run_)
                : autograd::GradInto{};
  }
  /// The float32 .grad behind input i when input i is a 16-bit cast of that float32 leaf (an
  /// autocast weight): the VJP may add the widening of its 16-bit gradient into it. See Note
  /// [Adding into .grad through a cast].
  autograd::GradInto grad_to_add_into_through_cast(std::size_t i) const {
    return run_ ? autograd::grad_to_add_into_through_cast(edges_[i], info_[i].shape, *run_)
                : autograd::GradInto{};
  }
  /// Whether the ops this rule runs on x are recorded, so that a derivative of the rule's
  /// result must see x through them (layer norm recomputes its statistics then). In backward
  /// the run says so (create_graph); a JVP runs in the forward, under the forward's grad mode.
  inline bool differentiated(const Tensor& x) const;

  /// Backward (OpNode::apply): `run` and `edges` are the node's. Forward mode: both null, and
  /// every input counts as needing a gradient.
  Ctx(const Tensor* inputs, const Tensor* out, const Tensor* extras, const InputInfo* info,
      const Edge* edges, const BackwardRun* run, std::size_t n)
      : inputs_(inputs), out_(out), extras_(extras), info_(info), edges_(edges), run_(run), n_(n) {}

 private:
  const Tensor* inputs_;
  const Tensor* out_;
  const Tensor* extras_;
  const InputInfo* info_;
  const Edge* edges_;
  const BackwardRun* run_;
  std::size_t n_;
};

namespace detail {

/// Whether t requires grad, after bringing a view's history up to date (Note [Views and
/// in-place ops]).
inline bool requires_grad(const Tensor& t) {
  if (!t.defined()) return false;
  refresh_view(t);
  return t.impl()->autograd && t.impl()->autograd->requires_grad;
}
}  // namespace detail

bool Ctx::differentiated(const Tensor& x) const {
  return (run_ ? run_->create_graph : tls_mode.grad_enabled) && detail::requires_grad(x);
}

namespace detail {

/// "log_softmax" -> "LogSoftmaxBackward".
std::string backward_name(const char* op);
/// Sums (and casts) a gradient back to an input's shape and dtype.
Tensor fit_gradient(Tensor g, const Shape& shape, DType dtype);
/// Attaches `node` as the grad_fn of output `out`.
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr);
/// Throws unless the JVP rule returned a tangent shaped like the output.
void check_tangent(const Tensor& out, const Tensor& tangent, const char* op);
/// A new handle on t's data whose gradients still flow to t's graph, without t's tangent.
Tensor alias_with_history(const Tensor& t);
/// A new handle on t's data with no autograd history (and no view tracking).
Tensor alias_without_history(const Tensor& t);
/// What detach() makes, below the stack: a view of t's data with no history and no tangent at
/// any level (a batched t is detached at every vmap level below too; undefined stays undefined).
/// For code that is not an op (the engine, checkpointing, compile's tracer, the optimizers' state)
/// and for forwards; a function of ops calls detach(), which passes the stack (src/ops/detach.cpp).
Tensor detach_alias(const Tensor& t);
/// Gives the existing tensor `t` the history `e` (an in-place op's result), keeping
/// retain_grad on it.
void take_history(const Tensor& t, const Edge& e);
/// Breaks the reference cycles a tensor's new history could close through nodes holding
/// saves made at older versions: see Note [Stale saves and reference cycles] in
/// saved_tensor.cpp. Walks the graph of `new_grad_fn`, not that of `old_grad_fn`.
void forget_stale_saves(Node* new_grad_fn, const Node* old_grad_fn);

template <class R>
TensorList grads_to_list(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {std::forward<R>(r)};
  } else {
    return TensorList(std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
  }
}

/// Whether Op's JVP rule takes an undefined tangent for an input without one (meaning zero)
/// instead of a tensor of zeros: `static constexpr bool jvp_undefined_is_zero = true`. Worth
/// it where a zero tangent would cost real work, as in matmul: forward over reverse through
/// a network would otherwise multiply zero tangents of the data by every weight.
template <class Op>
constexpr bool jvp_takes_undefined = requires {
  requires Op::jvp_undefined_is_zero;
};

/// Computes the tangents of `out` at every visible dual level some input has a tangent at,
/// innermost last: run_jvp(ctx, tangents) applies the op's JVP rule. See Note [Nested dual
/// levels] in forward_ad.h.
template <bool UndefinedIsZero, class Inputs, class RunJvp>
void propagate_tangents(const Inputs& inputs, const Tensor& out, const Tensor* extras,
                        RunJvp&& run_jvp) {
  const int levels = tls_mode.dual_levels_open;
  std::vector<InputInfo> info;
  std::vector<Tensor> tangents(inputs.size());
  for (int li = 0; li < levels; ++li) {
    if (!level_visible(li)) continue;
    const uint64_t level = tls_mode.dual_level_ids[li];
    bool any = false;
    for (const Tensor& x : inputs) any |= tangent_at(x, level) != nullptr;
    if (!any) continue;
    if (info.empty())
      for (const Tensor& x : inputs)
        info.push_back(x.defined() ? InputInfo{x.shape(), x.dtype()} : InputInfo{});
    // The rule sees an alias of the output carrying its tangents of the outer levels: ops it
    // records may save it, and saving `out` itself would make out -> tangent -> tangent's
    // graph -> out a reference cycle.
    const Tensor out_alias = alias_with_history(out);
    const uint32_t below = levels_below(li);
    copy_tangents(out, out_alias, below);
    const Ctx c(inputs.data(), &out_alias, extras, info.data(), nullptr, nullptr, inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      tangents[i] = Tensor();
      if (!x.defined() || !is_floating(x.dtype())) continue;
      const Tensor* t = tangent_at(x, level);
      if (t) {
        tangents[i] = *t;
      } else if (!UndefinedIsZero) {
        tangents[i] = zeros_like(x);
      }
    }
    Tensor t;
    {
      VisibleLevels only_below(below);
      t = run_jvp(c, tangents);
    }
    set_tangent(out, level, std::move(t));
  }
}

/// Runs op's batching rule on inputs batched at `level` and wraps the result at that level.
template <class Op, class Inputs>
Tensor run_batched(const Op& op, const Inputs& inputs, int level, std::vector<Tensor>& extras) {
  const BatchArgs b(inputs, level);
  Tensor phys;
  if constexpr (requires(Saver & s) { op.vmap(b, s); }) {
    Saver saver;
    phys = op.vmap(b, saver);
    extras = std::move(saver.tensors);
  } else if constexpr (requires { op.vmap(b); }) {
    phys = op.vmap(b);
  } else if constexpr (batching_of<Op>() == Batching::Pointwise) {
    phys = pointwise_on_batch<std::tuple_size_v<Inputs>>(
        b, [&](const auto&... xs) { return apply(op, xs...); });
  } else {
    throw_no_batching_rule(Op::name);
  }
  return make_batched(std::move(phys), 0, level);
}

}  // namespace detail

template <class Op>
class OpNode final : public Node {
 public:
  explicit OpNode(const Op& op) : op_(op) {}
  std::string name() const override { return detail::backward_name(Op::name); }
  bool is_dtype_cast() const override {
    if constexpr (requires { Op::is_dtype_cast; }) {
      return Op::is_dtype_cast;
    } else {
      return false;
    }
  }

  TensorList apply(TensorList&& grads, const BackwardRun& run) override {
    const std::size_t n = info_.size();
    if (!grads[0].defined()) return TensorList(n);
    auto self = shared_from_this();
    // Unpack into a small local buffer (most ops have at most four inputs).
    std::array<Tensor, 4> small;
    std::vector<Tensor> big;
    Tensor* inputs = small.data();
    if (n > small.size()) {
      big.resize(n);
      inputs = big.data();
    }
    for (std::size_t i = 0; i < saved_inputs_.size(); ++i)
      inputs[i] = saved_inputs_[i].unpack(self);
    const Tensor out = saved_output_.unpack(self);
    std::vector<Tensor> extras;
    for (const SavedTensor& s : saved_extras_) extras.push_back(s.unpack(self));
    const Ctx c(inputs, &out, extras.data(), info_.data(), next_edges_.data(), &run, n);
    TensorList result = detail::grads_to_list(op_.vjp(c, grads[0]));
    result.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!next_edges_[i].valid()) {
        result[i] = Tensor();
      } else if (result[i].defined()) {
        result[i] = detail::fit_gradient(std::move(result[i]), info_[i].shape, info_[i].dtype);
      }
    }
    return result;
  }

  void release_saved() override {
    for (auto& s : saved_inputs_) s.release();
    saved_output_.release();
    for (auto& s : saved_extras_) s.release();
  }

  void visit_saved(const SavedVisitor& visit) const override {
    for (std::size_t i = 0; i < saved_inputs_.size(); ++i)
      if (saved_inputs_[i].defined()) visit(saved_inputs_[i], "input", i);
    if (saved_output_.defined()) visit(saved_output_, "output", 0);
    for (std::size_t i = 0; i < saved_extras_.size(); ++i)
      if (saved_extras_[i].defined()) visit(saved_extras_[i], "saved", i);
  }

  Op op_;
  std::vector<SavedTensor, detail::PoolAllocator<SavedTensor>> saved_inputs_;
  SavedTensor saved_output_;
  std::vector<SavedTensor, detail::PoolAllocator<SavedTensor>> saved_extras_;
  std::vector<InputInfo, detail::PoolAllocator<InputInfo>> info_;
};

namespace detail {

/// Whether autograd takes part in an op at all: false for one that says
/// `static constexpr bool differentiable = false` (detach: Note [detach is an op]).
template <class Op>
constexpr bool differentiable_op() {
  if constexpr (requires { Op::differentiable; }) {
    return Op::differentiable;
  } else {
    return true;
  }
}

/// The Autograd layer of the dispatch stack for one op (Note [The dispatch stack] in
/// src/dispatch/layer.h): decides whether to record (grad mode on and some input requires
/// grad), runs the layers below (`below`: the kernel on the eager path), records the node
/// with its edges and saved tensors, and propagates forward-mode tangents through the JVP.
/// `saver` receives what the forward saved.
template <class Op, class Inputs, class RunJvp, class Below>
Tensor autograd_step(Op& op, const Inputs& inputs, Saver& saver, RunJvp& run_jvp, Below&& below) {
  bool any_requires_grad = false, any_tangent = false;
  for (const Tensor& x : inputs) any_requires_grad |= requires_grad(x);
  const bool record = any_requires_grad && tls_mode.grad_enabled;
  const uint8_t anomaly = tls_mode.anomaly;  // Note [Anomaly mode]: read once, beside grad mode
  if (tls_mode.dual_visible != 0)
    for (const Tensor& x : inputs) any_tangent |= has_visible_tangent(x);

  Tensor out = below();

  // A view op's output views its input's base (Note [Views and in-place ops]).
  if (out.impl()->is_view && !inputs.empty()) [[unlikely]] {
    const Tensor& x = inputs[0];
    if (x.defined() && x.impl() != out.impl() && x.impl()->storage == out.impl()->storage)
      track_view(out, x);
  }

  if (anomaly & kAnomalyCheckForward) [[unlikely]]
    check_forward_output(Op::name, inputs.data(), inputs.size(), out);

  std::shared_ptr<OpNode<Op>> node;
  if (record && is_floating(out.dtype())) {
    node = detail::make_pooled<OpNode<Op>>(op);
    const std::size_t n = inputs.size();
    auto& edges = node->mutable_next_edges();
    edges.resize(n);
    node->info_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined()) continue;
      if (requires_grad(x)) edges[i] = autograd::gradient_edge(x);
      node->info_[i] = InputInfo{x.shape(), x.dtype()};
    }
    node->update_topological_nr();
    set_history(out, node, 0);
    if (anomaly != 0) [[unlikely]]
      note_creation(*node, Op::name);
    constexpr auto save = static_cast<uint8_t>(Op::save);
    if (save & static_cast<uint8_t>(Save::Inputs)) {
      node->saved_inputs_.reserve(n);
      for (const Tensor& x : inputs) node->saved_inputs_.emplace_back(x, false);
    }
    for (const Tensor& e : saver.tensors) node->saved_extras_.emplace_back(e, false);
  }

  if (any_tangent && is_floating(out.dtype()))
    propagate_tangents<jvp_takes_undefined<Op>>(inputs, out, saver.tensors.data(),
                                                [&](const Ctx& c, const auto& t) {
                                                  Tensor r = run_jvp(c, t);
                                                  check_tangent(out, r, Op::name);
                                                  return r;
                                                });
  // The output is saved after its tangents exist, so forward-over-reverse sees them in
  // backward. See Note [Tangents of saved outputs] in saved_tensor.cpp.
  if (node && (static_cast<uint8_t>(Op::save) & static_cast<uint8_t>(Save::Output)))
    node->saved_output_ = SavedTensor(out, true);
  return out;
}

/// Whether Op is a random draw: it names the generator it advances and draws per example
/// under vmap (Note [Random draws in the stack] in src/ops/random.cpp).
template <class Op>
constexpr bool op_draws = requires(const Op& op, Op& m, Generator* g) {
  { op.generator() } -> std::same_as<Generator*>;
  op.vmap_draw();
  m.set_generator(g);
};

/// Whether Op is a factory: it makes a constant from its attributes alone, and says how
/// (Note [Factories in the stack] in src/ops/factories.cpp).
template <class Op>
constexpr bool op_makes_constant = requires(const Op& op) {
  { op.constant_recipe() } -> std::same_as<ExternalExport>;
};

template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

/// op.forward on the call's inputs (a std::array of N tensors, or a list), with the Saver when
/// the forward takes one: apply<Op>'s kernel step, and a traced graph's replay of it.
template <class Op, class Inputs>
Tensor call_forward(const Op& op, Saver& saver, const Inputs& in) {
  if constexpr (is_std_array<Inputs>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (requires { op.forward(saver, in[I]...); }) {
        return op.forward(saver, in[I]...);
      } else {
        return op.forward(in[I]...);
      }
    }
    (std::make_index_sequence<std::tuple_size_v<Inputs>>{});
  } else if constexpr (requires { op.forward(saver, in); }) {
    return op.forward(saver, in);
  } else {
    return op.forward(in);
  }
}

/// Op as a traced graph keeps it (TracedOp in src/dispatch/layer.h): Inputs is the call's
/// std::array<Tensor, N>, or std::vector<Tensor> for an op over a list.
template <class Op, class Inputs>
class TypedTracedOp final : public TracedOp {
 public:
  explicit TypedTracedOp(const Op& op) : op_(op) { (void)kRegistered; }
  const char* name() const override { return Op::name; }

  static constexpr bool kDraws = op_draws<Op>;
  Generator* generator() const override {
    if constexpr (kDraws) {
      return op_.generator();
    } else {
      return nullptr;
    }
  }

  // Export (Note [Exporting ops] in src/core/op_fields.h): an op with members names them.
  static constexpr bool kExportable = [] {
    if constexpr (requires { Op::exportable; }) {
      return Op::exportable;
    } else {
      return true;
    }
  }();
  static_assert(std::is_empty_v<Op> || detail::HasFields<Op> || !kExportable,
                "an op with members declares them with fields() so that export writes them");
  static constexpr const char* kExportKey = [] {
    if constexpr (requires { Op::export_name; }) {
      return Op::export_name;
    } else {
      return Op::name;
    }
  }();
  static std::shared_ptr<const TracedOp> make_from_fields(const detail::FieldList& fields,
                                                          const detail::OpImportContext& context) {
    Op op{};
    // A random draw gets the generator the file's graph draws from (Note [Random draws in the
    // stack] in src/ops/random.cpp).
    if constexpr (kDraws) {
      ADJOINT_CHECK(context.generator != nullptr, Value, Op::name, "a draw without its generator");
      op.set_generator(context.generator);
    }
    if constexpr (!kExportable) {
      throw Error(ErrorKind::Value, Op::name, "this op cannot be read from a file");
    } else if constexpr (!std::is_empty_v<Op>) {
      detail::FieldReader in(fields, Op::name);
      std::apply([&](auto&... m) { (detail::take_field(in, m), ...); }, op.fields());
      in.finish();
    } else {
      detail::FieldReader(fields, Op::name).finish();
    }
    return std::make_shared<TypedTracedOp>(op);
  }
  // Registered when the program starts, in the file that makes this op's calls.
  static inline const bool kRegistered =
      kExportable &&
      (detail::register_exported_op(kExportKey, typeid(TypedTracedOp), &make_from_fields), true);
  const char* export_key() const override { return kExportable ? kExportKey : nullptr; }
  std::ptrdiff_t arity() const override {
    if constexpr (is_std_array<Inputs>::value) {
      return static_cast<std::ptrdiff_t>(std::tuple_size_v<Inputs>);
    } else {
      return -1;
    }
  }
  detail::FieldList export_fields() const override {
    detail::FieldList out;
    if constexpr (kExportable && !std::is_empty_v<Op>) {
      Op copy = op_;
      detail::put_tuple(out, copy.fields());
    }
    return out;
  }

  // A forward is const: a member it set from the data would be read by the rules as the
  // trace left it on a replay, and not at all under vmap, where the batching rule runs instead
  // (cross_entropy kept its count of rows so until session 22). What a rule needs it computes
  // from the inputs and the saved tensors.
  static constexpr bool kConstForward = [] {
    if constexpr (is_std_array<Inputs>::value) {
      return []<std::size_t... I>(std::index_sequence<I...>) {
        return requires(const Op& c, Saver& s, const Tensor& t) { c.forward(s, ((void)I, t)...); }
        || requires(const Op& c, const Tensor& t) { c.forward(((void)I, t)...); };
      }
      (std::make_index_sequence<std::tuple_size_v<Inputs>>{});
    } else {
      return requires(const Op& c, Saver& s, const std::vector<Tensor>& v) { c.forward(s, v); }
      || requires(const Op& c, const std::vector<Tensor>& v) { c.forward(v); };
    }
  }();
  static_assert(kConstForward,
                "an op's forward must be const: rules recompute what they need from the inputs "
                "and the saved tensors");

  Tensor run_kernel(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    const OpScope op_scope(Op::name);
    Saver saver;
    Inputs args{};
    if constexpr (is_std_array<Inputs>::value) {
      std::copy(in.begin(), in.end(), args.begin());
    } else {
      args.assign(in.begin(), in.end());
    }
    Tensor out = call_forward(op_, saver, args);
    extras = std::move(saver.tensors);
    return out;
  }

  Tensor run_dispatched(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    extras.clear();
    if constexpr (is_std_array<Inputs>::value) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return apply(op_, in[I]...); }
      (std::make_index_sequence<std::tuple_size_v<Inputs>>{});
    } else {
      return apply_list(op_, std::vector<Tensor>(in.begin(), in.end()));
    }
  }

  // An op with attributes or inputs that must agree says what it accepts in `infer` (beside
  // the public function, sharing its checks); a pointwise op broadcasts its inputs.
  std::optional<OutputSpec> infer(std::span<const ValueSpec> in) const override {
    if constexpr (requires { op_.infer(in); }) {
      return op_.infer(in);
    } else if constexpr (batching_of<Op>() == Batching::Pointwise) {
      Shape shape;
      bool first = true;
      for (const ValueSpec& v : in) {
        if (!v.defined) continue;
        shape = first ? v.shape : broadcast_shapes(shape, v.shape, Op::name);
        first = false;
      }
      return OutputSpec{shape, std::nullopt};
    } else {
      return std::nullopt;
    }
  }

  std::optional<PointwiseKernel> pointwise() const override {
    if constexpr (requires { op_.fusion(); }) {
      return op_.fusion();
    } else {
      return std::nullopt;
    }
  }

  std::optional<ReductionKernel> reduction(const Shape& input) const override {
    if constexpr (requires { op_.reduction(); }) {
      return op_.reduction();
    } else if constexpr (requires { op_.reduction(input); }) {
      return op_.reduction(input);
    } else {
      return std::nullopt;
    }
  }

  bool same_as(const TracedOp& other) const override {
    const auto* o = dynamic_cast<const TypedTracedOp*>(&other);
    if (o == nullptr) return false;
    if constexpr (kDraws) {
      return false;  // two draws are two values
    } else if constexpr (std::is_empty_v<Op>) {
      return true;
    } else if constexpr (std::is_trivially_copyable_v<Op>) {
      // Bitwise equal attributes compute the same values; padding that differs only makes
      // two equal ops look different, which costs a missed elimination, never a wrong one.
      return std::memcmp(&op_, &o->op_, sizeof(Op)) == 0;
    } else {
      return false;
    }
  }

 private:
  Op op_;
};

/// One call of Op as the layers of the dispatch stack see it: a copy of the inputs (layers may
/// replace them), and the op's steps. Built only when some optional layer is on.
template <class Op, class Inputs, class RunForward, class RunJvp>
class TypedOpCall final : public OpCall {
 public:
  TypedOpCall(Op& op, const Inputs& inputs, RunForward& run_forward, RunJvp& run_jvp)
      : OpCall(Op::name, detail::autocast_policy<Op>(), layers_for(detail::autocast_policy<Op>())),
        op_(op),
        inputs_(inputs),
        run_forward_(run_forward),
        run_jvp_(run_jvp) {}

  std::span<Tensor> inputs() override { return {inputs_.data(), inputs_.size()}; }
  Tensor run_kernel() override { return run_forward_(saver_, inputs_); }
  Tensor run_batching_rule(int level) override {
    return run_batched(op_, inputs_, level, saver_.tensors);
  }
  Generator* generator() const override {
    if constexpr (op_draws<Op>) {
      return op_.generator();
    } else {
      return nullptr;
    }
  }
  Tensor run_batched_draw() override {
    if constexpr (op_draws<Op>) {
      return op_.vmap_draw();
    } else {
      throw_no_batching_rule(Op::name);
    }
  }
  bool makes_constant() const override { return op_makes_constant<Op>; }
  bool writes_in_place() const override { return false; }
  Tensor run_out_of_place() override {  // only in-place calls are asked
    ADJOINT_ASSERT(false, Op::name, " is not an in-place op");
    return Tensor();
  }
  bool custom_function() const override { return false; }
  CustomReplay custom_replay() override {  // only custom function calls are asked
    ADJOINT_ASSERT(false, Op::name, " is not a custom function");
    return {};
  }
  ExternalExport constant_recipe() const override {
    if constexpr (op_makes_constant<Op>) {
      return op_.constant_recipe();
    } else {
      return {};
    }
  }
  Tensor run_autograd() override {
    if constexpr (!differentiable_op<Op>()) {
      return next(Layer::Autograd);  // no node, no tangent, no view (Note [detach is an op])
    } else {
      return autograd_step(op_, inputs_, saver_, run_jvp_,
                           [this] { return next(Layer::Autograd); });
    }
  }
  std::any op() const override { return std::any(op_); }
  void set_op(const std::any& op) override { op_ = std::any_cast<const Op&>(op); }
  std::vector<Tensor>& saved() override { return saver_.tensors; }
  std::shared_ptr<const TracedOp> traced_op() const override {
    return std::make_shared<TypedTracedOp<Op, Inputs>>(op_);
  }

 private:
  Op& op_;
  Inputs inputs_;
  RunForward& run_forward_;
  RunJvp& run_jvp_;
  Saver saver_;
};

/// Every differentiable op call starts here: run_forward(saver, inputs) is the kernel,
/// run_jvp(ctx, tangents) the JVP rule.
template <class Op, class Inputs, class RunForward, class RunJvp>
Tensor apply_core(Op& op, const Inputs& inputs, RunForward&& run_forward, RunJvp&& run_jvp) {
  // Errors raised below this op (a shape too large, memory the allocator cannot give) name
  // it: see Note [Current op] in src/core/op_scope.h.
  const OpScope op_scope(Op::name);
  constexpr uint8_t relevant = layers_for(autocast_policy<Op>());
  if ((tls_mode.layers & relevant) != 0) [[unlikely]] {
    TypedOpCall<Op, Inputs, std::remove_reference_t<RunForward>, std::remove_reference_t<RunJvp>>
        call(op, inputs, run_forward, run_jvp);
    return call.dispatch();
  }
  // The eager path: Autograd with the kernel right below it.
  Saver saver;
  if constexpr (!differentiable_op<Op>()) {
    return run_forward(saver, inputs);  // Note [detach is an op]
  } else {
    return autograd_step(op, inputs, saver, run_jvp, [&] { return run_forward(saver, inputs); });
  }
}

template <class Op, std::size_t... I>
Tensor jvp_fixed(const Op& op, const Ctx& c, const std::vector<Tensor>& t,
                 std::index_sequence<I...>) {
  return op.jvp(c, t[I]...);
}

template <class Op, class... Ts>
Tensor apply_fixed(Op& op, const Ts&... xs) {
  constexpr std::size_t n = sizeof...(Ts);
  const std::array<Tensor, n> inputs{xs...};
  return detail::apply_core(
      op, inputs,
      [&](Saver& saver, const std::array<Tensor, n>& in) { return call_forward(op, saver, in); },
      [&](const Ctx& c, const std::vector<Tensor>& t) {
        return detail::jvp_fixed(op, c, t, std::make_index_sequence<n>{});
      });
}

template <class Op>
Tensor apply_list_inputs(Op& op, const std::vector<Tensor>& inputs) {
  return detail::apply_core(
      op, inputs,
      [&](Saver& saver, const std::vector<Tensor>& in) { return call_forward(op, saver, in); },
      [&](const Ctx& c, const std::vector<Tensor>& t) { return op.jvp(c, t); });
}

}  // namespace detail

/// Runs `op` on fixed inputs through the dispatch stack (see the comment at the top).
template <class Op, class... Ts>
Tensor apply(Op op, const Ts&... xs) {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "apply takes tensors");
  (void)detail::OpCensus<Op>::registered;  // Note [Op census]: no code
  return detail::apply_fixed(op, xs...);
}

/// apply for ops over a list of tensors (Op::variadic).
template <class Op>
Tensor apply_list(Op op, const std::vector<Tensor>& inputs) {
  (void)detail::OpCensus<Op>::registered;  // Note [Op census]: no code
  return detail::apply_list_inputs(op, inputs);
}

}  // namespace adjoint
