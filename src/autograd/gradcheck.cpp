// gradcheck and gradgradcheck (see include/adjoint/gradcheck.h): the analytic Jacobian, built
// row by row from VJPs with one-hot cotangents (and, when asked, column by column from JVPs
// with one-hot tangents), against central finite differences in float64. The finite
// differences run on detached copies under NoGradGuard, so they record nothing.
#include "adjoint/gradcheck.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

namespace adjoint {
namespace {

// One block d(output) / d(input k) of the Jacobian, row-major: rows are output elements,
// columns the input's elements (both in row-major order of their tensors).
using Block = std::vector<double>;

void check_inputs(const std::vector<Tensor>& inputs, const char* op) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    ADJOINT_CHECK(!x.defined() || !is_floating(x.dtype()) || x.dtype() == DType::Float64, DType, op,
                  "input ", i, " must be float64 for finite differences, got ", describe(x));
  }
}

Tensor checked_output(const Tensor& y, const char* op) {
  ADJOINT_CHECK(y.defined(), Value, op, "the function returned an undefined tensor");
  ADJOINT_CHECK(y.dtype() == DType::Float64, DType, op, "the output must be float64, got ",
                describe(y));
  return y;
}

std::vector<std::size_t> inputs_requiring_grad(const std::vector<Tensor>& inputs) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) idx.push_back(i);
  return idx;
}

// Element j of a contiguous tensor set to v, by the kernel of its device (below the dispatch
// stack: nothing records it).
void set_element(const Tensor& t, int64_t j, double v) {
  kernels::fill(make_view(t, {}, {}, t.impl()->offset + j), v);
}

// The elements of `t` in row-major order; an undefined tensor reads as m zeros.
std::vector<double> values(const Tensor& t, int64_t m, const char* what) {
  if (!t.defined()) return std::vector<double>(m, 0.0);
  std::vector<double> v = t.to_vector<double>();
  ADJOINT_CHECK(static_cast<int64_t>(v.size()) == m, Shape, "gradcheck", what, " has ", v.size(),
                " elements, expected ", m);
  return v;
}

// Central differences for input k: column j is (f(x + eps e_j) - f(x - eps e_j)) / 2 eps.
Block numeric_block(const TensorFn& f, const std::vector<Tensor>& inputs, std::size_t k, int64_t m,
                    double eps) {
  NoGradGuard no_grad;
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(x.defined() ? detail::detach_alias(x).clone() : x);
  const int64_t n = xs[k].numel();
  Block block(m * n);
  if (n == 0) return block;
  ADJOINT_ASSERT(xs[k].is_contiguous(), "clone() should be contiguous");
  const std::vector<double> orig = xs[k].to_vector<double>();
  for (int64_t j = 0; j < n; ++j) {
    set_element(xs[k], j, orig[j] + eps);
    std::vector<double> plus = values(f(xs), m, "the perturbed output");
    set_element(xs[k], j, orig[j] - eps);
    std::vector<double> minus = values(f(xs), m, "the perturbed output");
    set_element(xs[k], j, orig[j]);
    for (int64_t r = 0; r < m; ++r) block[r * n + j] = (plus[r] - minus[r]) / (2 * eps);
  }
  return block;
}

// Reverse mode: row r of every block is one VJP with the one-hot cotangent e_r.
std::vector<Block> vjp_blocks(const Tensor& y, const std::vector<Tensor>& inputs,
                              const std::vector<std::size_t>& checked) {
  const int64_t m = y.numel();
  std::vector<Block> blocks;
  std::vector<Tensor> wrt;
  for (std::size_t k : checked) {
    blocks.emplace_back(m * inputs[k].numel(), 0.0);
    wrt.push_back(inputs[k]);
  }
  // An output with no history does not depend on the inputs: its Jacobian is zero.
  if (m == 0 || wrt.empty() || !y.requires_grad()) return blocks;
  for (int64_t r = 0; r < m; ++r) {
    Tensor e = zeros(y.shape(), y.dtype());
    set_element(e, r, 1);
    std::vector<Tensor> g = autograd::grad({y}, wrt, {e}, /*retain_graph=*/true,
                                           /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t i = 0; i < wrt.size(); ++i) {
      const int64_t n = wrt[i].numel();
      std::vector<double> row = values(g[i], n, "a gradient");
      for (int64_t j = 0; j < n; ++j) blocks[i][r * n + j] = row[j];
    }
  }
  return blocks;
}

// Forward mode: column j of block k is the JVP with the one-hot tangent e_j on input k.
Block jvp_block(const TensorFn& f, const std::vector<Tensor>& inputs, std::size_t k, int64_t m) {
  NoGradGuard no_grad;
  DualLevel level;
  const int64_t n = inputs[k].numel();
  Block block(m * n);
  for (int64_t j = 0; j < n; ++j) {
    Tensor tangent = zeros(inputs[k].shape(), DType::Float64);
    set_element(tangent, j, 1);
    std::vector<Tensor> xs = inputs;
    xs[k] = make_dual(inputs[k], tangent);
    std::vector<double> col = values(f(xs).tangent(), m, "the output tangent");
    for (int64_t r = 0; r < m; ++r) block[r * n + j] = col[r];
  }
  return block;
}

// Keeps the element that misses its tolerance |a - n| <= atol + rtol |n| by the most.
struct Worst {
  bool found = false;
  double excess = 0;
  int64_t input = -1, index = -1, row = -1;
  double analytic = 0, numeric = 0;

  void compare(const Block& a, const Block& num, int64_t n, std::size_t in,
               const GradcheckOptions& o) {
    for (std::size_t e = 0; e < a.size(); ++e) {
      const double diff = std::abs(a[e] - num[e]), tol = o.atol + o.rtol * std::abs(num[e]);
      if (diff <= tol) continue;
      const double ex = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff - tol;
      if (found && ex <= excess) continue;
      found = true;
      excess = ex;
      input = static_cast<int64_t>(in);
      index = static_cast<int64_t>(e) % n;
      row = static_cast<int64_t>(e) / n;
      analytic = a[e];
      numeric = num[e];
    }
  }

  GradcheckResult result(const std::string& what) const {
    GradcheckResult r;
    if (!found) return r;
    r.ok = false;
    r.input = input;
    r.index = index;
    r.analytic = analytic;
    r.numeric = numeric;
    std::ostringstream os;
    os.precision(10);
    os << what << " failed for input " << input << " at element " << index << " (output element "
       << row << "): analytic " << analytic << " vs numeric " << numeric;
    r.message = os.str();
    return r;
  }
};

}  // namespace

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  check_inputs(inputs, "gradcheck");
  const std::vector<std::size_t> checked = inputs_requiring_grad(inputs);
  const Tensor y = checked_output(f(inputs), "gradcheck");
  const int64_t m = y.numel();

  std::vector<Block> numeric;
  for (std::size_t k : checked) numeric.push_back(numeric_block(f, inputs, k, m, options.eps));

  const std::vector<Block> analytic = vjp_blocks(y, inputs, checked);
  Worst vjp;
  for (std::size_t i = 0; i < checked.size(); ++i)
    vjp.compare(analytic[i], numeric[i], inputs[checked[i]].numel(), checked[i], options);
  if (vjp.found) return vjp.result("gradcheck");

  if (options.check_jvp) {
    Worst jvp;
    for (std::size_t i = 0; i < checked.size(); ++i) {
      const std::size_t k = checked[i];
      jvp.compare(jvp_block(f, inputs, k, m), numeric[i], inputs[k].numel(), k, options);
    }
    if (jvp.found) return jvp.result("gradcheck (forward-mode JVP)");
  }
  return {};
}

GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options) {
  check_inputs(inputs, "gradgradcheck");
  const std::vector<std::size_t> checked = inputs_requiring_grad(inputs);
  Shape out_shape;
  {
    NoGradGuard no_grad;
    out_shape = checked_output(f(inputs), "gradgradcheck").shape();
  }
  Generator gen(20240607);
  // The cotangent v is an input of the check too, as in torch.autograd.gradgradcheck: the
  // gradient is linear in v, and for ops linear in x (views, cat, indexing) the dependence on
  // v is the only second-order rule there is to check.
  std::vector<Tensor> with_v = inputs;
  with_v.push_back(randn(out_shape, DType::Float64, &gen).requires_grad_(true));

  // g_i(x, v) = d<f(x), v>/dx_k for the i-th input that requires grad (k = checked[i]), built
  // with create_graph so that it is itself differentiable. The finite differences call g_i on
  // detached copies; those are made leaves that require grad so the inner grad() has a graph.
  // Checking every g_i against all inputs and v covers the whole second-derivative matrix.
  for (std::size_t i = 0; i < checked.size(); ++i) {
    const std::size_t k = checked[i];
    TensorFn g = [&, i, k](const std::vector<Tensor>& xs) -> Tensor {
      EnableGradGuard enable_grad;
      std::vector<Tensor> ys(xs.begin(), xs.end() - 1), wrt;
      const Tensor& v = xs.back();
      for (std::size_t c : checked) {
        if (!ys[c].requires_grad()) ys[c] = detail::detach_alias(ys[c]).requires_grad_(true);
        wrt.push_back(ys[c]);
      }
      Tensor y = f(ys);
      Tensor grad_k;
      if (y.requires_grad())
        grad_k = autograd::grad({y}, wrt, {v}, /*retain_graph=*/true, /*create_graph=*/true,
                                /*allow_unused=*/true)[i];
      return grad_k.defined() ? grad_k : zeros(xs[k].shape(), DType::Float64);
    };
    GradcheckResult r = gradcheck(g, with_v, options);
    if (!r) {
      r.message = "gradgradcheck (gradient of input " + std::to_string(k) + "): " + r.message;
      return r;
    }
  }
  return {};
}

}  // namespace adjoint
