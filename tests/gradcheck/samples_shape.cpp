// Gradcheck samples for the shape and view ops (src/ops/shape.cpp, view.cpp, conversion.cpp),
// named "shape/<op>/<case>": slice, select, narrow, flatten, cat, stack, split, chunk, and the
// views view, reshape, permute, transpose, squeeze, unsqueeze, expand, sum_to, clone and
// contiguous. Cases cover 0-d inputs where legal, empty tensors, non-contiguous inputs
// (transposes and stepped slices) and negative dims.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

using Fn = std::function<Tensor(const Tensor&)>;

// A one-input sample.
void one(SampleSink& sink, const std::string& name, Tensor x, Fn fn) {
  sink.add("shape/" + name, [fn](const Inputs& in) { return fn(in[0]); }, {std::move(x)});
}

// The VJP of `op` (at a fixed x of `x_shape`) as a function of the cotangent in[0]. The
// checks then exercise the VJP rule's own VJP and JVP (SliceScatter's), which gradgradcheck
// cannot reach for linear ops: it holds the cotangent fixed, and their VJP ignores x.
SampleFn backward_of(Fn op, Shape x_shape) {
  return [op, x_shape](const Inputs& in) {
    EnableGradGuard enable;
    Tensor x = zeros(x_shape, DType::Float64).requires_grad_(true);
    return autograd::grad({op(x)}, {x}, {in[0]}, std::nullopt, /*create_graph=*/true)[0];
  };
}

// Pieces of a split weighted 1, 2, 3, ... and joined again, so each piece's gradient differs.
Tensor weighted_cat(const std::vector<Tensor>& pieces, int64_t dim) {
  std::vector<Tensor> scaled;
  for (std::size_t i = 0; i < pieces.size(); ++i)
    scaled.push_back(pieces[i] * static_cast<double>(i + 1));
  return cat(scaled, dim);
}

void slicing(SampleSink& sink) {
  one(sink, "slice/basic", randn64({5, 3}), [](const Tensor& x) { return slice(x, 0, 1, 4); });
  one(sink, "slice/step", randn64({2, 7}), [](const Tensor& x) { return x.slice(1, 0, 7, 3); });
  one(sink, "slice/negative_bounds", randn64({3, 6}),
      [](const Tensor& x) { return slice(x, -1, -4, -1); });
  one(sink, "slice/open_bounds_clamped", randn64({5}),
      [](const Tensor& x) { return slice(x, 0, std::nullopt, 100, 2); });
  one(sink, "slice/empty_result", randn64({4, 2}),
      [](const Tensor& x) { return slice(x, 0, 3, 1); });
  one(sink, "slice/empty_input", randn64({0, 3}),
      [](const Tensor& x) { return slice(x, 1, 0, 2); });
  one(sink, "slice/noncontiguous", randn64({5, 4}).t(),
      [](const Tensor& x) { return slice(x, 1, 1, std::nullopt, 2); });
  one(sink, "slice/of_stepped_slice", randn64({8, 2}),
      [](const Tensor& x) { return slice(slice(x, 0, 0, std::nullopt, 2), 0, 1, 3); });

  one(sink, "slice/squared", randn64({2, 4}),
      [](const Tensor& x) { return slice(x, 1, 0, 3, 2).square(); });
  sink.add("shape/slice/backward_of",
           backward_of([](const Tensor& x) { return slice(x, 0, 1, std::nullopt, 2); }, {5, 2}),
           {randn64({2, 2})});

  one(sink, "select/basic", randn64({3, 4}), [](const Tensor& x) { return select(x, 0, 2); });
  one(sink, "select/negative", randn64({3, 4}), [](const Tensor& x) { return x.select(-1, -2); });
  one(sink, "select/to_scalar", randn64({3}), [](const Tensor& x) { return select(x, 0, 1); });
  one(sink, "select/noncontiguous", randn64({4, 3}).t(),
      [](const Tensor& x) { return select(x, 1, 0); });
  one(sink, "select/empty", randn64({2, 0}), [](const Tensor& x) { return select(x, 0, 1); });

  one(sink, "select/squared", randn64({3, 2}),
      [](const Tensor& x) { return select(x, 0, -1).square(); });
  sink.add("shape/select/backward_of",
           backward_of([](const Tensor& x) { return select(x, 1, 2); }, {2, 3}), {randn64({2})});

  one(sink, "narrow/basic", randn64({2, 5}), [](const Tensor& x) { return x.narrow(-1, 1, 3); });
  one(sink, "narrow/negative_start", randn64({4, 3}),
      [](const Tensor& x) { return narrow(x, 0, -2, 2); });
  one(sink, "narrow/zero_length", randn64({3, 2}),
      [](const Tensor& x) { return narrow(x, 0, 1, 0); });
  one(sink, "narrow/noncontiguous", randn64({3, 4}).t(),
      [](const Tensor& x) { return narrow(x, 0, 1, 2); });
}

void flattening(SampleSink& sink) {
  one(sink, "flatten/all", randn64({2, 3, 4}), [](const Tensor& x) { return flatten(x); });
  one(sink, "flatten/middle", randn64({2, 3, 4}), [](const Tensor& x) { return x.flatten(1, -1); });
  one(sink, "flatten/scalar", randn64({}), [](const Tensor& x) { return flatten(x); });
  one(sink, "flatten/noncontiguous", randn64({3, 4}).t(),
      [](const Tensor& x) { return flatten(x); });
  one(sink, "flatten/empty", randn64({0, 3, 2}), [](const Tensor& x) { return flatten(x, 0, 1); });
}

void joining(SampleSink& sink) {
  auto cat0 = [](const Inputs& x) { return cat(x, 0); };
  sink.add("shape/cat/dim0", cat0, {randn64({2, 3}), randn64({1, 3}), randn64({3, 3})});
  sink.add("shape/cat/negative_dim", [](const Inputs& x) { return cat(x, -1); },
           {randn64({2, 1}), randn64({2, 4})});
  sink.add("shape/cat/constant_input", cat0, {randn64({2, 2}), constant(randn64({1, 2}))});
  sink.add("shape/cat/noncontiguous", [](const Inputs& x) { return cat(x, 1); },
           {randn64({3, 2}).t(), randn64({2, 2})});
  sink.add("shape/cat/empty_piece", cat0, {randn64({0, 3}), randn64({2, 3})});
  sink.add("shape/cat/single", cat0, {randn64({2, 3})});
  sink.add("shape/cat/same_input_twice",
           [](const Inputs& x) {
             return cat({x[0], x[0]}, 1);
           },
           {randn64({2, 2})});

  sink.add("shape/cat/squared", [](const Inputs& x) { return cat(x, 0).square(); },
           {randn64({1, 2}), randn64({2, 2})});
  sink.add("shape/cat/backward_of",
           backward_of(
               [](const Tensor& x) {
                 return cat({x * 2, x}, -1);
               },
               {2, 2}),
           {randn64({2, 4})});

  sink.add("shape/stack/dim0", [](const Inputs& x) { return stack(x, 0); },
           {randn64({2, 3}), randn64({2, 3}), randn64({2, 3})});
  sink.add("shape/stack/negative_dim", [](const Inputs& x) { return stack(x, -1); },
           {randn64({2, 3}), randn64({2, 3})});
  sink.add("shape/stack/scalars", [](const Inputs& x) { return stack(x); },
           {randn64({}), randn64({}), randn64({})});
  sink.add("shape/stack/noncontiguous", [](const Inputs& x) { return stack(x, 1); },
           {randn64({3, 2}).t(), randn64({2, 3})});
}

void splitting(SampleSink& sink) {
  one(sink, "split/size", randn64({5, 2}),
      [](const Tensor& x) { return weighted_cat(split(x, 2), 0); });
  one(sink, "split/one_piece", randn64({3, 5}), [](const Tensor& x) { return x.split(2, -1)[1]; });
  one(sink, "split/sizes", randn64({2, 4}), [](const Tensor& x) {
    return weighted_cat(split(x, {1, 0, 3}, 1), 1);
  });
  one(sink, "split/noncontiguous", randn64({3, 3}).t(),
      [](const Tensor& x) { return weighted_cat(split(x, 2, 1), 1); });
  one(sink, "split/empty", randn64({0, 3}),
      [](const Tensor& x) { return weighted_cat(split(x, 2, 0), 0); });

  one(sink, "chunk/even", randn64({6, 2}),
      [](const Tensor& x) { return weighted_cat(chunk(x, 3), 0); });
  one(sink, "chunk/uneven", randn64({2, 7}),
      [](const Tensor& x) { return weighted_cat(x.chunk(3, -1), -1); });
  one(sink, "chunk/more_chunks_than_rows", randn64({3, 2}),
      [](const Tensor& x) { return weighted_cat(chunk(x, 5), 0); });
  one(sink, "chunk/noncontiguous", randn64({2, 4}).t(),
      [](const Tensor& x) { return chunk(x, 2, 0)[1]; });
}

void views(SampleSink& sink) {
  one(sink, "view/basic", randn64({2, 6}), [](const Tensor& x) { return view(x, {3, 4}); });
  one(sink, "view/infer", randn64({2, 3}), [](const Tensor& x) { return x.view({-1}); });
  one(sink, "view/scalar", randn64({}), [](const Tensor& x) { return view(x, {1, 1}); });
  one(sink, "view/empty", randn64({0, 3}), [](const Tensor& x) { return view(x, {3, 0}); });

  one(sink, "reshape/noncontiguous", randn64({4, 3}).t(), [](const Tensor& x) {
    return reshape(x, {2, 6});
  });
  one(sink, "reshape/to_scalar", randn64({1, 1}), [](const Tensor& x) { return reshape(x, {}); });
  one(sink, "reshape/empty", randn64({0, 4}), [](const Tensor& x) { return x.reshape({2, 0}); });

  one(sink, "permute/basic", randn64({2, 3, 4}), [](const Tensor& x) {
    return permute(x, {2, 0, 1});
  });
  one(sink, "permute/negative_dims", randn64({2, 3, 4}), [](const Tensor& x) {
    return x.permute({-1, 0, -2});
  });
  one(sink, "permute/noncontiguous", slice(randn64({6, 3}), 0, 0, std::nullopt, 2),
      [](const Tensor& x) {
        return permute(x, {1, 0});
      });

  one(sink, "transpose/negative_dim", randn64({2, 3, 4}),
      [](const Tensor& x) { return transpose(x, 0, -1); });
  one(sink, "transpose/empty", randn64({0, 3}), [](const Tensor& x) { return x.transpose(0, 1); });

  one(sink, "squeeze/all", randn64({1, 3, 1}), [](const Tensor& x) { return squeeze(x); });
  one(sink, "squeeze/negative_dim", randn64({3, 1}), [](const Tensor& x) { return x.squeeze(-1); });
  one(sink, "squeeze/to_scalar", randn64({1, 1}), [](const Tensor& x) { return squeeze(x); });
  one(sink, "squeeze/noncontiguous", randn64({3, 1}).t(),
      [](const Tensor& x) { return squeeze(x, 0); });

  one(sink, "unsqueeze/scalar", randn64({}), [](const Tensor& x) { return unsqueeze(x, 0); });
  one(sink, "unsqueeze/negative_dim", randn64({2, 3}),
      [](const Tensor& x) { return x.unsqueeze(-1); });
  one(sink, "unsqueeze/noncontiguous", randn64({3, 2}).t(),
      [](const Tensor& x) { return unsqueeze(x, 1); });
  one(sink, "unsqueeze/empty", randn64({0}), [](const Tensor& x) { return unsqueeze(x, 0); });

  one(sink, "expand/basic", randn64({3, 1}), [](const Tensor& x) { return expand(x, {2, 3, 4}); });
  one(sink, "expand/scalar", randn64({}), [](const Tensor& x) { return x.expand({2, 2}); });
  one(sink, "expand/keep_dims", randn64({2, 1}), [](const Tensor& x) {
    return expand(x, {-1, 3});
  });
  one(sink, "expand/noncontiguous", randn64({2, 3}).t().slice(1, 0, 1), [](const Tensor& x) {
    return expand(x, {2, 3, 4});
  });
  one(sink, "expand/empty", randn64({1, 3}), [](const Tensor& x) { return expand(x, {0, 3}); });

  one(sink, "sum_to/basic", randn64({2, 3, 4}), [](const Tensor& x) { return sum_to(x, {3, 1}); });
  one(sink, "sum_to/scalar", randn64({2, 3}), [](const Tensor& x) { return sum_to(x, {}); });
  one(sink, "sum_to/noncontiguous", randn64({4, 3}).t(), [](const Tensor& x) {
    return sum_to(x, {1, 4});
  });

  one(sink, "clone/scalar", randn64({}), [](const Tensor& x) { return clone(x); });
  one(sink, "clone/noncontiguous", randn64({3, 4}).t(), [](const Tensor& x) { return x.clone(); });
  one(sink, "clone/empty", randn64({0, 2}), [](const Tensor& x) { return clone(x); });
  one(sink, "contiguous/noncontiguous", randn64({3, 4}).t(),
      [](const Tensor& x) { return x.contiguous(); });
  one(sink, "contiguous/stepped_slice", slice(randn64({7, 2}), 0, 1, std::nullopt, 3),
      [](const Tensor& x) { return contiguous(x); });
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(shape) {
  slicing(sink);
  flattening(sink);
  joining(sink);
  splitting(sink);
  views(sink);
}
