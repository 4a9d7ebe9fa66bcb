// Engine-side helpers for the function transforms; see transform_support.h.
#include "autograd/transform_support.h"

#include <unordered_set>

#include "adjoint/autograd.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "autograd/forward_ad.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

// y = x as a recorded op, so a transform's input has its own node on an outer graph.
struct Alias {
  static constexpr const char* name = "alias";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return detail::detach_alias(x); }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy; }  // d/dx x = 1
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx; }
};

}  // namespace

namespace detail {

Tensor fresh_input(const Tensor& x) {
  if (x.requires_grad()) {
    EnableGradGuard enable;
    return apply(Alias{}, x);
  }
  Tensor t = detach_keep_tangents(x);
  AutogradMeta& meta = t.impl()->meta();
  meta.requires_grad = true;
  meta.transform_input_seq = take_sequence_nr();
  return t;
}

namespace {

// A leaf that a transform started at or after first_seq made for its own input: gradients
// reaching it stay inside (an inner grad over a constant primal, whose function closes over
// the outer input). Not a leaf of the caller's, nor of a transform further out.
bool inner_transform_input(const Node* n, uint64_t first_seq) {
  const auto* acc = dynamic_cast<const AccumulateGrad*>(n);
  const AutogradMeta* meta = acc && acc->leaf() ? acc->leaf()->autograd.get() : nullptr;
  return meta && meta->transform_input_seq != AutogradMeta::kNoSequence &&
         meta->transform_input_seq >= first_seq;
}

}  // namespace

bool graph_reaches_outside(const std::vector<Tensor>& outputs,
                           const std::vector<Tensor>& own_inputs, uint64_t first_seq) {
  // A leaf's AccumulateGrad is made on demand and held weakly by the leaf: keep the edges
  // (and so the nodes) alive while their addresses are in use.
  std::vector<Edge> keep;
  std::unordered_set<const Node*> own, seen;
  for (const Tensor& x : own_inputs) {
    if (!x.requires_grad()) continue;
    keep.push_back(autograd::gradient_edge(x));
    own.insert(keep.back().node.get());
  }
  std::vector<const Node*> stack;
  for (const Tensor& y : outputs) {
    if (!y.defined() || !y.requires_grad()) continue;
    keep.push_back(autograd::gradient_edge(y));
    stack.push_back(keep.back().node.get());
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second) continue;
    // An own input's alias node is new, but its edge leads on to the outer graph.
    if (!own.count(n) && !inner_transform_input(n, first_seq) &&
        (n->sequence_nr() < first_seq || dynamic_cast<const AccumulateGrad*>(n)))
      return true;
    for (const Edge& e : n->next_edges()) stack.push_back(e.node.get());
  }
  return false;
}

Tensor detach_keep_tangents(const Tensor& t) {
  Tensor d = detail::detach_alias(t);
  copy_tangents(t, d, tls_mode.dual_visible);
  return d;
}

}  // namespace detail
}  // namespace adjoint

ADJOINT_OPS_FILE(transform_support)
