// The files that define ops, each of which import_function refers to (ADJOINT_OPS_FILE in
// src/core/op_fields.h), so that their ops are linked into any program that imports.
#pragma once

namespace adjoint::detail {

void link_ops_activation();
void link_ops_attention();
void link_ops_batch_norm();
void link_ops_binary();
void link_ops_conversion();
void link_ops_elementwise_losses();
void link_ops_conv();
void link_ops_factories();
void link_ops_group_norm();
void link_ops_indexing();
void link_ops_linalg();
void link_ops_linalg_det();
void link_ops_linalg_matrix_exp();
void link_ops_linalg_qr();
void link_ops_linalg_solve();
void link_ops_linalg_spectral();
void link_ops_losses();
void link_ops_nn();
void link_ops_pooling();
void link_ops_random();
void link_ops_reduce();
void link_ops_reduce_extrema();
void link_ops_reduce_stats();
void link_ops_resample();
void link_ops_rnn_cell();
void link_ops_rnn_sequence();
void link_ops_scan();
void link_ops_shape();
void link_ops_unary();
void link_ops_view();
void link_ops_transform_support();

inline void link_every_ops_file() {
  link_ops_activation();
  link_ops_attention();
  link_ops_batch_norm();
  link_ops_binary();
  link_ops_conversion();
  link_ops_conv();
  link_ops_factories();
  link_ops_group_norm();
  link_ops_indexing();
  link_ops_linalg();
  link_ops_linalg_det();
  link_ops_linalg_matrix_exp();
  link_ops_linalg_qr();
  link_ops_linalg_solve();
  link_ops_linalg_spectral();
  link_ops_losses();
  link_ops_elementwise_losses();
  link_ops_nn();
  link_ops_pooling();
  link_ops_random();
  link_ops_reduce();
  link_ops_reduce_extrema();
  link_ops_reduce_stats();
  link_ops_resample();
  link_ops_rnn_cell();
  link_ops_rnn_sequence();
  link_ops_scan();
  link_ops_shape();
  link_ops_unary();
  link_ops_view();
  link_ops_transform_support();
}

}  // namespace adjoint::detail
