// The reference convolution: direct loops over every output (forward), every input element's
// contributions (backward-data) and every weight (backward-weights), summed in double. It is
// the oracle the oneDNN path is tested against (tests/ops/conv_kernels_test.cpp), the path of
// float64 and float16, and of every dtype when oneDNN is not built. Each output element is
// written by one thread (the pool splits output rows), so results do not depend on timing.
#include <vector>

#include "backend/cpu/conv_paths.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels::conv {
namespace {

Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// Input position of output position o and kernel tap k along dim i (outside when < 0 or >= in).
inline int64_t input_pos(const Problem& p, int i, int64_t o, int64_t k) {
  return o * p.stride[i] - p.pad_l[i] + k * p.dilation[i];
}

Shape output_shape(const Problem& p, int64_t channels, const std::array<int64_t, 3>& sp) {
  Shape s{p.n, channels};
  for (int i = 3 - p.spatial; i < 3; ++i) s.push_back(sp[i]);
  return s;
}

// Visits every (output position, kernel tap, input position) of one channel pair with the
// input position in range: f(out_offset, kernel_offset, in_offset) within one spatial volume.
template <class F>
void for_each_tap(const Problem& p, F&& f) {
  for (int64_t od = 0; od < p.out[0]; ++od)
    for (int64_t kd = 0; kd < p.k[0]; ++kd) {
      const int64_t id = input_pos(p, 0, od, kd);
      if (id < 0 || id >= p.in[0]) continue;
      for (int64_t oh = 0; oh < p.out[1]; ++oh)
        for (int64_t kh = 0; kh < p.k[1]; ++kh) {
          const int64_t ih = input_pos(p, 1, oh, kh);
          if (ih < 0 || ih >= p.in[1]) continue;
          for (int64_t ow = 0; ow < p.out[2]; ++ow)
            for (int64_t kw = 0; kw < p.k[2]; ++kw) {
              const int64_t iw = input_pos(p, 2, ow, kw);
              if (iw < 0 || iw >= p.in[2]) continue;
              f((od * p.out[1] + oh) * p.out[2] + ow, (kd * p.k[1] + kh) * p.k[2] + kw,
                (id * p.in[1] + ih) * p.in[2] + iw);
            }
        }
    }
}

int64_t volume(const std::array<int64_t, 3>& a) { return a[0] * a[1] * a[2]; }

}  // namespace

Tensor reference_forward(const Problem& p, const Tensor& x_in, const Tensor& w_in,
                         const Tensor& b_in) {
  Tensor y = make_empty(output_shape(p, p.o, p.out), x_in.dtype());
  if (y.numel() == 0) return y;
  const Tensor x = dense(x_in), w = dense(w_in), b = b_in.defined() ? dense(b_in) : Tensor();
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  const int64_t in_vol = volume(p.in), out_vol = volume(p.out), k_vol = volume(p.k);
  dispatch_opmath_floating(x.dtype(), "conv", [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    const T* ws = w.data_ptr<T>();
    const T* bs = b.defined() ? b.data_ptr<T>() : nullptr;
    T* ys = y.data_ptr<T>();
    parallel_for(p.n * p.o, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<std::size_t>(out_vol));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / p.o, o = r % p.o, g = o / og;
        std::fill(acc.begin(), acc.end(), bs ? static_cast<double>(bs[o]) : 0.0);
        for (int64_t ic = 0; ic < cg; ++ic) {
          const T* xc = xs + (n * p.c + g * cg + ic) * in_vol;
          const T* wc = ws + (o * cg + ic) * k_vol;
          for_each_tap(p, [&](int64_t oi, int64_t ki, int64_t ii) {
            acc[oi] += static_cast<double>(xc[ii]) * static_cast<double>(wc[ki]);
          });
        }
        T* yr = ys + r * out_vol;
        for (int64_t i = 0; i < out_vol; ++i) yr[i] = static_cast<T>(acc[i]);
      }
    });
  });
  return y;
}

Tensor reference_backward_data(const Problem& p, const Tensor& gy_in, const Tensor& w_in) {
  Tensor gx = make_empty(output_shape(p, p.c, p.in), gy_in.dtype());
  if (gx.numel() == 0) return gx;
  const Tensor gy = dense(gy_in), w = dense(w_in);
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  const int64_t in_vol = volume(p.in), out_vol = volume(p.out), k_vol = volume(p.k);
  dispatch_opmath_floating(gy.dtype(), "conv_backward_data", [&]<class T>() {
    const T* gys = gy.data_ptr<T>();
    const T* ws = w.data_ptr<T>();
    T* gxs = gx.data_ptr<T>();
    parallel_for(p.n * p.c, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<std::size_t>(in_vol));
      for (int64_t r = r0; r < r1; ++r) {  // one (sample, input channel) plane per row
        const int64_t n = r / p.c, c = r % p.c, g = c / cg, ic = c % cg;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t oc = 0; oc < og; ++oc) {
          const int64_t o = g * og + oc;
          const T* gyc = gys + (n * p.o + o) * out_vol;
          const T* wc = ws + (o * cg + ic) * k_vol;
          for_each_tap(p, [&](int64_t oi, int64_t ki, int64_t ii) {
            acc[ii] += static_cast<double>(gyc[oi]) * static_cast<double>(wc[ki]);
          });
        }
        T* gxr = gxs + r * in_vol;
        for (int64_t i = 0; i < in_vol; ++i) gxr[i] = static_cast<T>(acc[i]);
      }
    });
  });
  return gx;
}

Tensor reference_backward_weight(const Problem& p, const Tensor& x_in, const Tensor& gy_in) {
  Shape ws_shape{p.o, p.c / p.groups};
  for (int i = 3 - p.spatial; i < 3; ++i) ws_shape.push_back(p.k[i]);
  Tensor gw = make_empty(ws_shape, x_in.dtype());
  if (gw.numel() == 0) return gw;
  const Tensor x = dense(x_in), gy = dense(gy_in);
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  const int64_t in_vol = volume(p.in), out_vol = volume(p.out), k_vol = volume(p.k);
  dispatch_opmath_floating(x.dtype(), "conv_backward_weight", [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    const T* gys = gy.data_ptr<T>();
    T* gws = gw.data_ptr<T>();
    parallel_for(p.o * cg, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<std::size_t>(k_vol));
      for (int64_t r = r0; r < r1; ++r) {  // one (output channel, input channel) kernel per row
        const int64_t o = r / cg, ic = r % cg, g = o / og;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = 0; n < p.n; ++n) {
          const T* xc = xs + (n * p.c + g * cg + ic) * in_vol;
          const T* gyc = gys + (n * p.o + o) * out_vol;
          for_each_tap(p, [&](int64_t oi, int64_t ki, int64_t ii) {
            acc[ki] += static_cast<double>(gyc[oi]) * static_cast<double>(xc[ii]);
          });
        }
        T* gwr = gws + r * k_vol;
        for (int64_t i = 0; i < k_vol; ++i) gwr[i] = static_cast<T>(acc[i]);
      }
    });
  });
  return gw;
}

}  // namespace adjoint::kernels::conv
