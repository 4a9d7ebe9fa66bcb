// Custom functions: their call through the dispatch stack, the node that runs a user's backward,
// and FunctionCtx's saved tensors.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "autograd/custom_function.h"
#include "autograd/forward_ad.h"
#include "autograd/saved_tensor.h"
#include "core/mode_state.h"
#include "dispatch/layer.h"

namespace adjoint {

struct FunctionCtx::State {
  std::vector<SavedTensor> saved;
  std::vector<std::pair<Tensor, bool>> to_save;  // tensor, is an output of this function
  // What get_saved() returns while the jvp runs (see record_custom_function).
  std::vector<Tensor> for_jvp;
  bool in_jvp = false;
  // While backward runs: the saved tensors, unpacked by the first get_saved(). Unpacking
  // again for every call could be costly (a checkpointed function would be recomputed).
  bool in_backward = false;
  std::optional<std::vector<Tensor>> unpacked;
  std::vector<const TensorImpl*> non_differentiable;
  std::vector<bool> needs_input_grad;
  std::weak_ptr<Node> node;
  std::string name;
  bool released = false;
  bool in_forward = true;
};

FunctionCtx::FunctionCtx() : state_(std::make_unique<State>()) {}
FunctionCtx::~FunctionCtx() = default;

void FunctionCtx::save_for_backward(const std::vector<Tensor>& tensors) {
  ADJOINT_CHECK(state_->in_forward, Autograd, "save_for_backward",
                "save_for_backward can only be called in forward");
  state_->to_save.clear();
  for (const Tensor& t : tensors) state_->to_save.emplace_back(t, false);
}

std::vector<Tensor> FunctionCtx::get_saved() const {
  if (state_->in_forward) {
    std::vector<Tensor> out;
    for (auto& [t, is_out] : state_->to_save) out.push_back(t);
    return out;
  }
  if (state_->in_jvp) return state_->for_jvp;
  if (state_->in_backward && state_->unpacked) return *state_->unpacked;
  std::vector<Tensor> out;
  auto node = state_->node.lock();
  for (const SavedTensor& s : state_->saved) out.push_back(s.unpack(node));
  if (state_->in_backward) state_->unpacked = out;
  return out;
}

void FunctionCtx::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs) state_->non_differentiable.push_back(t.impl());
}

bool FunctionCtx::needs_input_grad(std::size_t i) const {
  return i < state_->needs_input_grad.size() && state_->needs_input_grad[i];
}

namespace {

class CustomNode final : public Node {
 public:
  CustomNode(std::string name, std::shared_ptr<FunctionCtx> ctx, detail::CustomBackward backward,
             uint32_t num_outputs)
      : Node(num_outputs),
        name_(std::move(name)),
        ctx_(std::move(ctx)),
        backward_(std::move(backward)) {}

  std::string name() const override { return name_ + "Backward"; }

  TensorList apply(TensorList&& grads, const BackwardRun& /*run*/) override {
    // Undefined output gradients become zeros, as the user's backward expects tensors.
    std::vector<Tensor> gs(std::make_move_iterator(grads.begin()),
                           std::make_move_iterator(grads.end()));
    for (std::size_t i = 0; i < gs.size(); ++i)
      if (!gs[i].defined()) gs[i] = zeros(output_shapes_[i], output_dtypes_[i]);
    struct BackwardScope {  // get_saved() unpacks once per backward call
      FunctionCtx::State& st;
      explicit BackwardScope(FunctionCtx::State& s) : st(s) { st.in_backward = true; }
      ~BackwardScope() {
        st.in_backward = false;
        st.unpacked.reset();
      }
    };
    std::vector<Tensor> user;
    {
      BackwardScope scope(ctx_->state());
      user = backward_(*ctx_, std::move(gs));
    }
    TensorList result(std::make_move_iterator(user.begin()), std::make_move_iterator(user.end()));
    ADJOINT_CHECK(result.size() == next_edges_.size(), Value, name_, "backward returned ",
                  result.size(), " gradients but forward took ", next_edges_.size(),
                  " tensor inputs");
    for (std::size_t i = 0; i < result.size(); ++i) {
      if (!next_edges_[i].valid()) {
        result[i] = Tensor();
      } else if (result[i].defined()) {
        ADJOINT_CHECK(result[i].shape() == input_shapes_[i] ||
                          broadcast_shapes(result[i].shape(), input_shapes_[i], name_.c_str()) ==
                              result[i].shape(),
                      Shape, name_, "backward returned a gradient of shape ", result[i].shape(),
                      " for input ", i, " of shape ", input_shapes_[i]);
        result[i] = detail::fit_gradient(std::move(result[i]), input_shapes_[i], input_dtypes_[i]);
      }
    }
    return result;
  }

  void release_saved() override {
    for (SavedTensor& s : ctx_->state().saved) s.release();
    ctx_->state().released = true;
  }

  void visit_saved(const SavedVisitor& visit) const override {  // memory summaries
    const std::vector<SavedTensor>& saved = ctx_->state().saved;
    for (std::size_t i = 0; i < saved.size(); ++i)
      if (saved[i].defined()) visit(saved[i], saved[i].is_output() ? "output" : "saved", i);
  }

  std::vector<Shape> input_shapes_, output_shapes_;
  std::vector<DType> input_dtypes_, output_dtypes_;

 private:
  std::string name_;
  std::shared_ptr<FunctionCtx> ctx_;
  detail::CustomBackward backward_;
};

}  // namespace

namespace detail {

void collect_tensors(std::vector<Tensor>& out, const Tensor& t) { out.push_back(t); }
void collect_tensors(std::vector<Tensor>& out, const std::vector<Tensor>& ts) {
  out.insert(out.end(), ts.begin(), ts.end());
}

namespace {

// Fills ctx.needs_input_grad before forward runs, so forward can read it (as in PyTorch).
void begin_custom_function(FunctionCtx& ctx, const std::vector<Tensor>& inputs) {
  FunctionCtx::State& st = ctx.state();
  const bool grad_mode = is_grad_enabled();
  st.needs_input_grad.clear();
  for (const Tensor& x : inputs)
    st.needs_input_grad.push_back(grad_mode && x.defined() && x.requires_grad());
}

// get_saved() answers from State::for_jvp while the user's jvp runs.
struct JvpScope {
  FunctionCtx::State& st;
  explicit JvpScope(FunctionCtx::State& s) : st(s) { st.in_jvp = true; }
  ~JvpScope() {
    st.in_jvp = false;
    st.for_jvp.clear();
  }
  JvpScope(const JvpScope&) = delete;
  JvpScope& operator=(const JvpScope&) = delete;
};

// Wires the outputs of a custom function into the graph: its CustomNode, and the tangents its
// jvp gives at every visible dual level.
std::vector<Tensor> record_custom_function(std::string name, std::shared_ptr<FunctionCtx> ctx,
                                           const std::vector<Tensor>& inputs,
                                           std::vector<Tensor> outputs, CustomBackward backward,
                                           CustomJvp jvp) {
  FunctionCtx::State& st = ctx->state();
  st.in_forward = false;
  st.name = name;
  // An output that is an input (returned as is) gets a fresh handle so its history is ours.
  for (Tensor& out : outputs) {
    ADJOINT_CHECK(out.defined(), Value, name, "forward returned an undefined tensor");
    for (const Tensor& in : inputs)
      if (out.is_same(in)) out = detail::detach_alias(out);
  }
  bool any_requires_grad = false;
  st.needs_input_grad.clear();
  for (const Tensor& x : inputs) {
    st.needs_input_grad.push_back(x.defined() && x.requires_grad());
    any_requires_grad |= st.needs_input_grad.back();
  }
  auto is_non_diff = [&](const Tensor& t) {
    return std::find(st.non_differentiable.begin(), st.non_differentiable.end(), t.impl()) !=
           st.non_differentiable.end();
  };
  if (any_requires_grad && is_grad_enabled()) {
    auto node = std::make_shared<CustomNode>(name, ctx, std::move(backward),
                                             static_cast<uint32_t>(outputs.size()));
    if (tls_mode.anomaly != 0) [[unlikely]]  // Note [Anomaly mode]
      detail::note_creation(*node, name.c_str());
    auto& edges = node->mutable_next_edges();
    for (const Tensor& x : inputs) {
      edges.push_back(x.defined() && x.requires_grad() ? autograd::gradient_edge(x) : Edge());
      node->input_shapes_.push_back(x.defined() ? x.shape() : Shape());
      node->input_dtypes_.push_back(x.defined() ? x.dtype() : kDefaultFloat);
    }
    node->update_topological_nr();
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      node->output_shapes_.push_back(outputs[i].shape());
      node->output_dtypes_.push_back(outputs[i].dtype());
      if (is_floating(outputs[i].dtype()) && !is_non_diff(outputs[i]))
        detail::set_history(outputs[i], node, static_cast<uint32_t>(i));
    }
    st.node = node;
  }
  for (auto& [t, is_out] : st.to_save) {
    is_out = false;
    for (const Tensor& o : outputs) is_out |= t.defined() && o.impl() == t.impl();
  }
  // to_save holds the outputs themselves (node -> ctx -> to_save -> output -> node) and
  // for_jvp aliases with their history: both are emptied on every way out, an exception from
  // the jvp or from the checks below included, or the whole graph would leak.
  struct ClearPending {
    FunctionCtx::State& st;
    ~ClearPending() {
      st.to_save.clear();
      st.for_jvp.clear();
    }
  } clear_pending{st};

  // Forward mode through the custom function, level by level (Note [Nested dual levels]).
  for (int li = 0; li < tls_mode.dual_levels_open; ++li) {
    if (!detail::level_visible(li)) continue;
    const uint64_t level = tls_mode.dual_level_ids[li];
    bool any_tangent = false;
    for (const Tensor& x : inputs) any_tangent |= detail::tangent_at(x, level) != nullptr;
    if (!any_tangent) continue;
    ADJOINT_CHECK(static_cast<bool>(jvp), NotImplemented, name,
                  "forward-mode AD through custom function ", name,
                  " needs a static jvp(FunctionCtx&, std::vector<Tensor>) member");
    std::vector<Tensor> tangents;
    for (const Tensor& x : inputs) {
      const Tensor* t = detail::tangent_at(x, level);
      if (t) {
        tangents.push_back(*t);
      } else {
        tangents.push_back(x.defined() && is_floating(x.dtype()) ? zeros_like(x) : Tensor());
      }
    }
    // As apply<Op> does for built-in ops, the jvp sees a saved output as an alias carrying
    // the output's tangents of the levels below (so nested levels get their cross terms) and
    // its gradient edge: the output itself, saved by an op the jvp records, would make
    // output -> tangent -> tangent's graph -> output a reference cycle.
    const uint32_t below = detail::levels_below(li);
    st.for_jvp.clear();
    for (auto& [t, is_out] : st.to_save) {
      if (!is_out) {
        st.for_jvp.push_back(t);
        continue;
      }
      Tensor alias = detail::alias_with_history(t);
      detail::copy_tangents(t, alias, below);
      st.for_jvp.push_back(std::move(alias));
    }
    std::vector<Tensor> out_t;
    {
      JvpScope scope(st);
      detail::VisibleLevels only_below(below);
      out_t = jvp(*ctx, std::move(tangents));
    }
    ADJOINT_CHECK(out_t.size() == outputs.size(), Value, name, "jvp returned ", out_t.size(),
                  " tangents for ", outputs.size(), " outputs");
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!out_t[i].defined()) continue;
      ADJOINT_CHECK(out_t[i].shape() == outputs[i].shape(), Shape, name, "jvp returned a tangent ",
                    describe(out_t[i]), " for output ", i, " ", describe(outputs[i]));
      ADJOINT_CHECK(out_t[i].dtype() == outputs[i].dtype(), DType, name, "jvp returned a tangent ",
                    describe(out_t[i]), " for output ", i, " ", describe(outputs[i]),
                    ": tangents must have the output's dtype");
      detail::set_tangent(outputs[i], level, out_t[i]);
    }
  }

  // Saved only now, after the outputs got their tangents: a saved output keeps them for a
  // backward run inside the dual level (forward over reverse), as built-in ops do (Note
  // [Tangents of saved outputs] in saved_tensor.cpp). Without a node nothing can read the
  // saved tensors after the jvp, so nothing is saved (and no pack hook runs), as in PyTorch.
  if (auto node = st.node.lock())
    for (auto& [t, is_out] : st.to_save) st.saved.emplace_back(t, is_out);
  st.to_save.clear();
  return outputs;
}

// Note [Custom functions in the stack]
// Function<Derived>::apply hands its call to the dispatch stack as a CustomCall, so every layer
// sees it as it sees an op: the profiler and the memory timeline under the function's name,
// compile's Trace layer as one node that calls it again at each replay (Note [Custom functions
// under compile] in adjoint/autograd.h). The Autograd layer fills ctx.needs_input_grad, runs
// the layers below and records the CustomNode and the jvp's tangents around the outputs. Below
// Autograd the function has no rule of its own: OpCache and Batching pass it to its forward,
// whose ops a checkpointed region logs and a vmap batches (a custom function under vmap is
// its forward on the batched values, and its backward on batched gradients), and the kernel
// runs the user's forward with recording off in both modes, since backward and jvp give its
// derivatives. A function returns several tensors: next() and dispatch() carry the first, as
// the layers that look at a result need (a traced node refuses several), and the call keeps
// them all for apply.
class CustomCall final : public OpCall {
 public:
  CustomCall(const char* name, CustomFunctionCall& call)
      : OpCall(name, AutocastPolicy::Follow, layers_for(AutocastPolicy::Follow)), call_(call) {}

  std::span<Tensor> inputs() override { return call_.inputs; }
  std::vector<Tensor>& saved() override { return saved_; }
  Tensor run_kernel() override {
    NoGradGuard no_grad;
    NoForwardGradGuard no_forward_grad;
    outputs_ = call_.forward(call_.inputs);
    ADJOINT_CHECK(!outputs_.empty(), Value, call_.name, "forward returned no tensors");
    return outputs_[0];
  }
  // Its forward is its batching rule: the ops in it meet the batched values.
  Tensor run_batching_rule(int /*level*/) override { return next(Layer::Batching); }
  Tensor run_autograd() override {
    begin_custom_function(*call_.ctx, call_.inputs);
    next(Layer::Autograd);
    outputs_ = record_custom_function(call_.name, call_.ctx, call_.inputs, std::move(outputs_),
                                      std::move(call_.backward), std::move(call_.jvp));
    return outputs_[0];
  }
  Generator* generator() const override { return nullptr; }
  Tensor run_batched_draw() override {  // only draws are asked
    ADJOINT_ASSERT(false, name(), " is not a random draw");
    return Tensor();
  }
  bool makes_constant() const override { return false; }
  ExternalExport constant_recipe() const override { return {}; }
  bool writes_in_place() const override { return false; }
  Tensor run_out_of_place() override {  // only in-place calls are asked
    ADJOINT_ASSERT(false, name(), " is not an in-place op");
    return Tensor();
  }
  bool custom_function() const override { return true; }
  CustomReplay custom_replay() override {
    if (!call_.make_rerun) return {nullptr, call_.why_not};
    return {call_.make_rerun(), nullptr};
  }
  std::any op() const override { return {}; }
  void set_op(const std::any& /*op*/) override {}
  std::shared_ptr<const TracedOp> traced_op() const override { return nullptr; }

  std::vector<Tensor>& outputs() { return outputs_; }

 private:
  CustomFunctionCall& call_;
  std::vector<Tensor> outputs_;
  std::vector<Tensor> saved_;
};

// The custom functions' names as their calls and a traced graph's nodes keep them (a const
// char* that outlives both).
struct CustomNames {
  std::mutex mutex;
  std::unordered_set<std::string> names;
  std::unordered_set<const char*> kept;  // the c_str() of each
};
CustomNames& custom_names() {
  static CustomNames names;
  return names;
}
const char* interned(const std::string& name) {
  CustomNames& n = custom_names();
  std::lock_guard<std::mutex> lock(n.mutex);
  const char* kept = n.names.insert(name).first->c_str();
  n.kept.insert(kept);
  return kept;
}

}  // namespace

bool names_custom_function(const char* op) {
  CustomNames& n = custom_names();
  std::lock_guard<std::mutex> lock(n.mutex);
  return n.kept.contains(op);
}

std::vector<Tensor> call_custom_function(CustomFunctionCall call) {
  CustomCall c(interned(call.name), call);
  c.dispatch();
  return std::move(c.outputs());
}

}  // namespace detail
}  // namespace adjoint
