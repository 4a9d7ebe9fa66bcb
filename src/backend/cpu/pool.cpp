// CPU pooling and im2col kernels (see backend/pool_kernels.h). Planes (every leading dim
// together) run in parallel with parallel_for's fixed partition; one thread computes a whole
// plane in a fixed order, so sums and scatters are deterministic. Max pooling's argmax and
// average pooling's forward vectorise the output positions whose windows lie inside the row
// (pool_simd.cpp), computing exactly what the scalar loops below compute for them (the tests
// hold both to a plain loop written from PyTorch's definitions, bit for bit); the border
// positions run the scalar loops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/pool_simd.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "backend/pool_kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// The product of x's dims before its trailing `spatial` dims.
int64_t planes_of(const Shape& s, int64_t spatial) {
  int64_t p = 1;
  for (std::size_t i = 0; i + static_cast<std::size_t>(spatial) < s.size(); ++i) p *= s[i];
  return p;
}

Shape with_spatial(const Shape& s, int64_t spatial, std::initializer_list<int64_t> tail) {
  Shape out(std::vector<int64_t>(s.begin(), s.end() - spatial));
  for (int64_t v : tail) out.push_back(v);
  return out;
}

// Planes per chunk: about 32K elements of work each.
int64_t plane_grain(int64_t per_plane) {
  return std::max<int64_t>(32768 / std::max<int64_t>(per_plane, 1), 1);
}

// The output columns [lo, hi) whose whole window lies in the row (start[ow] = ow * stride -
// pad, count[ow] = the full kernel): pool_simd.cpp computes those, the loops the rest.
struct Interior {
  int64_t lo = 0, hi = 0;
};
Interior interior_of(const PoolAxis& w, int64_t kernel) {
  Interior r;
  const int64_t n = w.out();
  while (r.lo < n && w.count[r.lo] != kernel) ++r.lo;
  r.hi = r.lo;
  while (r.hi < n && w.count[r.hi] == kernel) ++r.hi;
  return r;
}

// Runs narrower than the smallest vector (4 lanes) stay scalar: the rows' loops over window
// columns are then the inner ones, which is faster for wide windows (global pooling's).
constexpr int64_t kMinVectorRun = 4;

// The stride of the interior's starts (1 when it has one column; 0 when adaptive windows
// repeat a start, which the vectorised rows refuse: their lanes would meet).
int64_t interior_stride(const PoolAxis& w, Interior in) {
  return in.hi - in.lo >= 2 ? w.start[in.lo + 1] - w.start[in.lo] : 1;
}

// Whether every interior start is start[lo] + (ow - lo) * stride (true for the regular
// windows of max and avg pooling; adaptive windows may vary).
bool regular(const PoolAxis& w, Interior in, int64_t stride) {
  for (int64_t o = in.lo; o < in.hi; ++o)
    if (w.start[o] != w.start[in.lo] + (o - in.lo) * stride) return false;
  return true;
}

// Throws naming the first index outside [0, size): one branch-free pass (it vectorises), and a
// second only to name a bad one.
void check_plane_indices(const int64_t* ip, int64_t n, int64_t size, const Tensor& t,
                         const char* what, const char* op) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i)
    bad |= static_cast<uint64_t>(ip[i]) >= static_cast<uint64_t>(size);
  if (!bad) return;
  for (int64_t i = 0; i < n; ++i)
    ADJOINT_CHECK(ip[i] >= 0 && ip[i] < size, Index, op, "index ", ip[i],
                  " is out of range for a plane of ", size, " elements (", what, " ", describe(t),
                  ")");
}

template <class T>
void max_plane(const T* x, int64_t* out, const PoolWindows& win, int64_t lo, int64_t hi) {
  const PoolAxis &ah = win.h, &aw = win.w;
  const int64_t W = aw.in, OW = aw.out();
  for (int64_t oh = 0; oh < ah.out(); ++oh) {
    int64_t* orow = out + oh * OW;
    for (int64_t ow = 0; ow < OW; ++ow) {
      if (ow == lo && hi > lo) {  // the vectorised interior
        ow = hi - 1;
        continue;
      }
      T best = -std::numeric_limits<T>::infinity();
      int64_t bi = ah.start[oh] * W + aw.start[ow];
      for (int64_t a = 0; a < ah.count[oh]; ++a) {
        const int64_t h = ah.start[oh] + a * ah.step;
        for (int64_t b = 0; b < aw.count[ow]; ++b) {
          const int64_t i = h * W + aw.start[ow] + b * aw.step;
          const T v = x[i];
          const bool take = v > best || std::isnan(v);  // branch-free: random data mispredicts
          best = take ? v : best;
          bi = take ? i : bi;
        }
      }
      orow[ow] = bi;
    }
  }
}

template <class T>
void avg_plane(const T* x, T* out, const PoolWindows& win, int64_t lo, int64_t hi) {
  const PoolAxis &ah = win.h, &aw = win.w;
  const int64_t W = aw.in, OW = aw.out();
  for (int64_t oh = 0; oh < ah.out(); ++oh) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      if (ow == lo && hi > lo) {
        ow = hi - 1;
        continue;
      }
      T sum = 0;
      for (int64_t a = 0; a < ah.count[oh]; ++a) {
        const T* row = x + (ah.start[oh] + a) * W + aw.start[ow];
        for (int64_t b = 0; b < aw.count[ow]; ++b) sum += row[b];
      }
      out[oh * OW + ow] = static_cast<T>(sum / static_cast<T>(win.divisor(oh, ow)));
    }
  }
}

// Average pooling's transpose on one plane, output by output in row-major order (each output's
// value g / divisor added to its window). Columns [lo, hi) go through the vectorised row, which
// adds in the same order per element; `v` holds one output row's values.
template <class T>
void avg_backward_plane(const T* g, T* out, const PoolWindows& win, int64_t lo, int64_t hi,
                        int64_t stride, T* v) {
  const PoolAxis &ah = win.h, &aw = win.w;
  const int64_t W = aw.in, OW = aw.out();
  auto scalar = [&](int64_t oh, int64_t ow) {
    for (int64_t a = 0; a < ah.count[oh]; ++a) {
      T* row = out + (ah.start[oh] + a) * W + aw.start[ow];
      for (int64_t b = 0; b < aw.count[ow]; ++b) row[b] += v[ow];
    }
  };
  for (int64_t oh = 0; oh < ah.out(); ++oh) {
    for (int64_t ow = 0; ow < OW; ++ow)
      v[ow] = static_cast<T>(g[oh * OW + ow] / static_cast<T>(win.divisor(oh, ow)));
    for (int64_t ow = 0; ow < lo; ++ow) scalar(oh, ow);
    if (hi > lo)
      for (int64_t a = 0; a < ah.count[oh]; ++a)
        simd::avg_pool_backward_row(out + (ah.start[oh] + a) * W + aw.start[lo], stride,
                                    aw.count[lo], hi - lo, v + lo);
    for (int64_t ow = std::max(lo, hi); ow < OW; ++ow) scalar(oh, ow);
  }
}

}  // namespace

Tensor cpu::max_pool_indices(const Tensor& x_in, const PoolWindows& win) {
  const char* op = "max_pool";
  ADJOINT_ASSERT(x_in.dim() >= 2);
  const Tensor x = contiguous_of(widen(x_in));
  const int64_t P = planes_of(x.shape(), 2), H = win.h.in, W = win.w.in;
  const int64_t OH = win.h.out(), OW = win.w.out();
  ADJOINT_ASSERT(x.size(-2) == H && x.size(-1) == W);
  Tensor out = make_empty(with_spatial(x.shape(), 2, {OH, OW}), DType::Int64);
  if (out.numel() == 0) return out;
  // The vectorised interior: regular columns (max pooling's, with a dilated kernel too).
  const int64_t kernel =
      win.w.count.empty() ? 0 : *std::max_element(win.w.count.begin(), win.w.count.end());
  Interior in = interior_of(win.w, kernel);
  const int64_t stride = interior_stride(win.w, in);
  if (in.hi - in.lo < kMinVectorRun || stride < 1 || !regular(win.w, in, stride) ||
      H * W > (int64_t{1} << 31))
    in = {};
  int64_t* o = out.data_ptr<int64_t>();
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    parallel_for(P, plane_grain(OH * OW * kernel * win.h.count[0]), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = xs + p * H * W;
        int64_t* op_ = o + p * OH * OW;
        max_plane(xp, op_, win, in.lo, in.hi);
        if (in.hi > in.lo)
          for (int64_t oh = 0; oh < OH; ++oh)
            simd::max_pool_row(xp, W, win.h.start[oh], win.h.count[oh], win.h.step,
                               win.w.start[in.lo], stride, kernel, win.w.step, in.hi - in.lo,
                               op_ + oh * OW + in.lo);
      }
    });
  });
  return out;
}

Tensor cpu::avg_pool(const Tensor& x_in, const PoolWindows& win) {
  const char* op = "avg_pool";
  ADJOINT_ASSERT(x_in.dim() >= 2);
  const Tensor x = contiguous_of(widen(x_in));
  const int64_t P = planes_of(x.shape(), 2), H = win.h.in, W = win.w.in;
  const int64_t OH = win.h.out(), OW = win.w.out();
  Tensor out = make_empty(with_spatial(x.shape(), 2, {OH, OW}), x.dtype());
  if (out.numel() > 0) {
    const int64_t kernel = *std::max_element(win.w.count.begin(), win.w.count.end());
    Interior in = interior_of(win.w, kernel);
    const int64_t stride = interior_stride(win.w, in);
    // Interior columns share their w length, so a row's divisor is one number.
    if (in.hi - in.lo < kMinVectorRun || stride < 1 || !regular(win.w, in, stride) ||
        win.w.step != 1)
      in = {};
    for (int64_t ow = in.lo; ow < in.hi; ++ow)
      if (win.w.padded[ow] != kernel) in = {};
    dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
      const T* xs = x.data_ptr<T>();
      T* os = out.data_ptr<T>();
      parallel_for(P, plane_grain(OH * OW * kernel * win.h.count[0]), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const T* xp = xs + p * H * W;
          T* op_ = os + p * OH * OW;
          avg_plane(xp, op_, win, in.lo, in.hi);
          if (in.hi > in.lo)
            for (int64_t oh = 0; oh < OH; ++oh)
              simd::avg_pool_row(xp, W, win.h.start[oh], win.h.count[oh], win.w.start[in.lo],
                                 stride, kernel, in.hi - in.lo,
                                 static_cast<T>(win.divisor(oh, in.lo)), op_ + oh * OW + in.lo);
        }
      });
    });
  }
  return is_reduced(x_in) ? narrow_to(out, x_in.dtype()) : out;
}

Tensor cpu::avg_pool_backward(const Tensor& g_in, const PoolWindows& win) {
  const char* op = "avg_pool_backward";
  ADJOINT_ASSERT(g_in.dim() >= 2);
  const Tensor g = contiguous_of(widen(g_in));
  const int64_t P = planes_of(g.shape(), 2), H = win.h.in, W = win.w.in;
  const int64_t OH = win.h.out(), OW = win.w.out();
  ADJOINT_ASSERT(g.size(-2) == OH && g.size(-1) == OW);
  Tensor out = make_empty(with_spatial(g.shape(), 2, {H, W}), g.dtype());
  if (out.numel() > 0) {
    fill(out, 0);
    const int64_t kernel = *std::max_element(win.w.count.begin(), win.w.count.end());
    Interior in = interior_of(win.w, kernel);
    const int64_t stride = interior_stride(win.w, in);
    if (in.hi - in.lo < kMinVectorRun || stride < 1 || !regular(win.w, in, stride)) in = {};
    dispatch_opmath_floating(g.dtype(), op, [&]<class T>() {
      const T* gs = g.data_ptr<T>();
      T* os = out.data_ptr<T>();
      parallel_for(P, plane_grain(H * W + OH * OW * 4), [&](int64_t b, int64_t e) {
        std::vector<T> v(static_cast<std::size_t>(OW));
        for (int64_t p = b; p < e; ++p)
          avg_backward_plane(gs + p * OH * OW, os + p * H * W, win, in.lo, in.hi, stride, v.data());
      });
    });
  }
  return is_reduced(g_in) ? narrow_to(out, g_in.dtype()) : out;
}

Tensor cpu::pool_gather(const Tensor& x_in, const Tensor& index_in, int64_t spatial,
                        const char* op) {
  ADJOINT_CHECK(index_in.dtype() == DType::Int64, DType, op, "indices must be int64, got ",
                describe(index_in));
  const Tensor x = contiguous_of(x_in);
  const Tensor idx = contiguous_of(index_in);
  const int64_t P = planes_of(x.shape(), spatial);
  int64_t S_shape = 1;
  for (int64_t d = x.dim() - spatial; d < x.dim(); ++d) S_shape *= x.shape()[d];
  const int64_t K = P == 0 ? 0 : idx.numel() / P;
  Tensor out = make_empty(idx.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const int64_t* ip = idx.data_ptr<int64_t>();
  check_plane_indices(ip, idx.numel(), S_shape, x_in, "input", op);
  const std::size_t item = itemsize(x.dtype());
  const char* in = static_cast<const char*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  parallel_for(P, plane_grain(K), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const char* plane = in + p * S_shape * static_cast<int64_t>(item);
      char* orow = o + p * K * static_cast<int64_t>(item);
      const int64_t* irow = ip + p * K;
      switch (item) {
        case 8:
          for (int64_t k = 0; k < K; ++k)
            reinterpret_cast<uint64_t*>(orow)[k] =
                reinterpret_cast<const uint64_t*>(plane)[irow[k]];
          break;
        case 4:
          for (int64_t k = 0; k < K; ++k)
            reinterpret_cast<uint32_t*>(orow)[k] =
                reinterpret_cast<const uint32_t*>(plane)[irow[k]];
          break;
        default:
          for (int64_t k = 0; k < K; ++k)
            std::memcpy(orow + k * item, plane + irow[k] * static_cast<int64_t>(item), item);
      }
    }
  });
  return out;
}

Tensor cpu::pool_scatter(const Tensor& g_in, const Tensor& index_in, const Shape& plane,
                         const char* op) {
  ADJOINT_CHECK(index_in.dtype() == DType::Int64, DType, op, "indices must be int64, got ",
                describe(index_in));
  const Tensor g = contiguous_of(widen(g_in));
  const Tensor idx = contiguous_of(index_in);
  const auto spatial = static_cast<int64_t>(plane.size());
  const int64_t P = planes_of(g.shape(), spatial);
  const int64_t S = plane.numel();
  const int64_t K = P == 0 ? 0 : g.numel() / P;
  Shape out_shape(std::vector<int64_t>(g.shape().begin(), g.shape().end() - spatial));
  for (int64_t v : plane) out_shape.push_back(v);
  Tensor out = make_empty(out_shape, g.dtype());
  if (out.numel() > 0) fill(out, 0);
  if (out.numel() > 0 && g.numel() > 0) {
    const int64_t* ip = idx.data_ptr<int64_t>();
    check_plane_indices(ip, idx.numel(), S, g_in, "gradient", op);
    dispatch_opmath_floating(g.dtype(), op, [&]<class T>() {
      const T* gs = g.data_ptr<T>();
      T* os = out.data_ptr<T>();
      parallel_for(P, plane_grain(K), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          T* orow = os + p * S;
          const T* grow = gs + p * K;
          const int64_t* irow = ip + p * K;
          for (int64_t k = 0; k < K; ++k) orow[irow[k]] += grow[k];
        }
      });
    });
  }
  return is_reduced(g_in) ? narrow_to(out, g_in.dtype()) : out;
}

Tensor cpu::im2col(const Tensor& x_in, const Im2ColGeometry& geo) {
  const char* op = "unfold";
  ADJOINT_ASSERT(x_in.dim() == 4);
  const Tensor x = contiguous_of(x_in);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = geo.out_h(H), OW = geo.out_w(W), K = geo.kh * geo.kw;
  Tensor out = make_empty({N, C * K, OH * OW}, x.dtype());
  if (out.numel() == 0) return out;
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    T* os = out.data_ptr<T>();
    parallel_for(N * C, plane_grain(K * OH * OW), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = xs + p * H * W;
        for (int64_t i = 0; i < geo.kh; ++i)
          for (int64_t j = 0; j < geo.kw; ++j) {
            T* row = os + (p * K + i * geo.kw + j) * OH * OW;
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t h = oh * geo.sh - geo.ph + i * geo.dh;
              T* r = row + oh * OW;
              if (h < 0 || h >= H) {
                std::fill(r, r + OW, T(0));
                continue;
              }
              for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t w = ow * geo.sw - geo.pw + j * geo.dw;
                r[ow] = w >= 0 && w < W ? xp[h * W + w] : T(0);
              }
            }
          }
      }
    });
  });
  return out;
}

Tensor cpu::col2im(const Tensor& cols_in, const Im2ColGeometry& geo, int64_t H, int64_t W) {
  const char* op = "fold";
  ADJOINT_ASSERT(cols_in.dim() == 3);
  const Tensor cols = contiguous_of(widen(cols_in));
  const int64_t K = geo.kh * geo.kw;
  const int64_t N = cols.size(0), C = cols.size(1) / K;
  const int64_t OH = geo.out_h(H), OW = geo.out_w(W);
  ADJOINT_ASSERT(cols.size(2) == OH * OW);
  Tensor out = make_empty({N, C, H, W}, cols.dtype());
  if (out.numel() > 0) {
    fill(out, 0);
    dispatch_opmath_floating(cols.dtype(), op, [&]<class T>() {
      const T* cs = cols.data_ptr<T>();
      T* os = out.data_ptr<T>();
      parallel_for(N * C, plane_grain(K * OH * OW), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          T* op_ = os + p * H * W;
          for (int64_t i = 0; i < geo.kh; ++i)
            for (int64_t j = 0; j < geo.kw; ++j) {
              const T* row = cs + (p * K + i * geo.kw + j) * OH * OW;
              for (int64_t oh = 0; oh < OH; ++oh) {
                const int64_t h = oh * geo.sh - geo.ph + i * geo.dh;
                if (h < 0 || h >= H) continue;
                for (int64_t ow = 0; ow < OW; ++ow) {
                  const int64_t w = ow * geo.sw - geo.pw + j * geo.dw;
                  if (w >= 0 && w < W) op_[h * W + w] += row[oh * OW + ow];
                }
              }
            }
        }
      });
    });
  }
  return is_reduced(cols_in) ? narrow_to(out, cols_in.dtype()) : out;
}

}  // namespace adjoint::kernels
