// adjoint-data-parallel: data-parallel training on several processes, the first-step way
// (docs/distributed.md). Every rank builds the model from its own seed, broadcast_module
// makes them rank 0's, each rank fits its slice of a generated regression batch, and
// average_gradients makes the update the one for the whole batch. Rank 0 prints the loss;
// at the end every rank checks that its parameters equal rank 0's bit for bit.
//   mpirun -np 2 build/examples/adjoint-data-parallel      (or run it alone: world size 1)
#include <cstdio>
#include <cstring>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/distributed.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"

using namespace adjoint;

int main() {
  set_num_threads(1);     // ranks on one machine share its cores
  dist::Environment env;  // MPI under mpirun, world size 1 otherwise
  dist::ProcessGroup& pg = env.group();
  const int rank = pg.rank(), world = pg.world_size();

  Generator init(1234 + rank);  // different on purpose: the broadcast fixes it
  auto model =
      std::make_shared<nn::MLP>(std::vector<int64_t>{4, 32, 1}, nn::Activation::Tanh, true, &init);
  dist::broadcast_module(*model);
  optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.0});

  // The whole batch is the same on every rank (same seed); each rank trains on its rows.
  const int64_t per_rank = 64;
  Generator data(7);
  Tensor x = randn({per_rank * world, 4}, {}, &data);
  Tensor y = (x.narrow(1, 0, 1) * x.narrow(1, 1, 1)).sin() + 0.5 * x.narrow(1, 2, 1);
  Tensor xr = x.narrow(0, rank * per_rank, per_rank), yr = y.narrow(0, rank * per_rank, per_rank);

  for (int step = 0; step <= 300; ++step) {
    opt.zero_grad();
    Tensor loss = (model->forward(xr) - yr).square().mean();
    loss.backward();
    dist::average_gradients(model->parameters());
    opt.step();
    // The mean of the ranks' losses is the loss over the whole batch.
    Tensor total = loss.detach().clone();
    pg.all_reduce(total, dist::ReduceOp::Average);
    if (rank == 0 && step % 50 == 0)
      std::printf("step %3d  loss %.5f  (%d rank%s)\n", step, total.item<double>(), world,
                  world == 1 ? "" : "s");
  }

  // Same data, same averaged gradients, same arithmetic: the replicas must not drift apart.
  bool same = true;
  for (const Tensor& p : model->parameters()) {
    Tensor mine = p.detach().contiguous();
    Tensor root = mine.clone();
    pg.broadcast(root, 0);
    same &= std::memcmp(mine.raw_data(), root.raw_data(), mine.nbytes()) == 0;
  }
  Tensor ok = scalar_tensor(same ? 1 : 0, DType::Int64);
  pg.all_reduce(ok, dist::ReduceOp::Sum);
  if (rank == 0)
    std::printf("parameters identical on %lld of %d ranks\n",
                static_cast<long long>(ok.item<int64_t>()), world);
  return ok.item<int64_t>() == world ? 0 : 1;
}
