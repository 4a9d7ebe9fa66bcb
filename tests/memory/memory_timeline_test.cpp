// MemoryTimeline (memory.h): one event per forward op and per backward node with the bytes
// expected after each for a known graph, the peak within a node, stop(), nesting, threads, and
// the CSV and SVG files: written atomically (no temporary left behind), well-formed, and an IO
// error naming the writer when the folder does not exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kN = 1024;
constexpr std::size_t kF32 = 4 * kN;  // one float32 [kN] tensor: exactly one allocator class
constexpr std::size_t kScalar = 64;   // a 0-d float32 tensor takes the smallest class

std::vector<std::string> ops_of(const std::vector<MemoryEvent>& events) {
  std::vector<std::string> ops;
  for (const MemoryEvent& e : events) ops.push_back(e.op);
  return ops;
}

// x -> a = exp(x) -> b = sin(a) -> c = b * x -> loss = sum(c): saved a (twice), b and x.
struct KnownGraph {
  Tensor x = randn({kN}).requires_grad_(true);
  Tensor a, b, c, loss;
  void forward() {
    a = exp(x);
    b = sin(a);
    c = b * x;
    loss = c.sum();
  }
};

TEST(MemoryTimeline, OneEventPerOpWithTheExpectedBytes) {
  KnownGraph g;
  MemoryTimeline timeline;
  const std::size_t s0 = timeline.start().storage_bytes;
  EXPECT_EQ(timeline.start().phase, MemoryPhase::Start);
  EXPECT_EQ(timeline.start().saved_bytes, 0u);
  g.forward();
  g.loss.backward();
  timeline.stop();

  // backward() seeds the loss's gradient with ones_like: a factory the timeline sees too,
  // as its allocation is real (PyTorch's profiler shows it as aten::ones_like).
  const std::vector<MemoryEvent>& ev = timeline.events();
  EXPECT_EQ(ops_of(ev), (std::vector<std::string>{"exp", "sin", "mul", "sum", "ones", "SumBackward",
                                                  "MulBackward", "SinBackward", "ExpBackward",
                                                  "AccumulateGrad"}));
  ASSERT_EQ(ev.size(), 10u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ev[i].phase, MemoryPhase::Forward);
  for (int i = 5; i < 10; ++i) EXPECT_EQ(ev[i].phase, MemoryPhase::Backward);

  const std::size_t saved[] = {kF32,     kF32, 3 * kF32, 3 * kF32, 3 * kF32,
                               3 * kF32, kF32, kF32,     0,        0};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ev[i].saved_bytes, saved[i]) << ev[i].op;
  // Each event's peak covers the event itself and what happened since the one before.
  EXPECT_EQ(ev[2].saved_peak_bytes, 3 * kF32);
  EXPECT_EQ(ev[6].saved_peak_bytes, 3 * kF32);  // MulBackward started from 3 * kF32
  EXPECT_EQ(ev[7].saved_peak_bytes, kF32);

  // Storage: each forward op adds its output (the graph's tensors stay referenced).
  EXPECT_EQ(ev[0].storage_bytes, s0 + kF32);
  EXPECT_EQ(ev[1].storage_bytes, s0 + 2 * kF32);
  EXPECT_EQ(ev[2].storage_bytes, s0 + 3 * kF32);
  EXPECT_EQ(ev[3].storage_bytes, s0 + 3 * kF32 + kScalar);
  EXPECT_EQ(ev[4].storage_bytes, s0 + 3 * kF32 + 2 * kScalar);  // the seed
  // After backward: the forward's tensors plus x.grad, and nothing else left over.
  EXPECT_EQ(memory_stats().current_bytes, s0 + 4 * kF32 + kScalar);
  EXPECT_GE(ev[9].storage_bytes, s0 + 4 * kF32 + kScalar);
}

TEST(MemoryTimeline, StopEndsRecording) {
  KnownGraph g;
  MemoryTimeline timeline;
  EXPECT_TRUE(timeline.recording());
  EXPECT_TRUE(saved_memory_tracking());
  Tensor y = exp(g.x);
  timeline.stop();
  timeline.stop();  // idempotent
  EXPECT_FALSE(timeline.recording());
  EXPECT_FALSE(saved_memory_tracking());
  Tensor z = sin(g.x);
  EXPECT_EQ(ops_of(timeline.events()), std::vector<std::string>{"exp"});
}

TEST(MemoryTimeline, NestedTimelinesSeeTheirOwnLifetimes) {
  KnownGraph g;
  MemoryTimeline outer;
  Tensor y = exp(g.x);
  std::vector<MemoryEvent> inner_events;
  {
    MemoryTimeline inner;
    EXPECT_EQ(inner.start().saved_bytes, kF32);
    Tensor z = sin(y);
    inner_events = inner.events();
  }
  Tensor w = cos(y);
  EXPECT_EQ(ops_of(inner_events), std::vector<std::string>{"sin"});
  EXPECT_EQ(ops_of(outer.events()), (std::vector<std::string>{"exp", "sin", "cos"}));
  EXPECT_EQ(outer.events()[1].saved_bytes, inner_events[0].saved_bytes);
}

TEST(MemoryTimeline, RecordsItsOwnThreadOnly) {
  KnownGraph g;
  MemoryTimeline timeline;
  std::thread other([&] {
    Tensor y = exp(g.x);  // another thread: no event here
    expect_error([&] { timeline.stop(); }, ErrorKind::Value,
                 {"MemoryTimeline.stop", "thread that made it"});
  });
  other.join();
  Tensor z = sin(g.x);
  EXPECT_TRUE(timeline.recording());
  EXPECT_EQ(ops_of(timeline.events()), std::vector<std::string>{"sin"});
}

// A node that holds saved tensors only while it runs, as a checkpoint's recomputation does:
// the event after it shows the bytes back down, and its peak shows what it held.
struct Recompute : Function<Recompute> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x.clone();
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    Tensor x = ctx.get_saved()[0].detach().requires_grad_(true);
    EnableGradGuard enable;
    Tensor y = exp(exp(x));  // two saved outputs, alive until the end of this backward
    return {autograd::grad({y}, {x}, {g[0]})[0]};
  }
  static std::string name() { return "Recompute"; }
};

TEST(MemoryTimeline, PeakWithinANodeShowsWhatItHeldWhileRunning) {
  Tensor x = randn({kN}).requires_grad_(true);
  MemoryTimeline timeline;
  Tensor loss = Recompute::apply(x).sum();
  loss.backward();
  const MemoryEvent* node = nullptr;
  for (const MemoryEvent& e : timeline.events())
    if (e.op == "RecomputeBackward") node = &e;
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->saved_bytes, 0u);
  EXPECT_GE(node->saved_peak_bytes, 3 * kF32);  // x, and exp's two outputs
  // The ops of the recomputation are the node's: no forward events inside backward.
  bool forward_after_backward = false, in_backward = false;
  for (const MemoryEvent& e : timeline.events()) {
    in_backward |= e.phase == MemoryPhase::Backward;
    forward_after_backward |= in_backward && e.phase == MemoryPhase::Forward;
  }
  EXPECT_FALSE(forward_after_backward);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TempDir {
  fs::path path =
      fs::temp_directory_path() /
      ("adjoint_timeline_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST(MemoryTimeline, WritesCsv) {
  KnownGraph g;
  MemoryTimeline timeline;
  g.forward();
  g.loss.backward();
  timeline.stop();
  TempDir dir;
  timeline.write_csv((dir.path / "memory.csv").string());
  EXPECT_EQ(dir.files(), std::vector<std::string>{"memory.csv"});  // no temporary left

  std::istringstream in(read_file(dir.path / "memory.csv"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "index,phase,op,saved_bytes,saved_peak_bytes,storage_bytes");
  std::vector<MemoryEvent> all{timeline.start()};
  all.insert(all.end(), timeline.events().begin(), timeline.events().end());
  std::size_t i = 0;
  for (; std::getline(in, line); ++i) {
    ASSERT_LT(i, all.size());
    const MemoryEvent& e = all[i];
    EXPECT_EQ(line, std::to_string(i) + "," + to_string(e.phase) + "," + e.op + "," +
                        std::to_string(e.saved_bytes) + "," + std::to_string(e.saved_peak_bytes) +
                        "," + std::to_string(e.storage_bytes));
  }
  EXPECT_EQ(i, 11u);  // start + 4 forward ops + the seed + 5 backward nodes
  EXPECT_EQ(timeline.csv(), read_file(dir.path / "memory.csv"));
}

// Every element is self-closing or closed on its line, and <svg> is opened and closed once.
void expect_well_formed_svg(const std::string& svg) {
  ASSERT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  ASSERT_GE(svg.size(), 7u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  std::istringstream in(svg);
  std::string line;
  int open_svg = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    ASSERT_EQ(line[0], '<') << line;
    if (line.rfind("<svg", 0) == 0) {
      ++open_svg;
    } else if (line == "</svg>") {
      --open_svg;
    } else if (line.rfind("<text", 0) == 0) {
      EXPECT_EQ(line.substr(line.size() - 7), "</text>") << line;
    } else {
      EXPECT_EQ(line.substr(line.size() - 2), "/>") << line;
    }
  }
  EXPECT_EQ(open_svg, 0);
}

std::size_t count(const std::string& s, const std::string& sub) {
  std::size_t n = 0;
  for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

TEST(MemoryTimeline, WritesSvg) {
  KnownGraph g;
  MemoryTimeline timeline;
  for (int step = 0; step < 2; ++step) {
    g.forward();
    g.loss.backward();
  }
  timeline.stop();
  TempDir dir;
  timeline.write_svg((dir.path / "memory.svg").string(), "two steps <of> a graph");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"memory.svg"});
  const std::string svg = read_file(dir.path / "memory.svg");
  expect_well_formed_svg(svg);
  EXPECT_EQ(svg, timeline.svg("two steps <of> a graph"));
  EXPECT_NE(svg.find("two steps &lt;of&gt; a graph"), std::string::npos);
  EXPECT_NE(svg.find("saved activations"), std::string::npos);
  EXPECT_NE(svg.find("all tensor storage"), std::string::npos);
  EXPECT_NE(svg.find(">KiB<"), std::string::npos);  // 12 KiB at most: the unit is KiB
  // Storage, saved, and a dashed guide at the start of each backward pass.
  EXPECT_EQ(count(svg, "<polyline"), 4u);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);
  EXPECT_EQ(count(svg, "backward starts"), 1u);  // one legend entry for the guides
}

TEST(MemoryTimeline, WriteErrorsNameTheWriterAndLeaveNothing) {
  MemoryTimeline timeline;
  timeline.stop();
  TempDir dir;
  const std::string missing = (dir.path / "no_such_dir" / "m.csv").string();
  expect_error([&] { timeline.write_csv(missing); }, ErrorKind::IO,
               {"MemoryTimeline.write_csv", "no_such_dir"});
  expect_error([&] { timeline.write_svg((dir.path / "no" / "m.svg").string()); }, ErrorKind::IO,
               {"MemoryTimeline.write_svg"});
  EXPECT_TRUE(dir.files().empty());
}

}  // namespace
