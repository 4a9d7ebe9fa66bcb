// CPU fused nn kernels: softmax cross-entropy from logits and layer norm forward (see
// backend/nn_kernels.h). Rows run in parallel, each row reduced by one thread in a fixed order
// with double accumulators, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adjoint/error.h"
#include "backend/kernels.h"
#include "backend/nn_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

int64_t grain_for(int64_t row_len) {
  return std::max<int64_t>(32768 / std::max<int64_t>(row_len, 1), 1);
}

}  // namespace

void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index,
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

CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor& target,
                                  int64_t ignore_index) {
  const char* op = "cross_entropy";
  ADJOINT_ASSERT(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0));
  const int64_t rows = logits.size(0), classes = logits.size(1);
  check_class_targets(target, classes, ignore_index, op);
  const Tensor x = contiguous_of(logits);
  const Tensor t = contiguous_of(target);
  CrossEntropyForward out;
  out.loss = make_empty({rows}, logits.dtype());
  out.lse = make_empty({rows}, logits.dtype());
  const int64_t* ts = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows; ++i) out.valid += ts[i] != ignore_index;
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    T* loss = out.loss.data_ptr<T>();
    T* lse = out.lse.data_ptr<T>();
    parallel_for(rows, grain_for(classes), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* xr = xs + i * classes;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < classes; ++j)
          if (xr[j] > m || xr[j] != xr[j]) m = xr[j];
        double sum = 0;
        for (int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(xr[j] - m));
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

LayerNormForward layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                            const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  ADJOINT_ASSERT(normalized_dims >= 1 && normalized_dims <= x.dim());
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
  dispatch_floating(x.dtype(), op, [&]<class T>() {
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
        double s = 0;
        for (int64_t j = 0; j < cols; ++j) s += xr[j];
        const double mu = s / static_cast<double>(cols);
        double ss = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double dv = static_cast<double>(xr[j]) - mu;
          ss += dv * dv;
        }
        const double rs = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
        means[r] = static_cast<T>(mu);
        rstds[r] = static_cast<T>(rs);
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

}  // namespace adjoint::kernels
