// The forward-mode rule of the fused LSTM cell (src/ops/rnn_cell.cpp), shared with the
// whole-sequence op (src/ops/rnn_sequence.cpp), whose tangent is that of its steps.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint::detail {

/// The tangent [2, *, H] (h' then c') of lstm_cell_fused(gates, c) along t_gates [*, 4H] and
/// t_c [*, H], written with ops (so it differentiates again).
Tensor lstm_cell_tangent(const Tensor& gates, const Tensor& c, const Tensor& t_gates,
                         const Tensor& t_c);

}  // namespace adjoint::detail
