// Gradcheck samples for the linear-algebra ops (src/ops/linalg.cpp), named
// "linalg/<op>/<case>": matmul in every rank combination (vectors, matrices, batches with
// broadcast batch dims, the folded batch-times-matrix path), transposed (non-contiguous)
// operands, empty dims, constant operands; linear with and without bias; dot and outer.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

Tensor mm(const Inputs& x) { return matmul(x[0], x[1]); }

}  // namespace

ADJOINT_REGISTER_SAMPLES(linalg) {
  sink.add("linalg/matmul/matrix_matrix", mm, {randn64({2, 3}), randn64({3, 4})});
  sink.add("linalg/matmul/vector_matrix", mm, {randn64({3}), randn64({3, 4})});
  sink.add("linalg/matmul/matrix_vector", mm, {randn64({4, 3}), randn64({3})});
  sink.add("linalg/matmul/vector_vector", mm, {randn64({3}), randn64({3})});
  sink.add("linalg/matmul/batch_matrix_folded", mm, {randn64({2, 3, 4}), randn64({4, 2})});
  sink.add("linalg/matmul/batch_vector", mm, {randn64({2, 3, 4}), randn64({4})});
  sink.add("linalg/matmul/vector_batch", mm, {randn64({3}), randn64({2, 3, 4})});
  sink.add("linalg/matmul/matrix_batch", mm, {randn64({2, 3}), randn64({2, 3, 4})});
  sink.add("linalg/matmul/batch_broadcast", mm, {randn64({2, 1, 3, 4}), randn64({3, 4, 2})});
  sink.add("linalg/matmul/noncontiguous", mm, {randn64({3, 2}).t(), randn64({4, 3}).t()});
  sink.add("linalg/matmul/noncontiguous_batch", mm,
           {randn64({2, 4, 3}).transpose(-1, -2), randn64({4, 2})});
  sink.add("linalg/matmul/empty_inner", mm, {randn64({2, 0}), randn64({0, 3})});
  sink.add("linalg/matmul/empty_rows", mm, {randn64({0, 3}), randn64({3, 2})});
  sink.add("linalg/matmul/constant_lhs", mm, {constant(randn64({2, 3})), randn64({3, 2})});
  sink.add("linalg/matmul/constant_rhs", mm, {randn64({2, 2, 3}), constant(randn64({3, 2}))});
  sink.add("linalg/matmul/method", [](const Inputs& x) { return x[0].matmul(x[1]); },
           {randn64({2, 3}), randn64({3})});

  auto lin = [](const Inputs& x) { return linear(x[0], x[1], x[2]); };
  auto lin_nobias = [](const Inputs& x) { return linear(x[0], x[1]); };
  sink.add("linalg/linear/matrix_bias", lin, {randn64({3, 4}), randn64({2, 4}), randn64({2})});
  sink.add("linalg/linear/batch_bias", lin, {randn64({2, 3, 4}), randn64({2, 4}), randn64({2})});
  sink.add("linalg/linear/vector_bias", lin, {randn64({4}), randn64({3, 4}), randn64({3})});
  sink.add("linalg/linear/no_bias", lin_nobias, {randn64({3, 4}), randn64({2, 4})});
  sink.add("linalg/linear/noncontiguous", lin,
           {randn64({4, 3}).t(), randn64({4, 2}).t(), randn64({2})});
  sink.add("linalg/linear/noncontiguous_batch", lin_nobias,
           {randn64({2, 4, 3}).transpose(-1, -2), randn64({2, 4})});
  sink.add("linalg/linear/empty_batch", lin, {randn64({0, 4}), randn64({2, 4}), randn64({2})});
  sink.add("linalg/linear/empty_features", lin, {randn64({3, 0}), randn64({2, 0}), randn64({2})});
  sink.add("linalg/linear/constant_weight", lin,
           {randn64({3, 4}), constant(randn64({2, 4})), randn64({2})});

  auto dt = [](const Inputs& x) { return dot(x[0], x[1]); };
  sink.add("linalg/dot/vectors", dt, {randn64({5}), randn64({5})});
  sink.add("linalg/dot/strided", dt, {randn64({3, 2}).t().select(0, 1), randn64({3})});
  sink.add("linalg/dot/empty", dt, {randn64({0}), randn64({0})});
  sink.add("linalg/dot/method", [](const Inputs& x) { return x[0].dot(x[1]); },
           {randn64({3}), constant(randn64({3}))});

  auto out = [](const Inputs& x) { return outer(x[0], x[1]); };
  sink.add("linalg/outer/vectors", out, {randn64({3}), randn64({4})});
  sink.add("linalg/outer/empty", out, {randn64({0}), randn64({2})});
  sink.add("linalg/outer/method", [](const Inputs& x) { return x[0].outer(x[1]); },
           {randn64({2}), randn64({3})});
}
