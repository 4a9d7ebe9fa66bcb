// CPU fused nn kernels: softmax cross-entropy from logits and layer norm, forward and input
// gradient (see backend/nn_kernels.h). Rows run in parallel, each row reduced by one thread
// in a fixed order with double accumulators, so results do not depend on the thread count.
// Exponentials use the SIMD exp of simd_math.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/row_math.h"
#include "backend/cpu/simd_math.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "backend/nn_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// sum((x - mu)^2) over [0, n) in double, with four partial sums as sum_double (row_math.h).
template <class T>
double sum_sq_dev(const T* x, int64_t n, double mu) {
  double s[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) {
      const double d = static_cast<double>(x[j + k]) - mu;
      s[k] += d * d;
    }
  for (; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - mu;
    s[0] += d * d;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

int64_t grain_for(int64_t row_len) {
  return std::max<int64_t>(32768 / std::max<int64_t>(row_len, 1), 1);
}

}  // namespace

void cpu::check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index,
                              const char* op) {
  ADJOINT_CHECK(target.dtype() == DType::Int64, DType, op,
                "expected int64 class indices as target, got ", describe(target));
  const Tensor t = contiguous_of(target);
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = p[i];
    ADJOINT_CHECK(v == ignore_index || (v >= 0 && v < classes), Index, op, "target ", v,
                  " (at position ", i, ") is out of range for ", classes, " classes (expected [0, ",
                  classes - 1, "] or ignore_index ", ignore_index, ")");
  }
}

CrossEntropyForward cpu::cross_entropy(const Tensor& logits, const Tensor& target,
                                       int64_t ignore_index) {
  const char* op = "cross_entropy";
  ADJOINT_ASSERT(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0));
  const int64_t rows = logits.size(0), classes = logits.size(1);
  check_class_targets(target, classes, ignore_index, op);
  if (is_reduced(logits)) {  // See Note [Reduced-precision kernels]
    CrossEntropyForward wide = cross_entropy(widen(logits), target, ignore_index);
    wide.loss = narrow_to(wide.loss, logits.dtype());
    wide.lse = narrow_to(wide.lse, logits.dtype());
    return wide;
  }
  const Tensor x = contiguous_of(logits);
  const Tensor t = contiguous_of(target);
  CrossEntropyForward out;
  out.loss = make_empty({rows}, logits.dtype());
  out.lse = make_empty({rows}, logits.dtype());
  const int64_t* ts = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows; ++i) out.valid += ts[i] != ignore_index;
  dispatch_opmath_floating(logits.dtype(), op, [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    T* loss = out.loss.data_ptr<T>();
    T* lse = out.lse.data_ptr<T>();
    parallel_for(rows, grain_for(classes), [&](int64_t begin, int64_t end) {
      std::vector<T> e(static_cast<std::size_t>(classes));  // the row's exp(x - m)
      for (int64_t i = begin; i < end; ++i) {
        const T* xr = xs + i * classes;
        const T m = simd_max(xr, classes);  // NaN if the row has one
        simd_exp_shifted(xr, m, e.data(), classes);
        const double sum = sum_double(e.data(), classes);
        // log sum exp(x - m): the row's lse is m + log(sum); the loss subtracts x[t] - m
        const double log_sum = std::log(sum);
        lse[i] = static_cast<T>(static_cast<double>(m) + log_sum);
        loss[i] = ts[i] == ignore_index
                      ? T(0)
                      : static_cast<T>(log_sum - static_cast<double>(xr[ts[i]] - m));
      }
    });
  });
  return out;
}

Tensor cpu::cross_entropy_backward(const Tensor& g_in, const Tensor& logits, const Tensor& target,
                                   int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  ADJOINT_ASSERT(logits.dim() == 2 && target.dim() == 1 && g_in.dim() == 1 &&
                 target.size(0) == logits.size(0) && g_in.size(0) == logits.size(0) &&
                 g_in.dtype() == logits.dtype());
  if (is_reduced(logits))  // See Note [Reduced-precision kernels]
    return narrow_to(cross_entropy_backward(widen(g_in), widen(logits), target, ignore_index),
                     logits.dtype());
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const Tensor x = contiguous_of(logits);
  const Tensor t = contiguous_of(target);
  const Tensor g = contiguous_of(g_in);
  Tensor out = make_empty(logits.shape(), logits.dtype());
  if (out.numel() == 0) return out;
  const int64_t* ts = t.data_ptr<int64_t>();
  dispatch_opmath_floating(logits.dtype(), op, [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    const T* gs = g.data_ptr<T>();
    T* os = out.data_ptr<T>();
    parallel_for(rows, grain_for(classes), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* xr = xs + i * classes;
        T* o = os + i * classes;
        if (ts[i] == ignore_index) {
          std::fill(o, o + classes, T(0));
          continue;
        }
        // (exp(x - m) / sum) g - g [j == target]
        const T m = simd_max(xr, classes);
        simd_exp_shifted(xr, m, o, classes);
        const double scale = static_cast<double>(gs[i]) / sum_double(o, classes);
        for (int64_t j = 0; j < classes; ++j) o[j] = static_cast<T>(o[j] * scale);
        o[ts[i]] -= gs[i];
      }
    });
  });
  return out;
}

LayerNormForward cpu::layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  ADJOINT_ASSERT(normalized_dims >= 1 && normalized_dims <= x.dim());
  if (is_reduced(x)) {  // See Note [Reduced-precision kernels]
    LayerNormForward wide = layer_norm(widen(x), normalized_dims, widen(weight), widen(bias), eps);
    return {narrow_to(wide.y, x.dtype()), narrow_to(wide.mean, x.dtype()),
            narrow_to(wide.rstd, x.dtype())};
  }
  const int64_t lead = x.dim() - normalized_dims;
  int64_t cols = 1;
  Shape stat_shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      stat_shape.push_back(x.shape()[i]);
    } else {
      stat_shape.push_back(1);
      cols *= x.shape()[i];
    }
  }
  const int64_t rows = stat_shape.numel();
  const Tensor xc = contiguous_of(x);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_of(bias) : Tensor();
  LayerNormForward out;
  out.y = make_empty(x.shape(), x.dtype());
  out.mean = make_empty(stat_shape, x.dtype());
  out.rstd = make_empty(stat_shape, x.dtype());
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bs = b.defined() ? b.data_ptr<T>() : nullptr;
    T* ys = out.y.data_ptr<T>();
    T* means = out.mean.data_ptr<T>();
    T* rstds = out.rstd.data_ptr<T>();
    parallel_for(rows, grain_for(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = xs + r * cols;
        T* yr = ys + r * cols;
        // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
        const double mu = sum_double(xr, cols) / static_cast<double>(cols);
        const double ss = sum_sq_dev(xr, cols, mu);
        const double rs = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
        means[r] = static_cast<T>(mu);
        rstds[r] = static_cast<T>(rs);
        if (ws && bs) {  // the affine case, without per-element branches
          for (int64_t j = 0; j < cols; ++j)
            yr[j] =
                static_cast<T>((static_cast<double>(xr[j]) - mu) * rs * static_cast<double>(ws[j]) +
                               static_cast<double>(bs[j]));
          continue;
        }
        for (int64_t j = 0; j < cols; ++j) {
          double v = (static_cast<double>(xr[j]) - mu) * rs;
          if (ws) v *= static_cast<double>(ws[j]);
          if (bs) v += static_cast<double>(bs[j]);
          yr[j] = static_cast<T>(v);
        }
      }
    });
  });
  return out;
}

Tensor cpu::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd, int64_t normalized_dims) {
  const char* op = "layer_norm_backward";
  ADJOINT_ASSERT(normalized_dims >= 1 && normalized_dims <= x.dim() && gy.shape() == x.shape());
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    (i < x.dim() - normalized_dims ? rows : cols) *= x.shape()[i];
  // A normalized shape of no elements (cols == 0) has an empty gradient: rows of mean and rstd
  // (NaN, 0 / 0) but nothing to write.
  ADJOINT_ASSERT(mean.numel() == rows && rstd.numel() == rows &&
                 (!weight.defined() || weight.numel() == cols));
  if (is_reduced(x) || is_reduced(gy))  // See Note [Reduced-precision kernels]
    return narrow_to(layer_norm_backward(widen(gy), widen(x), widen(weight), widen(mean),
                                         widen(rstd), normalized_dims),
                     x.dtype());
  Tensor out = make_empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Tensor gc = contiguous_of(gy), xc = contiguous_of(x), mc = contiguous_of(mean),
               rc = contiguous_of(rstd);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* gs = gc.data_ptr<T>();
    const T* xs = xc.data_ptr<T>();
    const T* ms = mc.data_ptr<T>();
    const T* rs = rc.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    T* os = out.data_ptr<T>();
    parallel_for(rows, grain_for(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* g = gs + r * cols;
        const T* xr = xs + r * cols;
        T* o = os + r * cols;
        const T mu = ms[r], a = rs[r];
        // A = sum(g) and B' = sum(g (x - mean)) with g = gy w, in double with four partial
        // sums each (B = mean(g x̂) = a B' / n)
        double sa[4] = {0, 0, 0, 0}, sb[4] = {0, 0, 0, 0};
        auto term = [&](int64_t j, int k) {
          const double gj = ws ? static_cast<double>(g[j] * ws[j]) : static_cast<double>(g[j]);
          sa[k] += gj;
          sb[k] += gj * static_cast<double>(xr[j] - mu);
        };
        int64_t j = 0;
        for (; j + 4 <= cols; j += 4)
          for (int k = 0; k < 4; ++k) term(j + k, k);
        for (; j < cols; ++j) term(j, 0);
        const double inv_n = 1.0 / static_cast<double>(cols);
        const double mean_g = ((sa[0] + sa[1]) + (sa[2] + sa[3])) * inv_n;
        const double mean_gx = ((sb[0] + sb[1]) + (sb[2] + sb[3])) * inv_n * a;
        // a (g - mean(g) - x̂ mean(g x̂)) = a (g - mean(g)) - (x - mean) a^2 mean(g x̂), in T
        const T am = static_cast<T>(a * mean_g), k2 = static_cast<T>(mean_gx * a * a);
        if (ws) {
          for (int64_t k = 0; k < cols; ++k) o[k] = a * (g[k] * ws[k]) - am - (xr[k] - mu) * k2;
        } else {
          for (int64_t k = 0; k < cols; ++k) o[k] = a * g[k] - am - (xr[k] - mu) * k2;
        }
      }
    });
  });
  return out;
}

}  // namespace adjoint::kernels
