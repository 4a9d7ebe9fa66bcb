// broadcast_tensors / broadcast_module and average_gradients: data parallelism by hand,
// without overlap (the gradients are averaged after backward has finished).
#include "adjoint/distributed/data_parallel.h"

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "backend/host_transfer.h"

namespace adjoint::dist {

namespace {
ProcessGroup& group_or_default(ProcessGroup* g) { return g ? *g : default_group(); }
}  // namespace

void broadcast_tensors(const std::vector<Tensor>& tensors, int root, ProcessGroup* group) {
  ProcessGroup& pg = group_or_default(group);
  NoGradGuard no_grad;
  std::vector<Work> pending;
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (tensor, contiguous stand-in)
  for (const Tensor& t : tensors) {
    Tensor buf = t.is_contiguous() ? t : t.contiguous();
    pending.push_back(pg.broadcast_async(buf, root));
    if (!buf.is_same(t)) copy_back.emplace_back(t, buf);
  }
  for (Work& w : pending) w.wait();
  for (auto& [t, buf] : copy_back) Tensor(t).copy_(buf);  // copy_ is a method of the handle
}

void broadcast_module(nn::Module& module, int root, ProcessGroup* group) {
  broadcast_tensors(module.parameters(), root, group);
  broadcast_tensors(module.buffers(), root, group);
}

void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group,
                       int64_t bucket_bytes) {
  ProcessGroup& pg = group_or_default(group);
  ADJOINT_CHECK(bucket_bytes > 0, Value, "dist.average_gradients",
                "bucket_bytes must be positive, got ", bucket_bytes);
  NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(params.size());
  // Which parameters have a gradient on some rank: those get one everywhere (zeros where this
  // rank had none), the others keep none on every rank.
  std::vector<int64_t> flags(static_cast<std::size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) flags[i] = params[i].grad().defined() ? 1 : 0;
  Tensor has_on_some = tensor(flags);
  pg.all_reduce(has_on_some, ReduceOp::Max);
  const std::vector<int64_t> has =
      adjoint::detail::host_values<int64_t>(has_on_some, "dist.average_gradients");

  struct Bucket {
    std::vector<int64_t> members;
    Tensor flat;
    Work work;
  };
  std::vector<Bucket> buckets;
  auto flush = [&](std::vector<int64_t>& members) {
    if (members.empty()) return;
    std::vector<Tensor> pieces;
    for (int64_t i : members) {
      Tensor g = params[i].grad();
      pieces.push_back(g.defined() ? g.reshape({-1})
                                   : zeros({params[i].numel()}, params[i].dtype()));
    }
    Bucket b{members, cat(pieces, 0), Work()};
    b.work = pg.all_reduce_async(b.flat, ReduceOp::Average);
    buckets.push_back(std::move(b));
    members.clear();
  };
  // Buckets in parameter order, one dtype each (a dtype change closes the bucket).
  std::vector<int64_t> current;
  int64_t current_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!has[i]) continue;
    const Tensor& p = params[i];
    ADJOINT_CHECK(is_floating(p.dtype()), DType, "dist.average_gradients", "parameter ", i, " ",
                  describe(p), " is not floating point");
    const int64_t bytes = static_cast<int64_t>(p.nbytes());
    if (!current.empty() &&
        (params[current[0]].dtype() != p.dtype() || current_bytes + bytes > bucket_bytes)) {
      flush(current);
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  flush(current);

  for (Bucket& b : buckets) {
    b.work.wait();
    int64_t offset = 0;
    for (int64_t i : b.members) {
      const Tensor& p = params[i];
      Tensor avg = b.flat.narrow(0, offset, p.numel()).reshape(p.shape());
      offset += p.numel();
      Tensor g = p.grad();
      if (g.defined()) {
        g.copy_(avg);
      } else {
        p.set_grad(avg.clone());
      }
    }
  }
}

}  // namespace adjoint::dist
