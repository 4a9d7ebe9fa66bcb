// The strided loop every elementwise kernel runs on. Operands are described by a data pointer
// and per-dim strides in bytes over a common shape (broadcast dims have stride 0). Adjacent
// dims that are contiguous for every operand are merged first, so contiguous tensors become
// one flat loop that the compiler vectorises; the innermost dim is handed to the kernel as a
// (pointers, strides, count) triple.
#pragma once

#include <array>
#include <cstdint>

#include "adjoint/error.h"
#include "adjoint/shape.h"
#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "core/parallel.h"

namespace adjoint::kernels {

// Note [Kernel element types]
// A kernel reads and writes a tensor's bytes as some C++ type T. If T is not the tensor's
// dtype, a write runs past the end of the buffer (int64 into bool is 8 bytes per 1-byte
// element) or a read misinterprets it. operand_data<T> is the one door through which the
// elementwise kernels reach data: it checks the dtype once per operand and call (a compare,
// not per element), so a kernel that computes in the wrong type (an op that let a dtype
// through unchecked) throws an internal error before a byte is written.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_operand_dtype(DType kernel,
                                                                       const Tensor& t) {
  detail::throw_internal(
      __FILE__, __LINE__,
      detail::str("kernel element type ", kernel, " does not match the tensor ", describe(t)));
}

template <class T>
char* operand_data(const Tensor& t) {
  const TensorImpl& impl = *t.impl();
  if (impl.dtype != dtype_of_v<T>) [[unlikely]]
    throw_operand_dtype(dtype_of_v<T>, t);
  return static_cast<char*>(impl.data());
}

template <std::size_t N>
struct Operands {
  std::array<char*, N> data;
  std::array<Shape, N> strides;  // bytes
};

/// Byte strides of `t` viewed at `shape` (broadcasting: missing or size-1 dims get stride 0).
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const TensorImpl& impl = *t.impl();
  Shape out(shape.size(), 0);
  std::size_t lead = shape.size() - impl.shape.size();
  int64_t item = static_cast<int64_t>(itemsize(impl.dtype));
  for (std::size_t i = 0; i < impl.shape.size(); ++i)
    out[lead + i] = impl.shape[i] == 1 ? 0 : impl.strides[i] * item;
  return out;
}

/// Drops size-1 dims, then merges dim i into the previous one wherever every operand steps
/// over the pair as over one dim.
template <std::size_t N>
void coalesce(Shape& shape, std::array<Shape, N>& strides) {
  Shape s;
  std::array<Shape, N> st;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool merge = !s.empty();
    for (std::size_t k = 0; k < N && merge; ++k) merge = st[k].back() == strides[k][i] * shape[i];
    if (merge) {
      s.back() *= shape[i];
      for (std::size_t k = 0; k < N; ++k) st[k].back() = strides[k][i];
    } else {
      s.push_back(shape[i]);
      for (std::size_t k = 0; k < N; ++k) st[k].push_back(strides[k][i]);
    }
  }
  shape = std::move(s);
  strides = std::move(st);
}

/// Runs inner(ptrs, inner_strides, count) over every innermost row of `shape`, splitting the
/// rows (or, for a single row, the elements) across threads in fixed chunks.
template <std::size_t N, class Inner>
void strided_loop(Shape shape, Operands<N> ops, Inner&& inner) {
  int64_t numel = shape.numel();
  if (numel == 0) return;
  coalesce(shape, ops.strides);
  if (shape.empty()) {
    std::array<int64_t, N> zero{};
    inner(ops.data, zero, int64_t{1});
    return;
  }
  const std::size_t nd = shape.size();
  const int64_t cols = shape[nd - 1];
  const int64_t rows = numel / cols;
  std::array<int64_t, N> inner_strides;
  for (std::size_t k = 0; k < N; ++k) inner_strides[k] = ops.strides[k][nd - 1];
  constexpr int64_t kGrain = 262144;  // elements per thread below which threading costs more
                                      // (see kFlatGrain in elementwise.cpp)

  if (rows == 1) {
    parallel_for(cols, kGrain, [&](int64_t begin, int64_t end) {
      std::array<char*, N> p;
      for (std::size_t k = 0; k < N; ++k) p[k] = ops.data[k] + begin * inner_strides[k];
      inner(p, inner_strides, end - begin);
    });
    return;
  }
  parallel_for(rows, std::max<int64_t>(kGrain / cols, 1), [&](int64_t begin, int64_t end) {
    // Position of row `begin` in the outer dims.
    Shape idx(nd - 1, 0);
    int64_t r = begin;
    for (std::size_t d = nd - 1; d-- > 0;) {
      idx[d] = r % shape[d];
      r /= shape[d];
    }
    std::array<char*, N> p;
    for (std::size_t k = 0; k < N; ++k) {
      p[k] = ops.data[k];
      for (std::size_t d = 0; d + 1 < nd; ++d) p[k] += idx[d] * ops.strides[k][d];
    }
    for (int64_t row = begin; row < end; ++row) {
      inner(p, inner_strides, cols);
      // Advance the outer index like an odometer.
      for (std::size_t d = nd - 1; d-- > 0;) {
        for (std::size_t k = 0; k < N; ++k) p[k] += ops.strides[k][d];
        if (++idx[d] < shape[d]) break;
        for (std::size_t k = 0; k < N; ++k) p[k] -= idx[d] * ops.strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace adjoint::kernels
