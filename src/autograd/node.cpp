// Node basics: sequence numbers (creation order, used by the engine's ready queue), tensor
// pre-hooks, and the helpers apply<Op> shares.
#include <atomic>
#include <cctype>
#include <utility>

#include "adjoint/error.h"
#include "autograd/anomaly.h"
#include "autograd/apply.h"
#include "autograd/transform_support.h"

namespace adjoint {
namespace {
std::atomic<uint64_t> sequence_counter{0};
std::atomic<int> next_hook_id{0};
}  // namespace

namespace detail {
uint64_t next_sequence_nr() { return sequence_counter.load(std::memory_order_relaxed); }
uint64_t take_sequence_nr() { return sequence_counter.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

Node::Node(uint32_t num_outputs)
    : sequence_nr_(sequence_counter.fetch_add(1, std::memory_order_relaxed)),
      num_outputs_(num_outputs) {}

void Node::set_creation_site(std::unique_ptr<detail::CreationSite> site) {
  creation_site_ = std::move(site);
}

Node::~Node() {
  // Tear down long chains iteratively: dropping the last reference to a node would otherwise
  // recurse through every node behind it and overflow the stack on deep graphs.
  std::vector<std::shared_ptr<Node>> stack;
  auto take = [&](EdgeList& edges) {
    for (Edge& e : edges)
      if (e.node && e.node.use_count() == 1) stack.push_back(std::move(e.node));
    edges.clear();
  };
  take(next_edges_);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n->release_saved();  // first: saved inputs also hold the next nodes
    take(n->next_edges_);
  }
}

int Node::add_tensor_pre_hook(uint32_t output_nr, std::function<Tensor(const Tensor&)> hook) {
  int id = next_hook_id.fetch_add(1);
  pre_hooks_.push_back({id, output_nr, std::move(hook)});
  return id;
}

void Node::remove_tensor_pre_hook(int id) {
  std::erase_if(pre_hooks_, [id](const PreHook& h) { return h.id == id; });
}

void Node::run_tensor_pre_hooks(TensorList& grads) {
  for (const PreHook& h : pre_hooks_) {
    Tensor& g = grads[h.output_nr];
    if (!g.defined()) continue;
    Tensor r = h.fn(g);
    if (!r.defined()) continue;
    detail::check_hook_result(r, g, name().c_str());
    g = std::move(r);
  }
}

namespace detail {

std::string backward_name(const char* op) {
  std::string out;
  bool upper = true;
  for (const char* p = op; *p; ++p) {
    if (*p == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(*p))) : *p;
    upper = false;
  }
  return out + "Backward";
}

Tensor fit_gradient(Tensor g, const Shape& shape, DType dtype) {
  if (g.shape() != shape) g = sum_to(g, shape);
  if (g.dtype() != dtype) g = g.to(dtype);
  return g;
}

void take_history(const Tensor& t, const Edge& e) {
  AutogradMeta& m = t.impl()->meta();
  // retain_grad follows the tensor to its new grad_fn (as in PyTorch): .grad is then the
  // gradient of the new value.
  const bool retained = m.retains_grad;
  if (retained) {
    if (m.grad_fn) m.grad_fn->remove_tensor_pre_hook(m.retain_hook_id);
    m.retains_grad = false;
  }
  m.requires_grad = true;
  std::shared_ptr<Node> old_grad_fn = std::exchange(m.grad_fn, e.node);
  m.output_nr = e.input_nr;
  if (retained) t.retain_grad();
  if (e.node && t.impl()->saved_for_backward.load(std::memory_order_relaxed)) [[unlikely]]
    forget_stale_saves(e.node.get(), old_grad_fn.get());
}

void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = out.impl()->meta();
  m.requires_grad = true;
  m.grad_fn = node;
  m.output_nr = output_nr;
}

Tensor alias_without_history(const Tensor& t) {
  const TensorImpl& src = *t.impl();
  auto impl =
      detail::make_pooled<TensorImpl>(src.storage, src.shape, src.strides, src.offset, src.dtype);
  impl->is_view = src.is_view;
  impl->inference = src.inference;
  impl->batched = src.batched;  // the same values below, without this level's history
  return Tensor(std::move(impl));
}

Tensor alias_with_history(const Tensor& t) {
  Tensor alias = alias_without_history(t);
  alias.impl()->is_view = true;
  if (t.requires_grad()) {
    Edge e = autograd::gradient_edge(t);
    AutogradMeta& m = alias.impl()->meta();
    m.requires_grad = true;
    m.grad_fn = e.node;
    m.output_nr = e.input_nr;
  }
  return alias;
}

void check_hook_result(const Tensor& returned, const Tensor& grad, const char* node) {
  ADJOINT_CHECK(returned.shape() == grad.shape(), Shape, "hook",
                "a hook on a gradient flowing into ", node, " returned ", describe(returned),
                " for a gradient of ", describe(grad),
                "; a hook may change the gradient's values, not its shape");
}

void check_tangent(const Tensor& out, const Tensor& tangent, const char* op) {
  ADJOINT_CHECK(tangent.defined() && tangent.shape() == out.shape(), Shape, op,
                "the JVP rule returned a tangent of ", describe(tangent), " for an output of ",
                describe(out));
  // A tangent lives in the primal's tangent space: its dtype too (a float32 tangent on a
  // float64 output would silently lose precision in everything downstream).
  ADJOINT_CHECK(tangent.dtype() == out.dtype(), DType, op, "the JVP rule returned a tangent of ",
                describe(tangent), " for an output of ", describe(out), ": the dtypes must match");
}

}  // namespace detail
}  // namespace adjoint
