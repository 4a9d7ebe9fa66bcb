// Linear algebra: matmul (torch.matmul semantics, batched with broadcasting), linear (x Wᵀ + b
// as one op, the hot path of an MLP), dot and outer. Transposes are views: the gemm kernel
// reads them through BLAS transpose flags, so neither the forward nor the VJPs copy operands.
// Decompositions and solvers are not here.
#include "adjoint/error.h"
#include "core/op_fields.h"
#include "ops/common.h"

namespace adjoint {
namespace {

/// The last two dims swapped (a view).
Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

/// A 1-d tensor seen as a [1, n] row or an [n, 1] column, without copying (kernel input only).
Tensor as_row(const Tensor& v) {
  const int64_t n = v.shape()[0], s = v.strides()[0];
  return make_view(v, {1, n}, {n * s, s}, v.storage_offset());
}
Tensor as_column(const Tensor& v) {
  const int64_t n = v.shape()[0], s = v.strides()[0];
  return make_view(v, {n, 1}, {s, 1}, v.storage_offset());
}

/// Product of all dims but the last: the rows of x seen as a matrix.
int64_t leading_rows(const Shape& s) {
  int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) rows *= s[i];
  return rows;
}

/// x (any rank >= 1) as a [rows, in] matrix for the kernels: a view when possible, else a
/// contiguous copy. Never recorded (kernel input only).
Tensor as_matrix(const Tensor& x) {
  if (x.dim() == 2) return x;
  if (x.dim() == 1) return as_row(x);
  Tensor c = x.is_contiguous() ? x : kernels::cast(x, x.dtype());
  Shape shape{leading_rows(x.shape()), x.shape().back()};
  return make_view(c, shape, contiguous_strides(shape), c.storage_offset());
}

/// x (any rank >= 1) reshaped to [rows, last] with differentiable ops.
Tensor to_matrix(const Tensor& x) {
  return x.dim() == 2 ? x : x.reshape({leading_rows(x.shape()), x.shape().back()});
}

// Note [Products promote inside the op]
// matmul, linear and dot take their operands in the caller's dtypes and promote inside the op
// (PyTorch's rules; bool refused): the forward casts by the kernel, the VJPs and JVPs compute
// with the saved operands through the public functions, which promote again, and the engine
// casts each gradient back to its input's dtype. So the Autocast layer, the top of the stack,
// sees the caller's dtypes (a bfloat16 activation beside a float32 weight goes to bfloat16,
// not through float32), and no public function converts for autocast itself. One exception:
// matmul promotes an operand whose batch dims broadcast before expanding it, so that its
// gradient is summed over them in the product's dtype (autocast then sees that dtype).

/// The dtype a product of these operands computes in, or a DType error naming the op.
DType product_dtype(const detail::ValueSpec& a, const detail::ValueSpec& b, const char* op) {
  const DType dt = promote_types(a.dtype, b.dtype);
  ADJOINT_CHECK(dt != DType::Bool, DType, op, "bool operands are not supported: lhs ", describe(a),
                " vs rhs ", describe(b));
  return dt;
}

/// x in the product's dtype, for a kernel (never recorded: the op's forward).
Tensor in_dtype(const Tensor& x, DType dt) {
  return !x.defined() || x.dtype() == dt ? x : kernels::cast(x, dt);
}

// Batched product of equal-rank (>= 2) operands with equal batch dims; the public matmul
// promotes 1-d operands and broadcasts batch dims before applying it.
struct MatMul {
  static constexpr const char* name = "matmul";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    const DType dt = promote_types(a.dtype(), b.dtype());
    return kernels::matmul(in_dtype(a, dt), in_dtype(b, dt));
  }
  // matmul() hands it [..., m, k] @ [..., k, n] with one batch shape (expanded to it).
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec &a = spec_of(in, 0, name), &b = spec_of(in, 1, name);
    const std::size_t na = a.shape.size(), nb = b.shape.size();
    ADJOINT_CHECK(na >= 2 && na == nb, Shape, name,
                  "operands of one rank of 2 or more expected: lhs ", describe(a), " vs rhs ",
                  describe(b));
    ADJOINT_CHECK(a.shape[na - 1] == b.shape[nb - 2], Shape, name, "inner dimensions differ: lhs ",
                  describe(a), " vs rhs ", describe(b));
    Shape out = a.shape;
    out[na - 1] = b.shape[nb - 1];
    for (std::size_t i = 0; i + 2 < na; ++i)
      ADJOINT_CHECK(a.shape[i] == b.shape[i], Shape, name, "batch dimensions differ: lhs ",
                    describe(a), " vs rhs ", describe(b));
    return {out, product_dtype(a, b, name)};
  }
  // C = A B: dA = dC Bᵀ, dB = Aᵀ dC
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {c.needs_grad(0) ? matmul(gy, mT(c.input(1))) : Tensor(),
            c.needs_grad(1) ? matmul(mT(c.input(0)), gy) : Tensor()};
  }
  // dC = dA B + A dB (an undefined tangent is zero: no matmul for it)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    return sum_defined(ta.defined() ? matmul(ta, c.input(1)) : Tensor(),
                       tb.defined() ? matmul(c.input(0), tb) : Tensor());
  }
  // Batching: the operands have equal logical ranks (>= 2), so matmul's own broadcasting of
  // batch dims takes an unbatched operand along.
  Tensor vmap(const BatchArgs& b) const {
    // A shared matrix times a batch of matrices (jacrev's batched cotangents meet the
    // weights this way): one GEMM instead of B, in row form, W x_b = (x_bᵀ Wᵀ)ᵀ, so that
    // for a batch of vectors (n = 1) neither the operand nor the result is copied or left
    // strided (the column form, W [x_1 .. x_B], transposed both: two copies as large as the
    // batch, each slower than the GEMM at jacrev's sizes).
    if (!b.batched(0) && b[0].dim() == 2 && b.batched(1) && b.logical_dim(1) == 2) {
      const Tensor& x = b[1];  // [B, k, n]
      const int64_t batch = x.size(0), k = x.size(1), n = x.size(2);
      const Tensor rows = matmul(x.transpose(1, 2).reshape({batch * n, k}), b[0].t());
      return rows.reshape({batch, n, b[0].size(0)}).transpose(1, 2);
    }
    const int64_t r = b.max_logical_dim();
    return matmul(b.aligned(0, r), b.aligned(1, r));
  }
};

struct Dot {
  static constexpr const char* name = "dot";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    const DType dt = promote_types(a.dtype(), b.dtype());
    Tensor r = kernels::matmul(as_row(in_dtype(a, dt)), as_column(in_dtype(b, dt)));
    return reshape_fresh(r, {});
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec &a = spec_of(in, 0, name), &b = spec_of(in, 1, name);
    ADJOINT_CHECK(a.shape.size() == 1 && b.shape.size() == 1 && a.shape[0] == b.shape[0], Shape,
                  name, "two 1-d tensors of one size expected: lhs ", describe(a), " vs rhs ",
                  describe(b));
    return {Shape{}, product_dtype(a, b, name)};
  }
  // d(a · b) = b · da + a · db
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {c.needs_grad(0) ? gy * c.input(1) : Tensor(),
            c.needs_grad(1) ? gy * c.input(0) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    return dot(ta, c.input(1)) + dot(c.input(0), tb);
  }
  Tensor vmap(const BatchArgs& b) const { return sum(b.aligned(0, 1) * b.aligned(1, 1), {-1}); }
};

// Under autocast, input 1 of a linear is the 16-bit cast of a float32 weight: where that
// weight's .grad may take the product itself (Note [Adding into .grad through a cast]), adds
// the widening of the 16-bit gᵀ x into it in one pass. True when it did (dW stays undefined).
bool add_through_cast(const Ctx& c, const Tensor& g2, const Tensor& x2) {
  if (!is_reduced_float(g2.dtype()) || x2.dtype() != g2.dtype()) return false;
  const autograd::GradInto into = c.grad_to_add_into_through_cast(1);
  if (!into.defined() || into.grad.shares_storage(g2) || into.grad.shares_storage(x2)) return false;
  kernels::matmul_widened_add_into(into.grad, g2.t(), x2);
  into.added();
  return true;
}

// y = x Wᵀ + b over the last dim of x (any rank >= 1); the bias may be undefined.
struct Linear {
  static constexpr const char* name = "linear";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  // linear()'s checks, on the operands it hands the op (in the caller's dtypes).
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec &x = spec_of(in, 0, name), &w = spec_of(in, 1, name);
    ADJOINT_CHECK(x.shape.size() >= 1 && w.shape.size() == 2 && x.shape.back() == w.shape[1], Shape,
                  name, "input [..., in] and weight [out, in] expected: input ", describe(x),
                  " vs weight ", describe(w));
    DType dt = product_dtype(x, w, name);
    if (in.size() > 2 && in[2].defined) {
      const detail::ValueSpec& b = in[2];
      ADJOINT_CHECK(b.shape == Shape{w.shape[0]}, Shape, name, "bias must have shape [", w.shape[0],
                    "]: bias ", describe(b), " vs weight ", describe(w));
      dt = promote_types(dt, b.dtype);
    }
    Shape out = x.shape;
    out.back() = w.shape[0];
    return {out, dt};
  }
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) const {
    DType dt = promote_types(x.dtype(), w.dtype());
    if (b.defined()) dt = promote_types(dt, b.dtype());
    Tensor r = kernels::linear(as_matrix(in_dtype(x, dt)), in_dtype(w, dt), in_dtype(b, dt));
    Shape out = x.shape();
    out.back() = w.shape()[0];
    return reshape_fresh(r, out);
  }
  // y = x Wᵀ + b: dx = g W, dW = gᵀ x (summed over the leading dims), db = Σ g over them
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    Tensor dx, dw, db;
    if (c.needs_grad(0)) dx = matmul(gy, w);
    if (c.needs_grad(1) || c.needs_grad(2)) {
      Tensor g2 = to_matrix(gy);
      if (c.needs_grad(1)) {
        const Tensor x2 = to_matrix(x);
        const autograd::GradInto into = c.grad_to_add_into(1);
        const Tensor& grad = into.grad;
        // (a gradient of another dtype, say from a hook or an explicit seed, goes the usual
        // way: matmul promotes and fit_gradient casts back)
        if (into.defined() && g2.dtype() == grad.dtype() && x2.dtype() == grad.dtype() &&
            !grad.shares_storage(g2) && !grad.shares_storage(x2)) {
          kernels::matmul_add_into(grad, g2.t(), x2);  // w.grad += gᵀ x, dw stays undefined
          into.added();
        } else if (!add_through_cast(c, g2, x2)) {
          dw = matmul(g2.t(), x2);
        }
      }
      if (c.needs_grad(2)) db = g2.sum({0});
    }
    return {dx, dw, db};
  }
  // dy = dx Wᵀ + x dWᵀ + db
  // (an undefined tangent is zero: no matmul for it)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tw, const Tensor& tb) const {
    Tensor t;
    if (tx.defined()) t = linear(tx, c.input(1), tb);
    if (tw.defined()) t = tx.defined() ? t + linear(c.input(0), tw) : linear(c.input(0), tw, tb);
    if (t.defined()) return t;
    return cast_to(tb.expand(c.output().shape()), c.output().dtype());  // only the bias's
  }
  // Batching: x's batch dim is one more leading dim; batched weights (an ensemble) become a
  // batched matmul.
  Tensor vmap(const BatchArgs& b) const {
    if (!b.batched(1) && !b.batched(2)) return apply(Linear{}, b[0], b[1], b[2]);
    const Tensor x = b.with_batch(0);  // [B, ..., in] -> [B, rows, in] @ [B, in, out]
    int64_t rows = 1;                  // counted, not inferred: -1 is ambiguous when in = 0
    for (int64_t d = 1; d + 1 < x.dim(); ++d) rows *= x.size(d);
    Tensor y = matmul(x.reshape({b.size(), rows, x.size(-1)}), b.with_batch(1).transpose(-2, -1));
    if (b[2].defined()) y = y + b.aligned(2, 2);
    Shape out = x.shape();
    out.back() = y.size(-1);
    return y.reshape(out);
  }
};

// Checks shared by the public entry points; `op` names the function the user called.
void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  ADJOINT_CHECK(a.defined() && b.defined(), Value, op, "got an undefined tensor");
}

DType common_dtype(const Tensor& a, const Tensor& b, const char* op) {
  DType dt = promote_types(a.dtype(), b.dtype());
  ADJOINT_CHECK(dt != DType::Bool, DType, op, "bool operands are not supported: lhs ", describe(a),
                " vs rhs ", describe(b));
  return dt;
}

Tensor dot_impl(const Tensor& a, const Tensor& b, const char* op) {
  ADJOINT_CHECK(a.dim() == 1 && b.dim() == 1, Shape, op, "expected two 1-d tensors: lhs ",
                describe(a), " vs rhs ", describe(b));
  ADJOINT_CHECK(a.shape()[0] == b.shape()[0], Shape, op, "sizes differ: lhs ", describe(a),
                " vs rhs ", describe(b));
  (void)common_dtype(a, b, op);  // (its error names the function called)
  return apply(Dot{}, a, b);
}

Shape drop_last(const Shape& s, std::size_t n) {
  Shape r = s;
  r.resize(s.size() - n);
  return r;
}

bool broadcastable(const Shape& a, const Shape& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 1; i <= n; ++i) {
    const int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  check_operands(a_in, b_in, "matmul");
  ADJOINT_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, Shape, "matmul",
                "both operands need at least 1 dimension: lhs ", describe(a_in), " vs rhs ",
                describe(b_in));
  if (a_in.dim() == 1 && b_in.dim() == 1) return dot_impl(a_in, b_in, "matmul");
  const int64_t k_a = a_in.shape().back();
  const int64_t k_b = b_in.dim() == 1 ? b_in.shape()[0] : b_in.shape()[b_in.dim() - 2];
  ADJOINT_CHECK(k_a == k_b, Shape, "matmul", "inner dimensions differ: lhs ", describe(a_in),
                " vs rhs ", describe(b_in));
  const DType dt = common_dtype(a_in, b_in, "matmul");  // (MatMul promotes: Note [Products...])
  Tensor a = a_in, b = b_in;
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  if (a_vec) a = a.unsqueeze(0);   // [k] -> [1, k]
  if (b_vec) b = b.unsqueeze(-1);  // [k] -> [k, 1]
  Tensor out;
  if (a.dim() == 2 && b.dim() == 2) {
    out = apply(MatMul{}, a, b);
  } else if (b.dim() == 2 && a.is_contiguous()) {
    // [..., m, k] @ [k, n]: fold the batch into the rows, one gemm (and one for each VJP).
    Shape out_shape = a.shape();
    out_shape.back() = b.shape()[1];
    out = apply(MatMul{}, to_matrix(a), b).reshape(out_shape);
  } else {
    Shape batch_a = drop_last(a.shape(), 2), batch_b = drop_last(b.shape(), 2);
    ADJOINT_CHECK(broadcastable(batch_a, batch_b), Shape, "matmul",
                  "batch dimensions do not broadcast: lhs ", describe(a_in), " vs rhs ",
                  describe(b_in));
    Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
    Shape sa = batch, sb = batch;
    sa.push_back(a.shape()[a.dim() - 2]);
    sa.push_back(k_a);
    sb.push_back(k_a);
    sb.push_back(b.shape().back());
    // An operand that broadcasts is promoted before it is expanded, so that its gradient is
    // summed over the broadcast dims in the product's dtype, not after a cast back to its own.
    auto expanded = [dt](const Tensor& x, const Shape& shape) {
      return x.shape() == shape ? x : cast_to(x, dt).expand(shape);
    };
    out = apply(MatMul{}, expanded(a, sa), expanded(b, sb));
  }
  if (a_vec) out = out.squeeze(-2);
  if (b_vec) out = out.squeeze(-1);
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  check_operands(x_in, w_in, "linear");
  ADJOINT_CHECK(x_in.dim() >= 1, Shape, "linear", "input needs at least 1 dimension: input ",
                describe(x_in), " vs weight ", describe(w_in));
  ADJOINT_CHECK(w_in.dim() == 2, Shape, "linear", "weight must be 2-d [out, in]: input ",
                describe(x_in), " vs weight ", describe(w_in));
  ADJOINT_CHECK(x_in.shape().back() == w_in.shape()[1], Shape, "linear",
                "in features differ: input ", describe(x_in), " vs weight ", describe(w_in));
  (void)common_dtype(x_in, w_in, "linear");  // (Linear promotes: Note [Products promote...])
  if (b_in.defined())
    ADJOINT_CHECK(b_in.dim() == 1 && b_in.shape()[0] == w_in.shape()[0], Shape, "linear",
                  "bias must have shape [", w_in.shape()[0], "]: bias ", describe(b_in),
                  " vs weight ", describe(w_in));
  return apply(Linear{}, x_in, w_in, b_in);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "dot");
  return dot_impl(a, b, "dot");
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "outer");
  ADJOINT_CHECK(a.dim() == 1 && b.dim() == 1, Shape, "outer", "expected two 1-d tensors: lhs ",
                describe(a), " vs rhs ", describe(b));
  // outer(a, b)_ij = a_i b_j: a broadcast multiply, whose VJP sums back over the other factor.
  return a.unsqueeze(1) * b;
}

Tensor Tensor::matmul(const Tensor& other) const { return adjoint::matmul(*this, other); }
Tensor Tensor::dot(const Tensor& other) const { return adjoint::dot(*this, other); }
Tensor Tensor::outer(const Tensor& other) const { return adjoint::outer(*this, other); }

}  // namespace adjoint

ADJOINT_OPS_FILE(linalg)
