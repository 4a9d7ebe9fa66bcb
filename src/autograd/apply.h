// apply<Op>: the one generic step every differentiable op goes through. It decides whether
// to record (grad mode on and some input requires grad), runs the forward, builds the node
// with its edges and saved tensors, and propagates forward-mode tangents through the op's JVP.
// In backward, OpNode<Op> unpacks what was saved, calls the VJP and sums each gradient back
// to its input's shape (unbroadcasting), so no op repeats these chores.
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
// std::vector<Tensor>.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/saved_tensor.h"
#include "core/mode_state.h"

namespace adjoint {

enum class Save : uint8_t { None = 0, Inputs = 1, Output = 2, InputsAndOutput = 3 };

/// Extra tensors a forward keeps for backward.
struct Saver {
  std::vector<Tensor> tensors;
  void save(const Tensor& t) { tensors.push_back(t); }
};

/// What an op's VJP and JVP see: the inputs and output (saved ones in backward, live ones in
/// forward mode), extra saved tensors, and which inputs need a gradient.
class Ctx {
 public:
  const Tensor& input(std::size_t i) const { return inputs[i]; }
  const Tensor& output() const { return out; }
  const Tensor& saved(std::size_t i) const { return extras[i]; }
  bool needs_grad(std::size_t i) const { return needs[i]; }
  const Shape& input_shape(std::size_t i) const { return shapes[i]; }
  DType input_dtype(std::size_t i) const { return dtypes[i]; }
  std::size_t num_inputs() const { return shapes.size(); }

  std::vector<Tensor> inputs;
  Tensor out;
  std::vector<Tensor> extras;
  std::vector<bool> needs;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
};

namespace detail {

inline bool requires_grad(const Tensor& t) {
  return t.defined() && t.impl()->autograd && t.impl()->autograd->requires_grad;
}
inline const Tensor* tangent_of(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd || !t.impl()->autograd->tangent.defined()) return nullptr;
  return &t.impl()->autograd->tangent;
}
/// "log_softmax" -> "LogSoftmaxBackward".
std::string backward_name(const char* op);
/// Sums (and casts) a gradient back to an input's shape and dtype.
Tensor fit_gradient(Tensor g, const Shape& shape, DType dtype);
/// Attaches `node` as the grad_fn of output `out`.
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr);
/// Throws for ops whose output should require grad but is not floating.
void check_tangent(const Tensor& out, const Tensor& tangent, const char* op);

template <class R>
std::vector<Tensor> grads_to_vector(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {std::forward<R>(r)};
  } else {
    return std::vector<Tensor>(std::make_move_iterator(r.begin()),
                               std::make_move_iterator(r.end()));
  }
}

/// Turns off tangent propagation while a JVP rule runs, so its own ops do not produce
/// tangents of tangents (one dual level; nesting arrives with the transforms issue).
struct ForwardGradOff {
  int prev = tls_mode.dual_levels;
  ForwardGradOff() { tls_mode.dual_levels = 0; }
  ~ForwardGradOff() { tls_mode.dual_levels = prev; }
};

}  // namespace detail

template <class Op>
class OpNode final : public Node {
 public:
  explicit OpNode(const Op& op) : op_(op) {}
  std::string name() const override { return detail::backward_name(Op::name); }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const std::size_t n = shapes_.size();
    if (!grads[0].defined()) return std::vector<Tensor>(n);
    Ctx c;
    auto self = shared_from_this();
    const std::string op_name = has_saved_ ? name() : std::string();
    c.inputs.resize(n);
    for (std::size_t i = 0; i < saved_inputs_.size(); ++i)
      c.inputs[i] = saved_inputs_[i].unpack(self, op_name);
    c.out = saved_output_.unpack(self, op_name);
    for (const SavedTensor& s : saved_extras_) c.extras.push_back(s.unpack(self, op_name));
    c.needs.resize(n);
    for (std::size_t i = 0; i < n; ++i) c.needs[i] = next_edges_[i].valid();
    c.shapes = shapes_;
    c.dtypes = dtypes_;
    std::vector<Tensor> out = detail::grads_to_vector(op_.vjp(c, grads[0]));
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!c.needs[i]) {
        out[i] = Tensor();
      } else if (out[i].defined()) {
        out[i] = detail::fit_gradient(std::move(out[i]), shapes_[i], dtypes_[i]);
      }
    }
    return out;
  }

  void release_saved() override {
    for (auto& s : saved_inputs_) s.release();
    saved_output_.release();
    for (auto& s : saved_extras_) s.release();
  }

  Op op_;
  std::vector<SavedTensor> saved_inputs_;
  SavedTensor saved_output_;
  std::vector<SavedTensor> saved_extras_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  bool has_saved_ = false;
};

namespace detail {

template <class Op, class Inputs, class RunForward, class RunJvp>
Tensor apply_core(Op& op, const Inputs& inputs, RunForward&& run_forward, RunJvp&& run_jvp) {
  bool any_requires_grad = false, any_tangent = false;
  for (const Tensor& x : inputs) any_requires_grad |= requires_grad(x);
  const bool record = any_requires_grad && tls_mode.grad_enabled;
  if (tls_mode.dual_levels > 0)
    for (const Tensor& x : inputs) any_tangent |= tangent_of(x) != nullptr;

  Saver saver;
  Tensor out = run_forward(saver);

  if (record && is_floating(out.dtype())) {
    auto node = std::make_shared<OpNode<Op>>(op);
    const std::size_t n = inputs.size();
    auto& edges = node->mutable_next_edges();
    edges.resize(n);
    node->shapes_.resize(n);
    node->dtypes_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined()) continue;
      if (requires_grad(x)) edges[i] = autograd::gradient_edge(x);
      node->shapes_[i] = x.shape();
      node->dtypes_[i] = x.dtype();
    }
    set_history(out, node, 0);
    constexpr auto save = static_cast<uint8_t>(Op::save);
    if (save & static_cast<uint8_t>(Save::Inputs)) {
      node->saved_inputs_.reserve(n);
      for (const Tensor& x : inputs) node->saved_inputs_.emplace_back(x, false);
    }
    if (save & static_cast<uint8_t>(Save::Output)) node->saved_output_ = SavedTensor(out, true);
    for (const Tensor& e : saver.tensors) node->saved_extras_.emplace_back(e, false);
    node->has_saved_ = save != 0 || !saver.tensors.empty();
  }

  if (any_tangent && is_floating(out.dtype())) {
    Ctx c;
    c.inputs.assign(inputs.begin(), inputs.end());
    c.out = out;
    c.extras = std::move(saver.tensors);
    for (const Tensor& x : inputs) {
      c.needs.push_back(true);
      c.shapes.push_back(x.defined() ? x.shape() : Shape());
      c.dtypes.push_back(x.defined() ? x.dtype() : kDefaultFloat);
    }
    std::vector<Tensor> tangents(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined() || !is_floating(x.dtype())) continue;
      const Tensor* t = tangent_of(x);
      tangents[i] = t ? *t : zeros_like(x);
    }
    ForwardGradOff off;
    Tensor t = run_jvp(c, tangents);
    check_tangent(out, t, Op::name);
    out.impl()->meta().tangent = std::move(t);
  }
  return out;
}

template <class Op, std::size_t... I>
Tensor jvp_fixed(const Op& op, const Ctx& c, const std::vector<Tensor>& t,
                 std::index_sequence<I...>) {
  return op.jvp(c, t[I]...);
}

}  // namespace detail

/// Runs `op` on fixed inputs with all the autograd chores (see the comment at the top).
template <class Op, class... Ts>
Tensor apply(Op op, const Ts&... xs) {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "apply takes tensors");
  const std::array<Tensor, sizeof...(Ts)> inputs{xs...};
  return detail::apply_core(
      op, inputs,
      [&](Saver& saver) {
        if constexpr (requires { op.forward(saver, xs...); }) {
          return op.forward(saver, xs...);
        } else {
          return op.forward(xs...);
        }
      },
      [&](const Ctx& c, const std::vector<Tensor>& t) {
        return detail::jvp_fixed(op, c, t, std::index_sequence_for<Ts...>{});
      });
}

/// apply for ops over a list of tensors (Op::variadic).
template <class Op>
Tensor apply_list(Op op, const std::vector<Tensor>& inputs) {
  return detail::apply_core(
      op, inputs,
      [&](Saver& saver) {
        if constexpr (requires { op.forward(saver, inputs); }) {
          return op.forward(saver, inputs);
        } else {
          return op.forward(inputs);
        }
      },
      [&](const Ctx& c, const std::vector<Tensor>& t) { return op.jvp(c, t); });
}

}  // namespace adjoint
