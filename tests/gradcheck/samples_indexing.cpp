// Gradcheck samples for the indexing ops (src/ops/indexing.cpp), named "indexing/<op>/<case>":
// index_select, gather, scatter_add, index_add, masked_fill, embedding, tril and triu. Index
// and mask inputs are constants (not checked); cases cover repeated indices, 0-d inputs,
// empty indices, non-contiguous inputs and negative dims. one_hot is not differentiable.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

Tensor idx(std::vector<int64_t> v, std::optional<Shape> shape = std::nullopt) {
  return constant(tensor(v, shape));
}

Tensor mask(std::vector<bool> v, Shape shape) { return constant(tensor(v, shape)); }

// The VJP of `op` (at a fixed x of `x_shape`) as a function of the cotangent in[0]. The
// checks then exercise the VJP rule's own VJP and JVP (index_add's, scatter_add's), which
// gradgradcheck cannot reach for linear ops: it holds the cotangent fixed.
SampleFn backward_of(std::function<Tensor(const Tensor&)> op, Shape x_shape) {
  return [op, x_shape](const Inputs& in) {
    EnableGradGuard enable;
    Tensor x = zeros(x_shape, DType::Float64).requires_grad_(true);
    return autograd::grad({op(x)}, {x}, {in[0]}, std::nullopt, /*create_graph=*/true)[0];
  };
}

void selecting(SampleSink& sink) {
  auto sel = [](int64_t dim) {
    return [dim](const Inputs& x) { return index_select(x[0], dim, x[1]); };
  };
  sink.add("indexing/index_select/repeated", sel(0), {randn64({5, 3}), idx({4, 0, 4, 2})});
  sink.add("indexing/index_select/negative_dim", sel(-1), {randn64({2, 4}), idx({3, 1, 3})});
  sink.add("indexing/index_select/noncontiguous", sel(1), {randn64({3, 4}).t(), idx({2, 0})});
  sink.add("indexing/index_select/empty_index", sel(0), {randn64({3, 2}), idx({})});
  sink.add("indexing/index_select/scalar_index", sel(0), {randn64({3, 2}), idx({1}, Shape{})});
  sink.add("indexing/index_select/scalar_input", sel(0), {randn64({}), idx({0})});
  sink.add("indexing/index_select/method",
           [](const Inputs& x) { return x[0].index_select(1, x[1]); },
           {randn64({2, 3, 2}), idx({2, 2, 0})});

  sink.add("indexing/index_select/squared",
           [](const Inputs& x) { return index_select(x[0], 0, x[1]).square(); },
           {randn64({3, 2}), idx({2, 2, 0})});
  sink.add("indexing/index_select/backward_of",
           backward_of(
               [](const Tensor& x) {
                 return index_select(x, 1, tensor(std::vector<int64_t>{2, 0, 2}));
               },
               {2, 3}),
           {randn64({2, 3})});

  auto gat = [](int64_t dim) { return [dim](const Inputs& x) { return gather(x[0], dim, x[1]); }; };
  sink.add("indexing/gather/repeated", gat(1),
           {randn64({3, 4}), idx({0, 0, 3, 1, 2, 1, 3, 3, 3}, Shape{3, 3})});
  sink.add("indexing/gather/dim0", gat(0), {randn64({3, 2}), idx({2, 0, 2, 2}, Shape{2, 2})});
  sink.add("indexing/gather/negative_dim", gat(-1),
           {randn64({2, 3}), idx({2, 2, 0, 1}, Shape{2, 2})});
  sink.add("indexing/gather/noncontiguous", gat(0),
           {randn64({4, 3}).t(), idx({1, 0, 1, 2, 2, 2}, Shape{3, 2})});
  sink.add("indexing/gather/scalar", gat(0), {randn64({}), idx({0}, Shape{})});
  sink.add("indexing/gather/empty", gat(1), {randn64({2, 3}), idx({}, Shape{2, 0})});
  sink.add("indexing/gather/method", [](const Inputs& x) { return x[0].gather(1, x[1]); },
           {randn64({2, 3}), idx({1, 1, 0, 2}, Shape{2, 2})});
  sink.add("indexing/gather/squared",
           [](const Inputs& x) { return gather(x[0], 1, x[1]).square(); },
           {randn64({2, 3}), idx({2, 2, 0, 1}, Shape{2, 2})});
  sink.add("indexing/gather/backward_of",
           backward_of(
               [](const Tensor& x) {
                 return gather(x, 0, tensor(std::vector<int64_t>{1, 1, 0, 1}, Shape{2, 2}));
               },
               {2, 2}),
           {randn64({2, 2})});
}

void adding(SampleSink& sink) {
  auto sca = [](int64_t dim) {
    return [dim](const Inputs& x) { return scatter_add(x[0], dim, x[1], x[2]); };
  };
  sink.add("indexing/scatter_add/repeated", sca(1),
           {randn64({2, 4}), idx({0, 0, 3, 1, 1, 1}, Shape{2, 3}), randn64({2, 3})});
  sink.add("indexing/scatter_add/dim0", sca(0),
           {randn64({3, 2}), idx({2, 0, 2, 2}, Shape{2, 2}), randn64({2, 2})});
  sink.add("indexing/scatter_add/src_larger_than_index", sca(-1),
           {randn64({3, 3}), idx({2, 2, 0, 1}, Shape{2, 2}), randn64({3, 4})});
  sink.add("indexing/scatter_add/noncontiguous", sca(0),
           {randn64({3, 3}).t(), idx({1, 1, 0, 2, 0, 0}, Shape{2, 3}), randn64({3, 2}).t()});
  sink.add("indexing/scatter_add/scalar", sca(0), {randn64({}), idx({0}, Shape{}), randn64({})});
  sink.add("indexing/scatter_add/constant_src", sca(1),
           {randn64({2, 3}), idx({2, 2, 0, 0}, Shape{2, 2}), constant(randn64({2, 2}))});
  sink.add("indexing/scatter_add/method",
           [](const Inputs& x) { return x[0].scatter_add(0, x[1], x[2]); },
           {randn64({2, 2}), idx({1, 1}, Shape{1, 2}), randn64({1, 2})});

  sink.add("indexing/scatter_add/squared",
           [](const Inputs& x) { return scatter_add(x[0], 0, x[1], x[2]).square(); },
           {randn64({2, 2}), idx({1, 1, 1, 0}, Shape{2, 2}), randn64({2, 2})});

  auto iadd = [](int64_t dim) {
    return [dim](const Inputs& x) { return index_add(x[0], dim, x[1], x[2]); };
  };
  sink.add("indexing/index_add/repeated", iadd(0),
           {randn64({5, 3}), idx({1, 1, 4}), randn64({3, 3})});
  sink.add("indexing/index_add/negative_dim", iadd(-1),
           {randn64({2, 3}), idx({0, 2, 0, 0}), randn64({2, 4})});
  sink.add("indexing/index_add/noncontiguous", iadd(1),
           {randn64({4, 2}).t(), idx({3, 3}), randn64({2, 2}).t()});
  sink.add("indexing/index_add/empty_index", iadd(0), {randn64({3, 2}), idx({}), randn64({0, 2})});
  sink.add("indexing/index_add/scalar", iadd(0), {randn64({}), idx({0}), randn64({})});
  sink.add("indexing/index_add/squared",
           [](const Inputs& x) { return index_add(x[0], 0, x[1], x[2]).square(); },
           {randn64({2, 2}), idx({1, 1}), randn64({2, 2})});
}

void masking(SampleSink& sink) {
  sink.add("indexing/masked_fill/broadcast_mask",
           [](const Inputs& x) { return masked_fill(x[0], x[1], 2.5); },
           {randn64({3, 4}), mask({true, false, false, true}, {4})});
  sink.add("indexing/masked_fill/scalar", [](const Inputs& x) { return x[0].masked_fill(x[1], 1); },
           {randn64({}), mask({false}, {})});
  sink.add("indexing/masked_fill/noncontiguous",
           [](const Inputs& x) { return masked_fill(x[0], x[1], -1); },
           {randn64({3, 2}).t(), mask({true, false, true, false, false, true}, {2, 3})});
  sink.add("indexing/masked_fill/empty", [](const Inputs& x) { return masked_fill(x[0], x[1], 0); },
           {randn64({0, 2}), mask({true, false}, {2})});

  for (bool lower : {true, false}) {
    const std::string op = lower ? "indexing/tril/" : "indexing/triu/";
    auto tri = [lower](int64_t diagonal) {
      return [lower, diagonal](const Inputs& x) {
        return lower ? tril(x[0], diagonal) : x[0].triu(diagonal);
      };
    };
    sink.add(op + "square", tri(0), {randn64({4, 4})});
    sink.add(op + "wide_negative_diagonal", tri(-1), {randn64({3, 5})});
    sink.add(op + "batched_positive_diagonal", tri(1), {randn64({2, 3, 3})});
    sink.add(op + "noncontiguous", tri(0), {randn64({3, 4}).t()});
    sink.add(op + "empty", tri(0), {randn64({0, 3})});
  }
}

void embedding_samples(SampleSink& sink) {
  auto emb = [](const Inputs& x) { return embedding(x[0], x[1]); };
  sink.add("indexing/embedding/repeated", emb,
           {randn64({5, 3}), idx({1, 1, 3, 0, 1, 4}, Shape{2, 3})});
  sink.add("indexing/embedding/scalar_index", emb, {randn64({4, 2}), idx({2}, Shape{})});
  sink.add("indexing/embedding/empty_indices", emb, {randn64({4, 2}), idx({}, Shape{0})});
  sink.add("indexing/embedding/backward_of",
           backward_of(
               [](const Tensor& w) {
                 return embedding(w, tensor(std::vector<int64_t>{3, 1, 3, 3}, Shape{2, 2}));
               },
               {4, 2}),
           {randn64({2, 2, 2})});
  sink.add("indexing/embedding/noncontiguous_weight", emb, {randn64({3, 4}).t(), idx({3, 0, 3})});
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(indexing) {
  selecting(sink);
  adding(sink);
  masking(sink);
  embedding_samples(sink);
}
