// libFuzzer target for the op API: the input is a small program (format in ops_program.h) over
// a few input tensors of random small shapes (empty and 0-d included) and dtypes. It runs the
// program, then backward, sometimes with create_graph and a second backward through the
// gradients, sometimes inside checkpoint() (and then again without, comparing gradients),
// sometimes with forward-mode tangents (make_dual in a DualLevel, and transforms' jvp), and
// sometimes through compile(), traced and replayed, against eager code.
// adjoint::Error is an accepted outcome for any op; an internal error, another exception type,
// a sanitizer report or a broken invariant (a gradient shaped unlike its input, a checkpointed
// gradient differing from the plain one) is a finding. Seeds: fuzz/corpus/ops.
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "adjoint/adjoint.h"
#include "fuzz_util.h"
#include "ops_interpreter.h"
#include "ops_program.h"
#include "ops_values.h"

namespace {

using namespace adjoint;
using namespace adjoint::fuzz;

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> va = a.detach().to(DType::Float64).to_vector<double>();
  const std::vector<double> vb = b.detach().to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(std::bit_cast<uint64_t>(va[i]) == std::bit_cast<uint64_t>(vb[i]) ||
          (std::isnan(va[i]) && std::isnan(vb[i]))))
      return false;
  return true;
}

void check_grad(const Tensor& leaf, const Tensor& g) {
  if (!g.defined()) return;
  ADJOINT_FUZZ_CHECK(g.shape() == leaf.shape());
  ADJOINT_FUZZ_CHECK(g.dtype() == leaf.dtype());
}

// Reverse mode over the outputs: backward (or autograd::grad) with a cotangent per output,
// then, with create_graph, a second backward through the gradients. Returns the gradients of
// the inputs that require grad (undefined when none reached them), or nullopt on an Error.
std::optional<std::vector<Tensor>> reverse(const Program& p, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& outs) {
  std::vector<Tensor> diff_outs, cotangents, leaves;
  // A cotangent for an expanded output of 2^40 elements is more memory than there is: its
  // OutOfMemory error ends this input's backward, as any other Error does.
  const bool made = run_expecting_errors([&] {
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      diff_outs.push_back(outs[i]);
      cotangents.push_back(make_values(outs[i].shape(), outs[i].dtype(), 1, 77 + i));
    }
  });
  if (!made) return std::nullopt;
  for (const Tensor& x : inputs)
    if (x.requires_grad() && x.is_leaf()) leaves.push_back(x);
  if (diff_outs.empty()) return std::nullopt;
  const bool create = p.mode & kModeDoubleBackward;
  const bool retain = p.mode & kModeRetain;
  std::vector<Tensor> grads;
  if (trace())
    std::fprintf(stderr, "  backward: %zu outputs, %zu leaves%s%s\n", diff_outs.size(),
                 leaves.size(), create ? ", create_graph" : "", retain ? ", retain_graph" : "");
  const bool ok = run_expecting_errors([&] {
    for (const Tensor& x : leaves) x.zero_grad();
    if (p.use_grad_fn && !leaves.empty()) {
      grads = autograd::grad(diff_outs, leaves, cotangents, retain || create, create, true);
      ADJOINT_FUZZ_CHECK(grads.size() == leaves.size());
    } else {
      autograd::backward(diff_outs, cotangents, retain || create, create);
      for (const Tensor& x : leaves) grads.push_back(x.grad());
      if (retain) autograd::backward(diff_outs, cotangents, false, false);  // accumulates
    }
    for (std::size_t i = 0; i < leaves.size(); ++i) check_grad(leaves[i], grads[i]);
    if (!create) return;
    // Double backward: d/dx of sum(g * g) over the first-order gradients.
    Tensor s;
    for (const Tensor& g : grads) {
      if (!g.defined() || !g.requires_grad()) continue;
      Tensor term = (g * g).sum();
      s = s.defined() ? s + term : term;
    }
    if (!s.defined()) return;
    if (trace()) std::fprintf(stderr, "  double backward\n");
    std::vector<Tensor> second = autograd::grad({s}, leaves, {}, false, false, true);
    for (std::size_t i = 0; i < leaves.size(); ++i) check_grad(leaves[i], second[i]);
  });
  // .grad recorded with create_graph holds a graph that may hold the leaf: drop it (the
  // reference cycle PyTorch documents for backward(create_graph=True)).
  for (const Tensor& x : leaves) x.zero_grad();
  if (!ok) return std::nullopt;
  std::vector<Tensor> detached;
  for (const Tensor& g : grads) detached.push_back(g.defined() ? g.detach().clone() : Tensor());
  return detached;
}

// sum(a * b) in float64, with the sum of |a * b| (the scale of its rounding error); false when
// some product is not finite.
bool dot(const Tensor& a, const Tensor& b, double& sum, double& scale) {
  if (!a.defined() || !b.defined()) return true;  // an undefined tangent or gradient is zero
  if (a.shape() != b.shape()) return false;
  const std::vector<double> va = a.detach().to(DType::Float64).to_vector<double>();
  const std::vector<double> vb = b.detach().to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double p = va[i] * vb[i];
    if (!std::isfinite(p) || std::fabs(va[i]) > 1e6 || std::fabs(vb[i]) > 1e6) return false;
    sum += p;
    scale += std::fabs(p);
  }
  return true;
}

// Forward and reverse mode are one linear map and its transpose: with input tangents t and
// output cotangents c (those reverse() used), <c, J t> = <J^T c, t>. Checked when every input
// with a tangent is a leaf that requires grad and vice versa, and all numbers are finite.
void check_transpose(const Program& p, const std::vector<Tensor>& primals,
                     const std::vector<Tensor>& tangents, const std::vector<Tensor>& outs,
                     const std::vector<Tensor>& grads, const RunInfo& info) {
  std::vector<std::size_t> leaf_index;
  for (std::size_t i = 0; i < primals.size(); ++i) {
    const bool leaf = primals[i].requires_grad() && primals[i].is_leaf();
    if (leaf != tangents[i].defined()) return;
    if (leaf) leaf_index.push_back(i);
  }
  if (leaf_index.size() != grads.size()) return;
  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    Tensor tangent;
    if (!run_expecting_errors([&] { tangent = unpack_dual(outs[i]).second; })) return;
    if (!outs[i].requires_grad()) {
      if (tangent.defined()) return;  // a tangent where no gradient flows back
      continue;
    }
    const Tensor c = make_values(outs[i].shape(), outs[i].dtype(), 1, 77 + i);  // as reverse()
    if (!dot(c, tangent, lhs, scale)) return;
  }
  for (std::size_t j = 0; j < grads.size(); ++j)
    if (!dot(grads[j], tangents[leaf_index[j]], rhs, scale)) return;
  bool float32 = info.float32;
  for (const auto* list : {&primals, &outs, &grads})
    for (const Tensor& t : *list)
      if (t.defined() && t.dtype() == DType::Float32) float32 = true;
  const double tol = (float32 ? 1e-4 : 1e-9) * (1 + scale);
  if (trace()) std::fprintf(stderr, "  <c, J t> = %.17g, <J^T c, t> = %.17g\n", lhs, rhs);
  if (!(std::fabs(lhs - rhs) <= tol)) {
    char detail[160];
    std::snprintf(detail, sizeof detail, "<c, J t> = %.17g but <J^T c, t> = %.17g (mode 0x%02x)",
                  lhs, rhs, p.mode);
    finding("forward and reverse mode disagree:", detail);
  }
}

// Everything one run does; `checkpointed` puts the ops inside checkpoint().
std::optional<std::vector<Tensor>> run_program(const Program& p, bool checkpointed, bool dual) {
  std::vector<Tensor> inputs = make_inputs(p);
  std::optional<DualLevel> level;
  std::vector<Tensor> primals = inputs;
  std::vector<Tensor> tangents(inputs.size());
  if (dual) {
    level.emplace();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].is_floating_point() || (p.inputs[i].seed & 0x80)) continue;
      const Tensor t = make_values(inputs[i].shape(), inputs[i].dtype(), 1, p.inputs[i].seed + 1);
      if (run_expecting_errors([&] { inputs[i] = make_dual(inputs[i], t); })) tangents[i] = t;
    }
  }
  if (p.mode & kModeHooks) {
    for (const Tensor& x : primals)
      if (x.requires_grad())
        x.register_hook([shape = x.shape()](const Tensor& g) {
          ADJOINT_FUZZ_CHECK(g.shape() == shape);
          return Tensor();
        });
  }
  std::vector<Tensor> outs;
  RunInfo info;
  info.linear_ok = !checkpointed;
  {
    std::optional<NoGradGuard> no_grad;
    std::optional<InferenceMode> inference;
    if (p.run == 1) no_grad.emplace();
    if (p.run == 2) inference.emplace();
    if (checkpointed) {
      if (!run_expecting_errors([&] {
            outs = checkpoint([&p](const std::vector<Tensor>& xs) { return interpret(p, xs); },
                              inputs);
          }))
        return std::nullopt;
    } else {
      outs = interpret(p, inputs, &info);
    }
  }
  if (dual) {
    for (const Tensor& o : outs) {
      std::pair<Tensor, Tensor> pt;
      if (!run_expecting_errors([&] { pt = unpack_dual(o); })) continue;
      if (!pt.second.defined()) continue;
      ADJOINT_FUZZ_CHECK(pt.second.shape() == o.shape());
      ADJOINT_FUZZ_CHECK(pt.first.shape() == o.shape());
    }
  }
  if (!(p.mode & kModeBackward)) return std::nullopt;
  // Gradients go to the leaves (inputs made dual are views of them).
  std::optional<std::vector<Tensor>> grads = reverse(p, primals, outs);
  if (dual && grads && info.linear_ok && p.run == 0 && !(p.mode & kModeRetain))
    check_transpose(p, primals, tangents, outs, *grads, info);
  return grads;
}

// transforms' jvp over the float inputs, beside the make_dual run: the same tangents must
// come out of both (or an Error from both).
void check_jvp_transform(const Program& p) {
  const std::vector<Tensor> inputs = make_inputs(p);
  std::vector<Tensor> primals, tangents;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].is_floating_point()) continue;
    primals.push_back(inputs[i].detach());
    tangents.push_back(make_values(inputs[i].shape(), inputs[i].dtype(), 1, p.inputs[i].seed + 1));
    where.push_back(i);
  }
  if (primals.empty()) return;
  auto f = [&](const std::vector<Tensor>& ps) {
    std::vector<Tensor> xs = make_inputs(p);
    for (std::size_t k = 0; k < where.size(); ++k) xs[where[k]] = ps[k];
    std::vector<Tensor> outs = interpret(p, xs);
    for (Tensor& o : outs)
      if (!o.is_floating_point()) o = o.to(DType::Float32);  // integer outputs: no tangent
    return outs;
  };
  run_expecting_errors([&] {
    auto res = jvp(f, primals, tangents);
    ADJOINT_FUZZ_CHECK(res.outputs.size() == res.tangents.size());
    for (std::size_t i = 0; i < res.outputs.size(); ++i)
      if (res.tangents[i].defined())
        ADJOINT_FUZZ_CHECK(res.tangents[i].shape() == res.outputs[i].shape());
  });
}

// Whether a compiled replay's value agrees with eager code's: shape, dtype and definedness
// equal; integers and bools equal; floating values equal or within 8 ulps of the dtype (a fused
// loop over strided operands may round differently; contiguous ones are bitwise), NaN where
// NaN, infinities equal.
bool close_values(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  // An expanded output of 2^40 elements cannot be read back: its shape and dtype have to do.
  if (a.numel() > (int64_t{1} << 22)) return true;
  if (!a.is_floating_point()) return same_values(a, b);
  const double eps = a.dtype() == DType::Float64   ? 0x1p-52
                     : a.dtype() == DType::Float32 ? 0x1p-23
                                                   : 0x1p-7;
  const std::vector<double> va = a.detach().to(DType::Float64).to_vector<double>();
  const std::vector<double> vb = b.detach().to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;
    if (std::isinf(va[i]) || std::isinf(vb[i])) return false;
    if (!(std::fabs(va[i] - vb[i]) <= 8 * eps * std::max(std::fabs(va[i]), std::fabs(vb[i]))))
      return false;
  }
  return true;
}

// compile() against eager code: the program traced on one set of inputs, replayed on a fresh
// set of the same values, gives eager code's outputs and (with kModeBackward) gradients. An
// Error from one side only is a finding too: a graph break falls back to eager code, so
// compile may not refuse what eager code runs.
void check_compiled(const Program& p) {
  CompileOptions options;
  options.warn = false;
  const CompiledFunction compiled =
      compile([&p](const std::vector<Tensor>& xs) { return interpret(p, xs); }, options);
  auto run = [&](bool use_compiled, std::vector<Tensor>& outs,
                 std::optional<std::vector<Tensor>>& grads) {
    const std::vector<Tensor> inputs = make_inputs(p);
    if (!run_expecting_errors(
            [&] { outs = use_compiled ? compiled(inputs) : interpret(p, inputs); }))
      return false;
    if (p.mode & kModeBackward) grads = reverse(p, inputs, outs);
    return true;
  };
  std::vector<Tensor> eager_outs, traced_outs, replay_outs;
  std::optional<std::vector<Tensor>> eager_grads, traced_grads, replay_grads;
  const bool eager_ok = run(false, eager_outs, eager_grads);
  const bool traced_ok = run(true, traced_outs, traced_grads);
  if (eager_ok != traced_ok)
    finding("compile and eager code disagree on an error:",
            eager_ok ? "compile threw" : "eager threw");
  if (!eager_ok) return;
  if (trace()) std::fprintf(stderr, "  compiled: traced, now the replay\n");
  if (!run(true, replay_outs, replay_grads)) finding("a compiled replay threw where its trace ran");
  ADJOINT_FUZZ_CHECK(replay_outs.size() == eager_outs.size());
  for (std::size_t i = 0; i < eager_outs.size(); ++i)
    if (!close_values(replay_outs[i], eager_outs[i]))
      finding("a compiled replay's output differs from eager code's:",
              describe(eager_outs[i]).c_str());
  if (eager_grads.has_value() != replay_grads.has_value()) return;  // an Error on one side
  if (!eager_grads) return;
  ADJOINT_FUZZ_CHECK(eager_grads->size() == replay_grads->size());
  for (std::size_t i = 0; i < eager_grads->size(); ++i)
    if (!close_values((*replay_grads)[i], (*eager_grads)[i]))
      finding("a compiled replay's gradient differs from eager code's:",
              (std::to_string(i) + ": " + describe((*replay_grads)[i]) + " against " +
               describe((*eager_grads)[i]))
                  .c_str());
}

// compile() with dim 0 of input 0 (and of the inputs sharing its size) dynamic, against eager
// code at that size and three more: the graphs built from the fitted formulas must give eager
// code's outputs and gradients, and throw where it throws. (A program whose ops branch on the
// size in a way the probes cannot see breaks compile's documented contract; such a finding
// needs a look before it is called a bug: docs/compile.md, "Dynamic sizes".)
void check_compiled_dynamic(const Program& p) {
  const std::vector<Tensor> base = make_inputs(p);
  if (base.empty() || base[0].dim() == 0 || base[0].size(0) < 2 || base[0].size(0) > 64 ||
      base[0].numel() > 4096)
    return;  // a huge dim (of an empty or expanded input) is no batch to resize
  const int64_t n0 = base[0].size(0);
  CompileOptions options;
  options.warn = false;
  for (std::size_t i = 0; i < base.size(); ++i)
    if (base[i].dim() > 0 && base[i].size(0) == n0 && base[i].numel() <= 4096)
      options.dynamic.push_back({static_cast<int>(i), 0});
  const CompiledFunction compiled =
      compile([&p](const std::vector<Tensor>& xs) { return interpret(p, xs); }, options);
  auto inputs_at = [&](int64_t n) {
    std::vector<Tensor> xs = make_inputs(p);
    std::vector<int64_t> rows(static_cast<std::size_t>(n));
    for (int64_t r = 0; r < n; ++r) rows[static_cast<std::size_t>(r)] = r % n0;
    for (const DynamicDim& d : options.dynamic) {
      Tensor& x = xs[static_cast<std::size_t>(d.input)];
      const bool grad = x.requires_grad();
      {
        NoGradGuard no_grad;
        x = index_select(x.detach(), 0, tensor(rows)).contiguous();
      }
      if (grad) x.requires_grad_(true);
    }
    return xs;
  };
  for (int64_t n : {n0, n0 + 1, n0 + 2, n0 + 3}) {
    std::vector<Tensor> eager_outs, compiled_outs;
    std::optional<std::vector<Tensor>> eager_grads, compiled_grads;
    const std::vector<Tensor> xe = inputs_at(n), xc = inputs_at(n);
    const bool eager_ok = run_expecting_errors([&] { eager_outs = interpret(p, xe); });
    const bool compiled_ok = run_expecting_errors([&] { compiled_outs = compiled(xc); });
    if (eager_ok != compiled_ok)
      finding("dynamic compile and eager code disagree on an error:",
              eager_ok ? "compile threw" : "eager threw");
    if (!eager_ok) return;
    if (p.mode & kModeBackward) {
      eager_grads = reverse(p, xe, eager_outs);
      compiled_grads = reverse(p, xc, compiled_outs);
    }
    ADJOINT_FUZZ_CHECK(compiled_outs.size() == eager_outs.size());
    for (std::size_t i = 0; i < eager_outs.size(); ++i)
      if (!close_values(compiled_outs[i], eager_outs[i]))
        finding("a dynamic compiled output differs from eager code's:",
                describe(eager_outs[i]).c_str());
    if (!eager_grads || !compiled_grads) continue;
    for (std::size_t i = 0; i < eager_grads->size(); ++i)
      if (!close_values((*compiled_grads)[i], (*eager_grads)[i]))
        finding("a dynamic compiled gradient differs from eager code's:",
                describe((*eager_grads)[i]).c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  adjoint::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < kHeaderBytes) return 0;
  const Program p = parse(data, size);
  const bool checkpointed = p.mode & kModeCheckpoint;
  const bool dual = p.mode & kModeDual;
  std::optional<std::vector<Tensor>> grads = run_program(p, checkpointed, dual);
  // Checkpointing must not change gradients: compare with a plain run of the same program.
  if (checkpointed && (p.mode & kModeCompare) && p.run == 0 && !dual) {
    std::optional<std::vector<Tensor>> plain = run_program(p, false, false);
    if (grads && plain) {
      ADJOINT_FUZZ_CHECK(grads->size() == plain->size());
      for (std::size_t i = 0; i < grads->size(); ++i)
        if (!same_values((*grads)[i], (*plain)[i]))
          finding("checkpoint changes a gradient", describe((*plain)[i]).c_str());
    }
  }
  if (dual && (p.mode & kModeJvpTransform) && p.run == 0) check_jvp_transform(p);
  if (p.compiled && p.run == 0 && !dual && !checkpointed) {
    check_compiled(p);
    check_compiled_dynamic(p);
  }
  return 0;
}