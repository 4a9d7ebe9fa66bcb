// GraphRecorder: recording changes no gradient (also where a VJP would add into .grad in place),
// counts what ran, composes with memory timelines, and leaves no hooks behind.
#include <gtest/gtest.h>

#include "adjoint/memory.h"
#include "adjoint/nn.h"
#include "debug/graph_test_util.h"

namespace adjoint::testing {
namespace {

std::vector<std::vector<double>> train_grads(bool record) {
  Generator gen(9);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 5, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(5, 3, true, &gen)});
  Tensor x = randn({4, 6}, {}, &gen);
  std::optional<GraphRecorder> rec;
  if (record) rec.emplace();
  // Two backward passes: the second may add weight gradients into .grad in place.
  for (int i = 0; i < 2; ++i) (*model)(x).pow(2).sum().backward();
  std::vector<std::vector<double>> grads;
  for (const Tensor& p : model->parameters()) grads.push_back(p.grad().to_vector<double>());
  if (record) {
    EXPECT_GT(rec->num_backward_steps(), 0u);
  }
  return grads;
}

TEST(GraphRecorder, GradientsAreTheSameWithAndWithoutRecording) {
  const auto plain = train_grads(false), recorded = train_grads(true);
  ASSERT_EQ(plain.size(), recorded.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].size(), recorded[i].size());
    for (std::size_t j = 0; j < plain[i].size(); ++j)
      EXPECT_NEAR(plain[i][j], recorded[i][j], 1e-5 * std::max(1.0, std::abs(plain[i][j])));
  }
}

TEST(GraphRecorder, CountsOpsAndStepsAndRemovesItsHooks) {
  SumSinExample ex;
  std::shared_ptr<Node> mul;
  {
    GraphRecorder rec;
    ex.forward();
    EXPECT_EQ(rec.num_forward_ops(), 3u);  // add, sin, mul
    mul = ex.f.grad_fn();
    EXPECT_TRUE(mul->has_tensor_pre_hooks());
    ex.f.backward(Tensor(), /*retain_graph=*/true);
    EXPECT_EQ(rec.num_backward_steps(), walk(ex.f).nodes.size());
  }
  EXPECT_FALSE(mul->has_tensor_pre_hooks());
  for (const auto& [id, n] : walk(ex.f).nodes) EXPECT_FALSE(n->has_tensor_pre_hooks()) << id;
}

TEST(GraphRecorder, MemoryTimelineStillSeesEveryOp) {
  auto events = [](bool record) {
    MemoryTimeline timeline;
    std::optional<GraphRecorder> rec;
    if (record) rec.emplace();
    SumSinExample ex;
    ex.forward();
    ex.f.backward();
    rec.reset();
    timeline.stop();
    std::vector<std::string> ops;
    for (const MemoryEvent& e : timeline.events()) ops.push_back(e.op);
    return ops;
  };
  EXPECT_EQ(events(true), events(false));
}

TEST(GraphRecorder, WatchHooksAGraphMadeBeforeIt) {
  SumSinExample ex;
  ex.forward();
  GraphRecorder rec;
  rec.watch({ex.f});
  ex.f.backward();
  EXPECT_EQ(rec.num_forward_ops(), 0u);
  EXPECT_EQ(rec.num_backward_steps(), 5u);
}

}  // namespace
}  // namespace adjoint::testing
