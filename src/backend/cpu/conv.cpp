// conv_kernels.h's entry points: the problem's sizes, and the choice between oneDNN's
// primitives and the reference loops. float32 runs on oneDNN when it is built, bfloat16 too
// where oneDNN has an ISA for it (float32 accumulation inside the primitive); float64, float16
// and everything without oneDNN run the reference loops (16-bit inputs widened to float32 and
// the result rounded once, Note [Reduced-precision kernels]).
#include "adjoint/error.h"
#include "backend/conv_kernels.h"
#include "backend/cpu/conv_paths.h"
#include "backend/cpu/opmath.h"
#include "backend/device_kernels.h"

namespace adjoint::kernels {

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad_l, int64_t pad_r,
                         int64_t dilation) {
  const int64_t span = in + pad_l + pad_r - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

namespace conv {

Problem make_problem(const Shape& input, const Shape& weight, const ConvGeometry& g) {
  Problem p;
  p.spatial = static_cast<int>(g.stride.size());
  ADJOINT_ASSERT(p.spatial >= 1 && p.spatial <= 3 && input.size() == g.stride.size() + 2 &&
                     weight.size() == input.size(),
                 "convolution ranks disagree");
  p.n = input[0];
  p.c = input[1];
  p.o = weight[0];
  p.groups = g.groups;
  const int lead = 3 - p.spatial;
  for (int i = 0; i < p.spatial; ++i) {
    const int j = lead + i;
    p.in[j] = input[2 + i];
    p.k[j] = weight[2 + i];
    p.stride[j] = g.stride[i];
    p.pad_l[j] = g.pad_l[i];
    p.pad_r[j] = g.pad_r[i];
    p.dilation[j] = g.dilation[i];
    p.out[j] =
        conv_output_size(p.in[j], p.k[j], p.stride[j], p.pad_l[j], p.pad_r[j], p.dilation[j]);
  }
  return p;
}

}  // namespace conv

namespace {

bool fits_onednn(const conv::Problem& p) {
#ifdef ADJOINT_HAVE_ONEDNN
  return conv::onednn_fits(p);
#else
  (void)p;
  return false;
#endif
}

// ConvPath::OneDnn on a problem oneDNN does not take (an empty dim, a negative right padding)
// runs the reference loops: the result is the same either way.
bool use_onednn(DType dtype, ConvPath path, const conv::Problem& p) {
  if (path == ConvPath::Reference || !fits_onednn(p)) return false;
  const bool ok = conv_onednn_supports(dtype);
  ADJOINT_ASSERT(ok || path != ConvPath::OneDnn,
                 "oneDNN convolution asked for an unsupported dtype");
  return ok;
}

// Runs `onednn` or `reference` on the inputs, 16-bit ones widened where oneDNN does not take
// them, and the result in the inputs' dtype.
template <class OneDnn, class Reference>
Tensor run(const conv::Problem& p, DType dtype, ConvPath path, OneDnn&& onednn,
           Reference&& reference, std::initializer_list<Tensor> inputs) {
  std::vector<Tensor> in(inputs);
  if (use_onednn(dtype, path, p)) return onednn(in);
  if (is_reduced_float(dtype)) {
    for (Tensor& t : in) t = t.defined() ? widen(t) : t;
    if (path == ConvPath::Auto && fits_onednn(p) && conv_onednn_supports(DType::Float32))
      return narrow_to(onednn(in), dtype);
    return narrow_to(reference(in), dtype);
  }
  return reference(in);
}

}  // namespace

bool conv_onednn_supports(DType dtype) {
#ifdef ADJOINT_HAVE_ONEDNN
  return conv::onednn_supports(dtype);
#else
  (void)dtype;
  return false;
#endif
}

const char* conv_path_name(DType dtype) {
#ifdef ADJOINT_HAVE_ONEDNN
  if (conv::onednn_supports(dtype)) return conv::onednn_name();
#endif
  (void)dtype;
  return "reference";
}

#ifdef ADJOINT_HAVE_ONEDNN
#define ADJOINT_CONV_ONEDNN(call) [&](const std::vector<Tensor>& t) { return call; }
#else
#define ADJOINT_CONV_ONEDNN(call) \
  [&](const std::vector<Tensor>& t) -> Tensor { ADJOINT_ASSERT(false, "no oneDNN"); }
#endif

Tensor cpu::conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                         const ConvGeometry& g, ConvPath path) {
  const conv::Problem p = conv::make_problem(x.shape(), w.shape(), g);
  return run(
      p, x.dtype(), path, ADJOINT_CONV_ONEDNN(conv::onednn_forward(p, t[0], t[1], t[2])),
      [&](const std::vector<Tensor>& t) { return conv::reference_forward(p, t[0], t[1], t[2]); },
      {x, w, bias});
}

Tensor cpu::conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g,
                               const Shape& input_shape, ConvPath path) {
  const conv::Problem p = conv::make_problem(input_shape, w.shape(), g);
  return run(
      p, gy.dtype(), path, ADJOINT_CONV_ONEDNN(conv::onednn_backward_data(p, t[0], t[1])),
      [&](const std::vector<Tensor>& t) { return conv::reference_backward_data(p, t[0], t[1]); },
      {gy, w});
}

Tensor cpu::conv_backward_weight(const Tensor& x, const Tensor& gy, const ConvGeometry& g,
                                 const Shape& weight_shape, ConvPath path) {
  const conv::Problem p = conv::make_problem(x.shape(), weight_shape, g);
  return run(
      p, x.dtype(), path, ADJOINT_CONV_ONEDNN(conv::onednn_backward_weight(p, t[0], t[1])),
      [&](const std::vector<Tensor>& t) { return conv::reference_backward_weight(p, t[0], t[1]); },
      {x, gy});
}

}  // namespace adjoint::kernels
