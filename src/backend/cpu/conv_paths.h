// What conv.cpp (the dispatch of conv_kernels.h) shares with the two paths behind it: the
// geometry seen as three spatial dims (a 1-d or 2-d convolution is a 3-d one with leading dims
// of size one), the direct reference loops and the oneDNN primitives. Inputs reach the paths
// in one floating dtype, with shapes already checked by the ops layer.
#pragma once

#include <array>
#include <cstdint>

#include "adjoint/tensor.h"
#include "backend/conv_kernels.h"

namespace adjoint::kernels::conv {

/// A convolution's sizes over three spatial dims (the missing leading ones of size 1, stride
/// and dilation 1, no padding).
struct Problem {
  int64_t n = 0, c = 0, o = 0, groups = 1;  // batch, input and output channels, groups
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1}, pad_l{0, 0, 0}, pad_r{0, 0, 0}, dilation{1, 1, 1};
  int spatial = 0;  // 1, 2 or 3: how many of the dims the tensors have
};

/// The problem of input shape [N, C, *in], weight shape [O, C/g, *k] and geometry g.
Problem make_problem(const Shape& input, const Shape& weight, const ConvGeometry& g);

// The reference loops (float32 and float64 tensors, contiguous or not; double accumulation).
Tensor reference_forward(const Problem& p, const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor reference_backward_data(const Problem& p, const Tensor& gy, const Tensor& w);
Tensor reference_backward_weight(const Problem& p, const Tensor& x, const Tensor& gy);

#ifdef ADJOINT_HAVE_ONEDNN
// The oneDNN primitives (float32 or bfloat16 tensors; outputs of the inputs' dtype).
bool onednn_supports(DType dtype);
/// Whether oneDNN takes the problem (no negative right padding, no empty dim).
bool onednn_fits(const Problem& p);
const char* onednn_name();
Tensor onednn_forward(const Problem& p, const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor onednn_backward_data(const Problem& p, const Tensor& gy, const Tensor& w);
Tensor onednn_backward_weight(const Problem& p, const Tensor& x, const Tensor& gy);
#endif

}  // namespace adjoint::kernels::conv
