// compile on a whole model: a small GPT's training steps (dropout on, AdamW between steps, the
// trainer's sliced token windows) compiled and eager, from two identical models, give the same
// losses and gradients bit for bit.
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"

namespace {

using namespace adjoint;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << what;
}

TEST(CompileModel, GptTrainingStepsMatchEagerBitwise) {
  const nn::GPTConfig config{32, 16, 32, 2, 2, 0.1};
  Generator ge(5), gc(5);
  nn::GPT eager(config, &ge), compiled(config, &gc);
  optim::AdamW opt_e(eager.parameters(), {.lr = 1e-2}), opt_c(compiled.parameters(), {.lr = 1e-2});
  CompiledFunction loss = compile([&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{compiled.loss(in[0], in[1])};
  });
  Generator data(9);
  for (int step = 0; step < 4; ++step) {
    const Tensor tokens = randint(0, 32, {3, 17}, &data);
    // Windows of one tensor, as the trainer cuts them: not contiguous.
    const Tensor in = tokens.slice(1, 0, 16), target = tokens.slice(1, 1, 17);
    opt_e.zero_grad();
    opt_c.zero_grad();
    Tensor le = eager.loss(in, target);
    Tensor lc = loss({in, target})[0];
    expect_same(lc, le, "loss at step " + std::to_string(step));
    le.backward();
    lc.backward();
    const std::vector<Tensor> pe = eager.parameters(), pc = compiled.parameters();
    for (std::size_t i = 0; i < pe.size(); ++i)
      expect_same(pc[i].grad(), pe[i].grad(), "gradient " + std::to_string(i));
    opt_e.step();
    opt_c.step();
  }
  EXPECT_EQ(loss.stats().traces, 1);
  EXPECT_EQ(loss.stats().graph_breaks, 0);
  EXPECT_GT(loss.plan().fused_away, 0);
}

TEST(CompileModel, LayoutsArePartOfTheKey) {
  // reshape views a contiguous tensor and copies a strided one: a trace on one layout must
  // not serve the other.
  auto f = [](const Tensor& x) { return x.reshape({-1}) * 2.0; };
  CompiledFunction c = compile(f);
  Tensor base = randn({4, 6});
  for (const Tensor& x : {base.slice(1, 1, 5), randn({4, 4}).t(), randn({4, 4})})
    expect_same(c(x), f(x), "layout");
  EXPECT_EQ(c.stats().traces, 3);
}

}  // namespace
