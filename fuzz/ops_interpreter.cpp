// The interpreter of fuzz_ops' programs: one case per Op of ops_program.h, each a call of the
// public API on values picked from the program's argument bytes; see ops_interpreter.h.
#include "ops_interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_util.h"
#include "ops_program.h"
#include "ops_values.h"

namespace adjoint::fuzz {
namespace {

constexpr std::size_t kMaxValues = 96;  // slots a program may fill

// What one run of a program sees and makes.
struct Machine {
  std::vector<Tensor> values;  // inputs first, then each op's results
  Generator gen{1234};         // dropout and random factories: the same draws on a rerun
  // Whether the program runs inside checkpoint(), either this run or the run it is compared
  // with: ops that do not belong inside one are left out of both.
  bool checkpoint_mode = false;
  bool create_graph = false;
  int errors = 0;
  RunInfo info;
  std::vector<Tensor> inputs;

  // Operands: mostly recent values.
  const Tensor& pick(uint8_t b) const {
    const std::size_t n = values.size();
    return values[n - 1 - (b % n)];
  }
  void push(Tensor t) {
    if (!t.defined() || values.size() >= kMaxValues) return;
    // A value beyond 1e8 puts the forward-and-reverse check out of its depth: x / x is exactly
    // 1 with an exactly zero tangent, but its gradient g / x - g x / x^2 keeps a rounding of
    // g / x, which later large factors can lift past the check's tolerance (a finding of 6e-9
    // against 0, from values near 1e16 and 1e10).
    if (info.linear_ok && t.is_floating_point() && t.numel() > 0 && t.numel() <= 65536) {
      NoGradGuard no_grad;
      double largest = 0;
      run_expecting_errors(
          [&] { largest = t.detach().to(DType::Float64).abs().max().item<double>(); });
      if (largest > 1e8) info.linear_ok = false;  // (infinities too; NaN compares false)
    }
    values.push_back(std::move(t));
  }
};

void run_op(Machine& m, const uint8_t* instr) {
  if (trace()) {
    const uint8_t* b = instr;
    std::fprintf(stderr, "  %-14s %3d %3d %3d %3d %3d   x = %s\n", kOpNames[b[0] % kNumOps], b[1],
                 b[2], b[3], b[4], b[5], brief(m.pick(b[1])).c_str());
  }
  ByteReader r(instr, kInstrBytes);
  const uint8_t op = r.u8() % kNumOps;
  const uint8_t a0 = r.u8(), a1 = r.u8(), a2 = r.u8(), a3 = r.u8(), a4 = r.u8();
  // Copies (cheap handles): push() may move the values.
  const Tensor x = m.pick(a0);
  const Tensor y = m.pick(a1);
  if (x.dtype() == DType::Float32) m.info.float32 = true;
  switch (op) {
    case kDetach:
    case kRequiresGrad:
    case kHook:
    case kGradMode:
    case kInplaceScalar:
    case kInplaceTensor:
    case kInplaceClamp:
      // Detached values lose their tangent but not (for reverse mode) their place; a hook
      // scales one side only; in place on an input changes what the tangents belong to.
      if (op < kInplaceScalar || op > kInplaceClamp) {
        m.info.linear_ok = false;
      } else {
        for (const Tensor& in : m.inputs)
          if (in.shares_storage(x)) m.info.linear_ok = false;
      }
      break;
    default:
      break;
  }
  // Bool tensors through the unary kernels (abs, square, relu, sign, clamp_, and the scalar
  // arithmetic that shares them: x + true, add_(true)): a known heap overflow.
  if (avoid("bool-unary") && x.dtype() == DType::Bool &&
      ((op <= kPowScalarBase && op != kLogicalNot) || op == kScalarArith))
    return;
  // int64 arithmetic overflows in the kernels (reported): no op on int64 values past 2^31,
  // whose products and sums stay in range, and no int64 prod.
  if (avoid("int-extremes") &&
      (int_too_big(x) || int_too_big(y) || (op == kProd && x.dtype() == DType::Int64)))
    return;
  // Means over no elements scale by 1 / 0 = inf through a Scalar: the known UB cast.
  if (avoid("scalar-cast") && x.numel() == 0 &&
      (op == kMean || op == kVar || op == kStd || op == kMseLoss || op == kCrossEntropy ||
       op == kNllLoss || op == kBceWithLogits || op == kLayerNorm))
    return;
  switch (op) {
    case kNeg:
      return m.push(neg(x));
    case kExp:
      return m.push(exp(x));
    case kLog:
      return m.push(log(x));
    case kLog1p:
      return m.push(log1p(x));
    case kExpm1:
      return m.push(expm1(x));
    case kSqrt:
      return m.push(sqrt(x));
    case kRsqrt:
      return m.push(rsqrt(x));
    case kAbs:
      if (known_bool_kernel_bug(x)) return;  // bool through abs/square/relu/sign: known
      return m.push(abs(x));
    case kSign:
      if (known_bool_kernel_bug(x)) return;
      return m.push(sign(x));
    case kSin:
      return m.push(sin(x));
    case kCos:
      return m.push(cos(x));
    case kTan:
      return m.push(tan(x));
    case kTanh:
      return m.push(tanh(x));
    case kErf:
      return m.push(erf(x));
    case kSigmoid:
      return m.push(sigmoid(x));
    case kRelu:
      if (known_bool_kernel_bug(x)) return;
      return m.push(relu(x));
    case kSilu:
      return m.push(silu(x));
    case kSquare:
      if (known_bool_kernel_bug(x)) return;
      return m.push(square(x));
    case kLogicalNot:
      return m.push(logical_not(x));
    case kLeakyRelu:
      return m.push(leaky_relu(x, pick_double(a1)));
    case kGelu:
      return m.push(gelu(x, a1 & 1 ? GeluApproximation::Tanh : GeluApproximation::None));
    case kSoftplus:
      return m.push(softplus(x, pick_double(a1), pick_double(a2)));
    case kClamp: {
      std::optional<double> lo, hi;
      // Bounds are cast to the tensor's type: inf, NaN or huge into int64 is the known UB cast.
      if (!(a3 & 0x80)) lo = pick_double(a1);
      if (!(a3 & 0x40)) hi = pick_double(a2);
      if (known_bool_kernel_bug(x)) return;
      return m.push(clamp(x, lo, hi));
    }
    case kPowScalar:
      if (avoid("int-pow") && !x.is_floating_point()) return;  // integer overflow (reported)
      return m.push(pow(x, pick_scalar(a1)));
    case kPowScalarBase:
      // d/dx b^x = log(b) b^x: log(0) = -inf through a Scalar, the known UB cast.
      if (avoid("scalar-cast") && !(pick_scalar(a1).to_double() > 0)) return;
      return m.push(pow(pick_scalar(a1), x));
    case kTo:
      // NaN, inf and out-of-range floats to int64: an undefined cast (reported).
      if (avoid("float-to-int") && x.is_floating_point() && pick_dtype(a1) == DType::Int64) return;
      return m.push(x.to(pick_dtype(a1)));
    case kContiguous:
      return m.push(x.contiguous());
    case kClone:
      return m.push(x.clone());
    case kDetach:
      return m.push(x.detach());

    case kAdd:
    case kSub: {
      const Scalar alpha = a2 & 0x80 ? pick_scalar(a3) : Scalar(1);
      // add(int, int, alpha = a double): a known internal assert.
      if (avoid("int-alpha-assert") && alpha.is_floating() && !x.is_floating_point() &&
          !y.is_floating_point())
        return;
      return m.push(op == kAdd ? add(x, y, alpha) : sub(x, y, alpha));
    }
    case kMul:
      return m.push(x * y);
    case kDiv:
      return m.push(x / y);
    case kMinimum:
      return m.push(minimum(x, y));
    case kMaximum:
      return m.push(maximum(x, y));
    case kPow:
      // Integer pow overflows through a double-to-int64 cast (reported).
      if (avoid("int-pow") && !x.is_floating_point() && !y.is_floating_point()) return;
      return m.push(pow(x, y));
    case kCompare: {
      switch (a2 % 6) {
        case 0:
          return m.push(eq(x, y));
        case 1:
          return m.push(ne(x, y));
        case 2:
          return m.push(lt(x, y));
        case 3:
          return m.push(le(x, y));
        case 4:
          return m.push(gt(x, y));
        default:
          return m.push(ge(x, y));
      }
    }
    case kLogical:
      return m.push(a2 & 1 ? logical_or(x, y) : logical_and(x, y));
    case kWhere: {
      const Tensor c = m.pick(a2);
      const Tensor cond = c.dtype() == DType::Bool ? c : fresh_bool(x.shape(), a3, a4);
      if (a3 & 0x80) return m.push(where(cond, x, pick_scalar(a4)));
      return m.push(where(cond, x, y));
    }
    case kBinaryFresh: {
      const Tensor f = fresh_like(x.shape(), a3 & 0x80 ? x.dtype() : pick_dtype(a3), a2, a4);
      switch (a1 % 6) {
        case 0:
          return m.push(a3 & 1 ? f + x : x + f);
        case 1:
          return m.push(a3 & 1 ? f - x : x - f);
        case 2:
          return m.push(a3 & 1 ? f * x : x * f);
        case 3:
          return m.push(a3 & 1 ? f / x : x / f);
        case 4:
          return m.push(minimum(x, f));
        default:
          return m.push(maximum(f, x));
      }
    }
    case kScalarArith: {
      const Scalar s = pick_scalar(a2);
      // x / 0 and x / 1e-30 become x * inf, x * 1e30: a Scalar past int64, the known UB cast.
      if (avoid("scalar-cast") && a1 % 8 == 3 && !(std::fabs(s.to_double()) > 1e-18)) return;
      switch (a1 % 8) {
        case 0:
          return m.push(x + s);
        case 1:
          return m.push(x - s);
        case 2:
          return m.push(x * s);
        case 3:
          return m.push(x / s);
        case 4:
          return m.push(s + x);
        case 5:
          return m.push(s - x);
        case 6:
          return m.push(s * x);
        default:
          return m.push(s / x);
      }
    }
    case kCompareScalar: {
      const Scalar s = pick_scalar(a2);
      switch (a1 % 6) {
        case 0:
          return m.push(eq(x, s));
        case 1:
          return m.push(ne(x, s));
        case 2:
          return m.push(lt(x, s));
        case 3:
          return m.push(le(x, s));
        case 4:
          return m.push(gt(x, s));
        default:
          return m.push(ge(x, s));
      }
    }

    case kSum:
      return m.push(sum(x, pick_dims(a1), a2 & 1));
    case kMean:
      return m.push(mean(x, pick_dims(a1), a2 & 1));
    case kVar:
    case kStd: {
      // A correction >= the count divides by 0: Scalar(inf), the known UB cast.
      const int64_t correction = avoid("scalar-cast") ? 0 : (a2 >> 1) % 3;
      return m.push(op == kVar ? var(x, pick_dims(a1), correction, a2 & 1)
                               : adjoint::std(x, pick_dims(a1), correction, a2 & 1));
    }
    case kProd:
      return m.push(prod(x, pick_dims(a1), a2 & 1));
    case kMaxAll:
      return m.push(adjoint::max(x));
    case kMinAll:
      return m.push(adjoint::min(x));
    case kMaxDim:
    case kMinDim: {
      auto [v, i] = op == kMaxDim ? adjoint::max(x, pick_dim(a1), a2 & 1)
                                  : adjoint::min(x, pick_dim(a1), a2 & 1);
      m.push(i);
      return m.push(v);
    }
    case kAmax:
      return m.push(amax(x, pick_dims(a1), a2 & 1));
    case kAmin:
      return m.push(amin(x, pick_dims(a1), a2 & 1));
    case kLogsumexp:
      if (avoid("scalar-cast")) return;  // Scalar(-inf) inside logsumexp: a known UB cast
      return m.push(logsumexp(x, pick_dims(a1), a2 & 1));
    case kNorm: {
      // p = 1e-30 makes 1 / p = 1e30 a Scalar: the known UB cast.
      constexpr double kSafeP[4] = {1, 3, 0.5, 2};
      double p = a3 & 1 ? kDoubles[a3 >> 3] : 2.0;
      if (avoid("scalar-cast")) p = kSafeP[(a3 >> 3) & 3];
      return m.push(norm(x, p, pick_dims(a1), a2 & 1));
    }
    case kArgmax:
    case kArgmin: {
      std::optional<int64_t> dim;
      if (a2 & 2) dim = pick_dim(a1);
      return m.push(op == kArgmax ? argmax(x, dim, a2 & 1) : argmin(x, dim, a2 & 1));
    }

    case kMatmul:
      return m.push(matmul(x, y));
    case kMatmulFresh: {
      const int64_t k = x.dim() == 0 ? 1 : x.size(-1);
      Shape ws = a1 & 0x80 ? Shape{k} : Shape{k, static_cast<int64_t>(a1 % 4)};
      if ((a1 & 0x40) && x.dim() > 2) ws.insert(0, x.size(0));  // batched
      const Tensor w = make_values(ws, a3 & 0x80 ? x.dtype() : pick_dtype(a3), 1, a2);
      return m.push(a3 & 1 ? matmul(w.dim() > 1 ? w.transpose(-1, -2) : w, x) : matmul(x, w));
    }
    case kLinear: {
      const int64_t in = x.dim() == 0 ? 1 : x.size(-1);
      const int64_t out = a1 % 4;
      const Tensor w = make_values(Shape{out, in}, x.dtype(), 1, a3);
      const Tensor b = a2 & 1 ? make_values(Shape{out}, x.dtype(), 1, a4) : Tensor();
      return m.push(linear(x, w, b));
    }
    case kDot:
      return m.push(dot(x, y));
    case kOuter:
      return m.push(outer(x, y));

    case kReshape:
      return m.push(reshape(x, pick_shape(x, a1, a2)));
    case kView:
      return m.push(view(x, pick_shape(x, a1, a2)));
    case kPermute: {
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < x.dim(); ++i) dims.push_back(i);
      if (a1 & 1) std::reverse(dims.begin(), dims.end());
      if ((a1 & 2) && dims.size() > 1) std::rotate(dims.begin(), dims.begin() + 1, dims.end());
      if (a1 & 4) dims.push_back(pick_dim(a2));               // too many dims
      if ((a1 & 8) && !dims.empty()) dims[0] = pick_dim(a2);  // repeated or negative
      return m.push(permute(x, dims));
    }
    case kTranspose:
      return m.push(transpose(x, pick_dim(a1), pick_dim(a2)));
    case kT:
      return m.push(x.t());
    case kSlice: {
      std::optional<int64_t> start, end;
      if (a2 & 0x80) start = static_cast<int64_t>(a2 % 9) - 4;
      if (a3 & 0x80) end = static_cast<int64_t>(a3 % 9) - 4;
      return m.push(slice(x, pick_dim(a1), start, end, static_cast<int64_t>(a4 % 4)));
    }
    case kSelect:
      return m.push(select(x, pick_dim(a1), static_cast<int64_t>(a2 % 9) - 4));
    case kNarrow:
      return m.push(narrow(x, pick_dim(a1), static_cast<int64_t>(a2 % 7) - 2,
                           static_cast<int64_t>(a3 % 5) - 1));
    case kExpand:
      return m.push(a3 & 1 ? x.expand_as(y) : expand(x, pick_shape(x, a1, a2)));
    case kSqueeze:
      return m.push(a1 & 1 ? squeeze(x) : squeeze(x, pick_dim(a2)));
    case kUnsqueeze:
      return m.push(unsqueeze(x, pick_dim(a1)));
    case kFlatten:
      return m.push(flatten(x, pick_dim(a1), pick_dim(a2)));
    case kCat:
    case kStack: {
      std::vector<Tensor> ts = {x, a3 & 1 ? y : x.clone()};
      if (a3 & 2) ts.push_back(m.pick(a4));
      return m.push(op == kCat ? cat(ts, pick_dim(a2)) : stack(ts, pick_dim(a2)));
    }
    case kSplit:
    case kChunk: {
      std::vector<Tensor> parts;
      if (op == kChunk) {
        parts = chunk(x, static_cast<int64_t>(a1 % 5) - 1, pick_dim(a2));
      } else if (a3 & 1) {
        parts = split(x, std::vector<int64_t>{a1 % 3, a4 % 3}, pick_dim(a2));
      } else {
        parts = split(x, static_cast<int64_t>(a1 % 4) - 1, pick_dim(a2));
      }
      for (std::size_t i = 0; i < parts.size() && i < 2; ++i)
        m.push(parts[(a4 + i) % parts.size()]);
      return;
    }
    case kSumTo: {
      Shape s = x.shape();
      if ((a1 & 1) && !s.empty()) s.erase(0);
      for (std::size_t i = 0; i < s.size(); ++i)
        if ((a2 >> i) & 1) s[i] = 1;
      if (a1 & 2) s = pick_shape(x, a3, a4);
      return m.push(sum_to(x, s));
    }

    case kIndexSelect: {
      const int64_t dim = pick_dim(a1);
      const Tensor idx = y.dtype() == DType::Int64 && (a4 & 1)
                             ? y
                             : fresh_index(Shape{a2 % 4}, size_at(x, dim), a3);
      return m.push(index_select(x, dim, idx));
    }
    case kGather: {
      const int64_t dim = pick_dim(a1);
      Shape s = x.shape();
      if (!s.empty() && (a2 & 1)) s[(a2 >> 1) % s.size()] = std::min<int64_t>(1, s[0]);
      return m.push(gather(x, dim, fresh_index(s, size_at(x, dim), a3)));
    }
    case kScatterAdd: {
      const int64_t dim = pick_dim(a1);
      const Tensor idx = fresh_index(x.shape(), size_at(x, dim), a3);
      const Tensor src = a2 & 1 ? y : make_values(x.shape(), x.dtype(), 1, a4);
      return m.push(scatter_add(x, dim, idx, src));
    }
    case kIndexAdd: {
      const int64_t dim = pick_dim(a1);
      const int64_t k = a2 % 4;
      const Tensor idx = fresh_index(Shape{k}, size_at(x, dim), a3);
      Shape s = x.shape();
      if (!s.empty()) s[((dim % x.dim()) + x.dim()) % x.dim()] = k;
      const Tensor src = make_values(s, x.dtype(), 1, a4);
      // A 0-d input with several indices reads past a 0-d source (reported).
      if (avoid("index-add-0d") && x.dim() == 0) return;
      return m.push(index_add(x, dim, idx, src));
    }
    case kMaskedFill: {
      const Tensor mask = y.dtype() == DType::Bool && (a4 & 1) ? y : fresh_bool(x.shape(), a2, a3);
      const Scalar v = pick_scalar(a1);
      // masked_fill with a non-finite value (-inf) and NaN into integer tensors: known bugs.
      if (avoid("scalar-cast") && (!scalar_cast_ok(v.to_double()))) return;
      return m.push(masked_fill(x, mask, v));
    }
    case kEmbedding: {
      const int64_t rows = x.dim() == 0 ? 1 : x.size(0);
      const Tensor idx =
          y.dtype() == DType::Int64 && (a4 & 1) ? y : fresh_index(Shape{a2 % 3, a1 % 3}, rows, a3);
      return m.push(embedding(x, idx));
    }
    case kOneHot:
      return m.push(one_hot(x.dtype() == DType::Int64 ? x : fresh_index(Shape{a2 % 4}, 4, a3),
                            static_cast<int64_t>(a1 % 6) - 1));
    case kTril:
      return m.push(tril(x, static_cast<int64_t>(a1 % 7) - 3));
    case kTriu:
      return m.push(triu(x, static_cast<int64_t>(a1 % 7) - 3));

    case kSoftmax:
      return m.push(softmax(x, pick_dim(a1)));
    case kLogSoftmax:
      return m.push(log_softmax(x, pick_dim(a1)));
    case kMaskedSoftmax:
      // Not along the last dim it fills -inf through a Scalar: a known UB cast.
      if (avoid("scalar-cast") &&
          (x.dim() == 0 || (pick_dim(a1) != -1 && pick_dim(a1) != x.dim() - 1)))
        return;
      return m.push(masked_softmax(x, fresh_bool(x.shape(), a2, a3), pick_dim(a1)));
    case kCrossEntropy:
    case kNllLoss: {
      const int64_t n = x.dim() == 0 ? 0 : x.size(0);
      const int64_t c = x.dim() >= 2 ? x.size(1) : (x.dim() == 1 ? x.size(0) : 1);
      Tensor target = fresh_index(x.dim() >= 2 ? Shape{n} : Shape{}, c, a3);
      if (a2 & 0x10) target = target.masked_fill(fresh_bool(target.shape(), 0, a4), -100);
      if (a2 & 0x20) target = y;
      const auto red = static_cast<Reduction>(a2 % 3);
      int64_t ignore = a2 & 0x40 ? 0 : -100;
      // A mean over targets that are all ignored is 0 * NaN with NaN as a Scalar: the known
      // UB cast.
      if (avoid("scalar-cast") && red == Reduction::Mean) {
        if (a2 & 0x30) return;
        ignore = -100;
      }
      return m.push(op == kCrossEntropy ? cross_entropy(x, target, red, ignore)
                                        : nll_loss(x, target, red, ignore));
    }
    case kMseLoss:
    case kBceWithLogits: {
      const Tensor t = a3 & 1 ? y : make_values(x.shape(), x.dtype(), op == kMseLoss ? 1 : 3, a4);
      const auto red = static_cast<Reduction>(a2 % 3);
      return m.push(op == kMseLoss ? mse_loss(x, t, red)
                                   : binary_cross_entropy_with_logits(x, t.clamp(0, 1), red));
    }
    case kLayerNorm: {
      Shape ns;
      const int64_t k = a1 % 3;
      for (int64_t i = std::max<int64_t>(0, x.dim() - k); i < x.dim(); ++i) ns.push_back(x.size(i));
      if (a1 & 0x80) ns = pick_shape(x, a3, a4);
      // layer_norm over an empty normalized shape: a known bug in its backward.
      if (avoid("layer-norm-empty") && (ns.empty() || ns.numel() == 0)) return;
      const Tensor w = a2 & 1 ? make_values(ns, x.dtype(), 1, a3) : Tensor();
      const Tensor b = a2 & 2 ? make_values(ns, x.dtype(), 1, a4) : Tensor();
      const double eps = a2 & 4 ? pick_double(a2 >> 3) : 1e-5;
      return m.push(layer_norm(x, ns, w, b, eps));
    }
    case kDropout:
      return m.push(dropout(x, a1 & 0x80 ? pick_double(a1) : (a1 % 5) * 0.25, a2 & 1, &m.gen));

    case kInplaceScalar:
    case kInplaceTensor:
    case kInplaceClamp: {
      // On the value itself (a leaf that requires grad must refuse), a clone, or a view of
      // either; then both the base and the view go on being used.
      Tensor base = a1 & 0x80 ? x.clone() : x;
      Tensor v = view_of(base, a1);
      // add_/sub_/mul_/div_(Scalar) on bool run the unary kernels: the known bool overflow.
      if (avoid("bool-unary") && op == kInplaceScalar && v.dtype() == DType::Bool && a2 % 6 < 4)
        return;
      if (op == kInplaceScalar) {
        const Scalar s = pick_scalar(a3);
        const bool int_target = !v.is_floating_point();
        switch (a2 % 6) {
          case 0:
            v.add_(s);
            break;
          case 1:
            v.sub_(s);
            break;
          case 2:
            v.mul_(s);
            break;
          case 3:
            // div_ by zero, and NaN or inf into integer tensors: known bugs.
            if (avoid("scalar-cast") && (!(std::fabs(s.to_double()) > 1e-18) || int_target)) return;
            v.div_(s);
            break;
          case 4:
            if (avoid("nan-fill-int") && int_target && !scalar_cast_ok(s.to_double())) return;
            v.fill_(s);
            break;
          default:
            v.zero_();
            break;
        }
      } else if (op == kInplaceTensor) {
        const Tensor o = m.pick(a3);
        switch (a2 % 5) {
          case 0:
          case 1: {
            const Scalar alpha = a4 & 0x80 ? pick_scalar(a4) : Scalar(1);
            if (avoid("int-alpha-assert") && alpha.is_floating() && !v.is_floating_point() &&
                !o.is_floating_point())
              return;
            a2 % 5 == 0 ? v.add_(o, alpha) : v.sub_(o, alpha);
            break;
          }
          case 2:
            v.mul_(o);
            break;
          case 3:
            if (avoid("nan-fill-int") && !v.is_floating_point()) return;  // div_ into ints: known
            v.div_(o);
            break;
          default:
            // Floats into int64 (NaN, inf, huge): an undefined cast (reported).
            if (avoid("float-to-int") && o.is_floating_point() && v.dtype() == DType::Int64) return;
            v.copy_(o);
            break;
        }
      } else {
        if (known_bool_kernel_bug(v)) return;  // clamp_ on bool: known
        std::optional<double> lo, hi;
        if (a4 & 1) lo = pick_double(a2);
        if (a4 & 2) hi = pick_double(a3);
        v.clamp_(lo, hi);
      }
      m.push(base);
      return m.push(v);
    }

    case kFactory: {
      const DType dt = pick_dtype(a3);
      const int64_t n = a2 % 5;
      switch (a1 % 10) {
        case 0:
          return m.push(zeros(Shape{n, a4 % 3}, dt));
        case 1:
          return m.push(ones(Shape{n}, dt));
        case 2: {
          const Scalar v = pick_scalar(a4);
          if (avoid("nan-fill-int") && !is_floating(dt) && !scalar_cast_ok(v.to_double())) return;
          return m.push(full(Shape{n}, v, dt));  // NaN into int64: known
        }
        case 3:
          return m.push(arange(static_cast<int64_t>(a2 % 7) - 1, dt));
        case 4:
          // A tiny step or an infinite range: an undefined cast of its length (reported).
          if (avoid("arange-length")) return;
          {
            const double start = pick_double(a4) / 4, end = pick_double(a2),
                         step = pick_double(a3 >> 2);
            // A long but valid range (0 to 1e9: 4 GB) is a real allocation, not a finding, and
            // would trip libFuzzer's 2 GB limit. Lengths the library must refuse (infinite, NaN,
            // past int64) or cannot allocate (past 1e12 elements: a named OutOfMemory) still go
            // through.
            const double length = (end - start) / step;
            if (std::isfinite(length) && length > 1e7 && length < 1e12) return;
            return m.push(arange(start, end, step));
          }
        case 5:
          return m.push(linspace(-1, 1, static_cast<int64_t>(a2 % 6) - 1, dt));
        case 6:
          return m.push(eye(n, a4 & 1 ? std::optional<int64_t>(a4 % 4) : std::nullopt, dt));
        case 7:
          return m.push(rand(Shape{n, 2}, dt, &m.gen));
        case 8:
          return m.push(randn(Shape{n}, dt, &m.gen));
        default:
          return m.push(randint(static_cast<int64_t>(a4 % 5) - 2, a2 % 4, Shape{n}, &m.gen));
      }
    }
    case kRequiresGrad: {
      // A new leaf inside checkpoint is not the same leaf on the rerun; with create_graph, its
      // .grad would hold a graph holding it (the cycle PyTorch documents), which the end of
      // reverse() only breaks for the inputs.
      if (m.checkpoint_mode || m.create_graph) return;
      Tensor t = x;
      t.requires_grad_(a1 & 1);
      return;
    }
    case kRetainGrad:
      // With create_graph, a retained .grad of a non-leaf can hold the graph that holds the
      // tensor: a reference cycle (as in PyTorch) that LeakSanitizer would report.
      if (m.create_graph) return;
      x.retain_grad();
      return;
    case kHook: {
      // A hook registered inside checkpoint() is registered again by the recomputation.
      if (m.checkpoint_mode || !x.requires_grad()) return;
      const bool twice = a1 & 1;
      x.register_hook([twice](const Tensor& g) { return twice ? g * 2 : Tensor(); });
      return;
    }
    case kMidBackward: {
      if (m.checkpoint_mode) return;  // backward inside checkpoint's forward: not a use
      if (!x.requires_grad()) return;
      // Freeing the graph here makes the final backward throw: with create_graph, the leak
      // of a throwing backward (reported).
      sum(x).backward({}, (a1 & 1) || (m.create_graph && avoid("backward-throw-leak")));
      return;
    }
    case kItem:
      if (x.numel() == 1) {
        (void)x.item<double>();
        // double -> int64 of NaN / inf: an undefined cast (reported).
        if (!avoid("float-to-int") || !x.is_floating_point()) (void)x.item<int64_t>();
      }
      (void)x.to_vector<float>();
      return;
    case kPrint: {
      std::ostringstream os;
      os << x << describe(x);
      if (auto fn = x.grad_fn()) os << fn->name();
      return;
    }
    case kGradMode:
      set_grad_enabled(!is_grad_enabled());
      return;
    default:
      return;
  }
}

}  // namespace

Program parse(const uint8_t* data, std::size_t size) {
  ByteReader r(data, size);
  Program p;
  p.mode = r.u8();
  // A backward with create_graph that throws midway leaks (reported); under a DualLevel some
  // programs make it throw.
  if (avoid("backward-throw-leak") && (p.mode & kModeDual)) p.mode &= ~kModeDoubleBackward;
  const uint8_t out = r.u8();
  p.outputs = 1 + (out & 3) % 3;
  p.use_grad_fn = out & kOutputsAutogradGrad;
  p.compiled = out & kOutputsCompile;
  p.run = (out >> 4) == kRunNoGrad ? 1 : (out >> 4) == kRunInference ? 2 : 0;
  const int n = 1 + r.u8() % 4;
  for (int i = 0; i < n; ++i) {
    Program::Input in;
    const uint8_t b0 = r.u8();
    in.dtype = pick_dtype(b0);
    in.requires_grad = b0 & 4;
    in.style = (b0 >> 3) & 3;
    const int ndim = (b0 >> 5) % 5;
    const uint16_t sizes = r.u16();
    for (int d = 0; d < ndim; ++d) in.shape.push_back(pick_size((sizes >> (4 * d)) & 15));
    in.seed = r.u8();
    p.inputs.push_back(std::move(in));
  }
  const std::size_t used = std::min(size, r.consumed());
  p.ops = data + used;
  p.num_ops = std::min(kMaxOps, (size - used) / kInstrBytes);
  return p;
}

std::vector<Tensor> make_inputs(const Program& p) {
  std::vector<Tensor> xs;
  if (trace())
    std::fprintf(stderr, "program: mode 0x%02x, %d outputs%s, run %d\n", p.mode, p.outputs,
                 p.use_grad_fn ? " (autograd::grad)" : "", p.run);
  for (const auto& in : p.inputs) {
    Tensor t;
    run_expecting_errors([&] {
      t = make_values(in.shape, in.dtype, in.style, in.seed);
      if (in.requires_grad) t.requires_grad_();  // an integer tensor must refuse
    });
    if (!t.defined()) t = scalar_tensor(1.0);
    if (trace()) std::fprintf(stderr, "  input %zu: %s\n", xs.size(), brief(t).c_str());
    xs.push_back(t);
  }
  return xs;
}

std::vector<Tensor> interpret(const Program& p, const std::vector<Tensor>& inputs, RunInfo* info) {
  Machine m;
  m.values = inputs;
  m.inputs = inputs;
  m.checkpoint_mode = p.mode & kModeCheckpoint;
  m.create_graph = p.mode & kModeDoubleBackward;
  const bool grad_mode = is_grad_enabled();
  for (std::size_t i = 0; i < p.num_ops; ++i) {
    const std::size_t before = m.values.size();
    if (!run_expecting_errors([&] { run_op(m, p.ops + i * kInstrBytes); })) {
      ++m.errors;
    } else if (trace() && m.values.size() > before) {
      std::fprintf(stderr, "    -> %s\n", brief(m.values.back()).c_str());
    }
  }
  set_grad_enabled(grad_mode);
  if (info) *info = m.info;
  std::vector<Tensor> outs;
  for (int i = 0; i < p.outputs; ++i)
    outs.push_back(m.values[m.values.size() - 1 - (i % m.values.size())]);
  return outs;
}

}  // namespace adjoint::fuzz
