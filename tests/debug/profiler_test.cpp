// The profiler: every forward op and backward node of a training step is an event with sane
// times; FLOPs match the arithmetic of the shapes; the Chrome trace is valid trace-event JSON
// holding the same events; the summary sums the events; top-level events do not overlap and
// sum to (a little less than) the wall time. Oracles: shape arithmetic and the event list.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "adjoint/adjoint.h"
#include "autograd/memory_hooks.h"

using namespace adjoint;

namespace {

struct Mlp {
  Generator gen{5};
  Tensor w1 = (randn({256, 512}, DType::Float32, &gen) * 0.05).requires_grad_(true);
  Tensor b1 = zeros({256}).requires_grad_(true);
  Tensor w2 = (randn({10, 256}, DType::Float32, &gen) * 0.05).requires_grad_(true);
  Tensor x = randn({128, 512}, DType::Float32, &gen);
  void step() {
    Tensor h = relu(linear(x, w1, b1));
    Tensor loss = linear(h, w2).square().mean();
    loss.backward();
  }
};

std::map<std::string, int> count_by_name(const std::vector<ProfileEvent>& events, bool backward) {
  std::map<std::string, int> n;
  for (const ProfileEvent& e : events)
    if (e.backward == backward) n[e.name]++;
  return n;
}

}  // namespace

TEST(Profiler, RecordsEveryForwardOpAndBackwardNodeOfAStep) {
  Mlp m;
  m.step();  // warm up the allocator
  Profiler prof;
  m.step();
  prof.stop();
  const auto fwd = count_by_name(prof.events(), false);
  const auto bwd = count_by_name(prof.events(), true);
  EXPECT_EQ(fwd.at("linear"), 2);
  EXPECT_EQ(fwd.at("relu"), 1);
  EXPECT_EQ(fwd.at("square"), 1);
  EXPECT_EQ(fwd.at("sum"), 1);  // mean is sum times 1/n
  EXPECT_EQ(bwd.at("LinearBackward"), 2);
  EXPECT_EQ(bwd.at("ReluBackward"), 1);
  EXPECT_EQ(bwd.at("AccumulateGrad"), 3);  // w1, b1, w2
  for (const ProfileEvent& e : prof.events()) {
    EXPECT_GE(e.start_ns, 0) << e.name;
    EXPECT_GE(e.end_ns, e.start_ns) << e.name;
    EXPECT_LE(static_cast<double>(e.end_ns) * 1e-6, prof.wall_ms()) << e.name;
  }
  // after stop(), nothing more is recorded and no observer is left behind
  const std::size_t n = prof.events().size();
  m.step();
  EXPECT_EQ(prof.events().size(), n);
  EXPECT_EQ(detail::tls_op_observer, nullptr);
}

// A compiled replay runs its kernels below the dispatch stack; it reports each graph node itself,
// under the node's name, and the backward is the engine's one node for the compiled graph.
TEST(Profiler, ACompiledReplayShowsEachGraphNodeAndItsBackwardNode) {
  Mlp m;
  CompiledFunction f = compile([&](const Tensor& x) {
    return linear(tanh(linear(x, m.w1, m.b1) * 0.5 + 1.0), m.w2).square().mean();
  });
  f(m.x).backward();  // traced
  Profiler prof;
  Tensor loss = f(m.x);
  loss.backward();
  prof.stop();
  const auto fwd = count_by_name(prof.events(), false);
  const auto bwd = count_by_name(prof.events(), true);
  EXPECT_EQ(fwd.at("linear"), 2);
  int fused = 0;
  for (const auto& [name, count] : fwd)
    if (name.starts_with("fused[")) fused += count;
  EXPECT_GE(fused, 1) << "no fused node in the profile";
  EXPECT_EQ(bwd.size(), 2u);  // the compiled graph's node and AccumulateGrad
  int accumulate = 0;
  for (const auto& [name, count] : bwd) accumulate += name == "AccumulateGrad" ? count : 0;
  EXPECT_EQ(accumulate, 3);
  // Every event closed, inside the wall time, and the replay's linear events carry FLOPs.
  for (const ProfileEvent& e : prof.events()) {
    EXPECT_GE(e.end_ns, e.start_ns) << e.name;
    EXPECT_LE(static_cast<double>(e.end_ns) * 1e-6, prof.wall_ms()) << e.name;
    if (e.name == "linear" && !e.backward) {
      EXPECT_GT(e.flops, 0u);
    }
  }
  EXPECT_EQ(detail::tls_op_observer, nullptr);
}

TEST(Profiler, ShapesFlopsAndBytesFollowTheShapes) {
  Mlp m;
  Profiler prof;
  m.step();
  prof.stop();
  const ProfileEvent* first_linear = nullptr;
  const ProfileEvent* its_backward = nullptr;
  for (const ProfileEvent& e : prof.events()) {
    if (!e.backward && e.name == "linear" && !first_linear) first_linear = &e;
    if (e.backward && e.name == "LinearBackward") its_backward = &e;  // the last one: layer 1
  }
  ASSERT_TRUE(first_linear && its_backward);
  // x [128, 512] @ w1^T [512, 256] + b1: 2 * 128 * 256 * 512 multiply-adds, 128 * 256 adds
  const uint64_t flops = 2ull * 128 * 256 * 512 + 128 * 256;
  EXPECT_EQ(first_linear->flops, flops);
  ASSERT_EQ(first_linear->input_shapes.size(), 3u);
  EXPECT_EQ(first_linear->input_shapes[0], Shape({128, 512}));
  EXPECT_EQ(first_linear->input_shapes[1], Shape({256, 512}));
  EXPECT_EQ(first_linear->output_shape, Shape({128, 256}));
  EXPECT_EQ(first_linear->input_dtypes[0], DType::Float32);
  EXPECT_EQ(first_linear->bytes, 4ull * (128 * 512 + 256 * 512 + 256 + 128 * 256));
  EXPECT_EQ(its_backward->flops, 2 * flops);
  // its gradients: none for x (no grad needed), w1's and b1's
  ASSERT_EQ(its_backward->input_shapes.size(), 3u);
  EXPECT_EQ(its_backward->input_shapes[1], Shape({256, 512}));
  EXPECT_EQ(its_backward->bytes, 4ull * (256 * 512 + 256));
}

TEST(Profiler, TopLevelEventsDoNotOverlapAndSumToTheWallTime) {
  Mlp m;
  m.step();
  Profiler prof;
  for (int i = 0; i < 3; ++i) m.step();
  prof.stop();
  std::vector<const ProfileEvent*> top;
  for (const ProfileEvent& e : prof.events())
    if (e.depth == 0) top.push_back(&e);
  double sum = 0;
  for (std::size_t i = 0; i < top.size(); ++i) {
    sum += top[i]->duration_ms();
    if (i > 0) {
      EXPECT_GE(top[i]->start_ns, top[i - 1]->end_ns) << top[i]->name;
    }
  }
  // Between events: the engine's bookkeeping and this loop; the ops dominate at these sizes.
  EXPECT_LE(sum, prof.wall_ms());
  EXPECT_GE(sum, 0.5 * prof.wall_ms()) << prof.table();
  // nested events lie inside a top-level one
  for (const ProfileEvent& e : prof.events()) {
    if (e.depth == 0) continue;
    bool inside = false;
    for (const ProfileEvent* t : top) inside |= t->start_ns <= e.start_ns && e.end_ns <= t->end_ns;
    EXPECT_TRUE(inside) << e.name;
  }
  // the summary sums the same events
  double summed = 0;
  int64_t counted = 0;
  const std::vector<ProfileSummary> s = prof.summary();
  for (std::size_t i = 0; i < s.size(); ++i) {
    summed += s[i].total_ms;
    counted += s[i].count;
    if (i > 0) {
      EXPECT_GE(s[i - 1].total_ms, s[i].total_ms);
    }
    EXPECT_NEAR(s[i].mean_ms * static_cast<double>(s[i].count), s[i].total_ms, 1e-9);
  }
  EXPECT_NEAR(summed, sum, 1e-6);
  EXPECT_EQ(counted, static_cast<int64_t>(prof.events().size()));
  EXPECT_NE(prof.table().find("LinearBackward"), std::string::npos);
}

TEST(Profiler, ChromeTraceIsTraceEventJsonOfTheSameEvents) {
  Mlp m;
  Profiler prof;
  m.step();
  prof.stop();
  const auto path = std::filesystem::temp_directory_path() / "adjoint_profiler_test_trace.json";
  prof.write_chrome_trace(path.string());
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  ASSERT_TRUE(trace.contains("traceEvents"));
  const nlohmann::json& events = trace["traceEvents"];
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), prof.events().size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    const ProfileEvent& want = prof.events()[i];
    EXPECT_EQ(e.at("ph"), "X");  // a complete event: ts and dur in microseconds
    EXPECT_EQ(e.at("name"), want.name);
    EXPECT_EQ(e.at("cat"), want.backward ? "backward" : "forward");
    EXPECT_TRUE(e.at("ts").is_number() && e.at("dur").is_number());
    EXPECT_NEAR(e.at("ts").get<double>(), static_cast<double>(want.start_ns) * 1e-3, 1e-3);
    EXPECT_NEAR(e.at("dur").get<double>(), want.duration_ms() * 1e3, 1e-3);
    EXPECT_TRUE(e.at("pid").is_number_integer() && e.at("tid").is_number_integer());
    EXPECT_EQ(e.at("args").at("flops").get<uint64_t>(), want.flops);
  }
}

TEST(Profiler, AnOpThatThrowsLeavesNoEventAndProfilersNest) {
  // The inputs are made before the profilers start: factories are ops they see too.
  const Tensor a = ones({2, 3}), b = ones({4});
  Profiler outer;
  {
    Profiler inner;
    EXPECT_THROW(matmul(a, a), Error);
    Tensor y = exp(b);
    inner.stop();
    ASSERT_EQ(inner.events().size(), 1u);
    EXPECT_EQ(inner.events()[0].name, "exp");
    EXPECT_EQ(inner.events()[0].depth, 0);  // not inside the op that threw
  }
  Tensor z = sin(b);
  outer.stop();
  const auto fwd = count_by_name(outer.events(), false);
  EXPECT_EQ(fwd.count("matmul"), 0u);
  EXPECT_EQ(fwd.at("exp"), 1);  // the inner profiler passed it on
  EXPECT_EQ(fwd.at("sin"), 1);
}

TEST(Profiler, StoppedOrDestroyedBelowALaterObserverKeepsTheChainSound) {
  // A profiler destroyed while a memory timeline made after it still records stays in the
  // thread's observer chain, passing events on, instead of leaving the timeline pointing at
  // freed memory (this test crashes under ASan otherwise).
  const Tensor x = ones({3});  // made before any observer starts: factories are ops too
  auto prof = std::make_unique<Profiler>();
  MemoryTimeline timeline;
  prof.reset();
  Tensor y = exp(x);
  timeline.stop();
  std::size_t forward = 0;
  for (const MemoryEvent& e : timeline.events()) forward += e.phase == MemoryPhase::Forward;
  EXPECT_EQ(forward, 1u);  // exp reached the timeline through the chain
  // A timeline that stopped below a later profiler and then records again does not make the
  // chain a cycle (each op would otherwise recurse until the stack overflows).
  {
    auto first = std::make_unique<MemoryTimeline>();
    Profiler above;
    first.reset();  // stops below the profiler: stays linked
    MemoryTimeline again;
    Tensor z = sin(x);
    above.stop();
    again.stop();
    ASSERT_EQ(above.events().size(), 1u);
    EXPECT_EQ(above.events()[0].name, "sin");
  }
  Profiler last;
  Tensor w = cos(x);
  last.stop();
  EXPECT_EQ(last.events().size(), 1u);
}
