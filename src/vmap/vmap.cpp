// The vmap transform: checks in_dims and out_dims, opens a level, wraps the batched arguments
// (Note [Batched tensors] in batched.h), runs f once, and unwraps its outputs; chunk_size runs
// it over slices of the batch and joins the results.
#include <algorithm>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "vmap/batched.h"

namespace adjoint::detail {

namespace {

// in_dims or out_dims for n values: one entry each, or one for all.
std::vector<BatchDim> per_value(const std::vector<BatchDim>& dims, std::size_t n,
                                const char* what) {
  if (dims.size() == 1) return std::vector<BatchDim>(n, dims[0]);
  ADJOINT_CHECK(dims.size() == n, Value, "vmap", what, " has ", dims.size(),
                " entries but there are ", n, what[0] == 'i' ? " arguments" : " outputs",
                " (give one entry per value, or one for all)");
  return dims;
}

// The batch size, from the batched arguments; they must agree.
int64_t batch_size(const std::vector<Tensor>& args, const std::vector<BatchDim>& in_dims) {
  std::optional<int64_t> size;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!in_dims[i]) continue;
    ADJOINT_CHECK(args[i].defined(), Value, "vmap", "argument ", i, " is undefined but has in_dim ",
                  *in_dims[i]);
    const int64_t d = wrap_dim(*in_dims[i], args[i].dim(), "vmap");
    const int64_t n = args[i].size(d);
    ADJOINT_CHECK(!size || *size == n, Shape, "vmap",
                  "batched arguments have different sizes along their in_dims: argument ", i, " ",
                  describe(args[i]), " has ", n, " at dim ", d, ", an earlier one has ", *size);
    size = n;
  }
  ADJOINT_CHECK(size.has_value(), Value, "vmap",
                "no argument is batched: every in_dim is no_batch (vmap needs at least one)");
  return *size;
}

std::vector<Tensor> run_once(const ListFn& f, const std::vector<Tensor>& args,
                             const std::vector<BatchDim>& in_dims,
                             const std::vector<BatchDim>& out_dims_given, int64_t size,
                             Randomness randomness) {
  VmapLevelGuard level(size, randomness);
  std::vector<Tensor> wrapped(args.size());
  for (std::size_t i = 0; i < args.size(); ++i)
    wrapped[i] =
        in_dims[i] ? make_batched(args[i], wrap_dim(*in_dims[i], args[i].dim(), "vmap"), level.id())
                   : args[i];
  std::vector<Tensor> outs = f(wrapped);
  const std::vector<BatchDim> out_dims = per_value(out_dims_given, outs.size(), "out_dims");
  for (std::size_t i = 0; i < outs.size(); ++i) {
    Tensor& out = outs[i];
    ADJOINT_CHECK(out.defined(), Value, "vmap", "output ", i, " of the function is undefined");
    const BatchedValue* b = batched_of(out);
    const bool batched = b && b->level == level.id();
    if (!out_dims[i]) {
      ADJOINT_CHECK(!batched, Value, "vmap", "output ", i, " (logical ", describe(out),
                    ") depends on the batch but its out_dim is no_batch");
      continue;
    }
    const int64_t logical_dims = out.dim();
    ADJOINT_CHECK(*out_dims[i] >= -(logical_dims + 1) && *out_dims[i] <= logical_dims, Index,
                  "vmap", "out_dim ", *out_dims[i], " of output ", i, " is out of range for ",
                  "an output of logical shape ", out.shape(), " (valid: ", -(logical_dims + 1),
                  " to ", logical_dims, ")");
    const int64_t d = wrap_dim(*out_dims[i], logical_dims + 1, "vmap");
    if (batched) {
      out = move_dim(b->value, b->bdim, d);
    } else {
      // Unbatched: every example has the same value (JAX and torch.func broadcast it).
      Shape shape = out.shape();
      shape.insert(static_cast<std::size_t>(d), size);
      out = expand(unsqueeze(out, d), shape);
    }
  }
  return outs;
}

}  // namespace

std::vector<Tensor> vmap_lists(const ListFn& f, const std::vector<Tensor>& args,
                               const std::vector<BatchDim>& in_dims_given,
                               const std::vector<BatchDim>& out_dims, const VmapOptions& options) {
  const std::vector<BatchDim> in_dims = per_value(in_dims_given, args.size(), "in_dims");
  for (std::size_t i = 0; i < args.size(); ++i)
    if (in_dims[i] && args[i].defined())
      ADJOINT_CHECK(*in_dims[i] >= -args[i].dim() && *in_dims[i] < args[i].dim(), Index, "vmap",
                    "in_dim ", *in_dims[i], " of argument ", i, " is out of range for ",
                    describe(args[i]));
  const int64_t size = batch_size(args, in_dims);
  ADJOINT_CHECK(!options.chunk_size || *options.chunk_size > 0, Value, "vmap",
                "chunk_size must be positive, got ", options.chunk_size.value_or(0));
  // An empty batch runs f once at batch size 0, so the outputs have their shapes with a batch
  // dim of 0 (as torch.func.vmap gives).
  const int64_t chunk = options.chunk_size.value_or(size);
  if (chunk >= size) return run_once(f, args, in_dims, out_dims, size, options.randomness);

  // Chunks: the same function over slices of the batch, joined along each output's out_dim.
  std::vector<std::vector<Tensor>> parts;
  for (int64_t start = 0; start < size; start += chunk) {
    const int64_t len = std::min(chunk, size - start);
    std::vector<Tensor> slice(args.size());
    for (std::size_t i = 0; i < args.size(); ++i)
      slice[i] = in_dims[i] ? narrow(args[i], *in_dims[i], start, len) : args[i];
    parts.push_back(run_once(f, slice, in_dims, out_dims, len, options.randomness));
  }
  const std::vector<BatchDim> od = per_value(out_dims, parts[0].size(), "out_dims");
  std::vector<Tensor> outs(parts[0].size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    if (!od[o]) {
      outs[o] = parts[0][o];
      continue;
    }
    std::vector<Tensor> pieces;
    for (auto& p : parts) pieces.push_back(p[o]);
    outs[o] = cat(pieces, *od[o]);
  }
  return outs;
}

}  // namespace adjoint::detail
