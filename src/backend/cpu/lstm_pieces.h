// How lstm_sequence's kernels (forward and gradient) split each step's hidden units over the
// pool (Note [The LSTM sequence kernel] in lstm_sequence.cpp): fixed pieces of units, so that
// every result is the same whichever thread computes it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "adjoint/tensor.h"
#include "backend/device_kernels.h"
#include "core/parallel.h"

namespace adjoint::kernels::lstm {

struct Sizes {
  int64_t steps, batch, hidden;
};

/// The hidden units of piece p of `pieces` start at hidden p / pieces.
inline int64_t piece_start(int64_t hidden, int64_t p, int64_t pieces) {
  return hidden * p / pieces;
}

/// The number of pieces: about 64 K multiply-adds of a step's product per piece at least, and
/// at least 16 units, as parallel_for would split them.
inline int64_t piece_count(const Sizes& z) {
  const int64_t grain = std::max<int64_t>(16, 65536 / std::max<int64_t>(z.batch * 4 * z.hidden, 1));
  return std::max<int64_t>(parallel_chunks(z.hidden, grain), 1);
}

/// Runs piece(p) for every piece, on the pool when there are several.
template <class F>
void for_each_piece(int64_t pieces, F&& piece) {
  if (pieces == 1) return piece(int64_t{0});
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) piece(p);
  });
}

inline Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

}  // namespace adjoint::kernels::lstm
