// Channels-last memory format: a dense [N, C, *sp] tensor whose channels are innermost (PyTorch's
// channels_last and channels_last_3d), as the convolutions and batch norm keep it. A test of the
// strides, the strides themselves and a fresh tensor in that layout; no op here, and no other
// layout (plain contiguous is TensorImpl's own).
#pragma once

#include <cstddef>
#include <cstdint>

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "core/tensor_factory.h"

namespace adjoint {

/// Whether t [N, C, *sp] (3 or more dims) is dense with C innermost and is not also contiguous:
/// a single channel, or a tensor whose layouts coincide ([N, C, 1, 1]), answers false, so that
/// callers keep their plain path for it.
inline bool is_channels_last(const Tensor& t) {
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  if (s.size() < 3 || s[1] <= 1 || t.is_contiguous()) return false;
  if (st[1] != 1) return false;
  int64_t expect = s[1];
  for (std::size_t d = s.size() - 1; d >= 2; --d) {
    if (s[d] != 1 && st[d] != expect) return false;
    expect *= s[d];
  }
  return s[0] == 1 || st[0] == expect;
}

/// Element strides of a dense [N, C, *sp] tensor with C innermost: [C prod(sp), 1, ..., C].
inline Shape channels_last_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = shape[1];
  st[1] = 1;
  for (std::size_t d = shape.size() - 1; d >= 2; --d) {
    st[d] = s;
    s *= shape[d];
  }
  st[0] = s;
  return st;
}

/// A fresh tensor of `shape` (3 or more dims) laid out channels-last: its own storage, not a view.
inline Tensor empty_channels_last(const Shape& shape, DType dtype) {
  Tensor t = make_empty(shape, dtype);
  t.impl()->strides = channels_last_strides(shape);
  t.impl()->refresh();
  return t;
}

}  // namespace adjoint
