// Checkpointing under a memory budget: the planner's choice is optimal against brute force
// over every subset; on a real MLP and on GPT blocks the measured peak of saved activations is
// within 10 % of the prediction and inside the budget, with the plain run's gradients
// (bitwise); an impossible budget names the smallest reachable peak; FLOP counting, reports
// and byte sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "checkpoint/checkpoint_util.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_bitwise;
using adjoint::testing::expect_error;
using adjoint::testing::GeneratorStates;
using adjoint::testing::grads_of;

namespace {

// ---------------------------------------------------------------------------------------------
// The planner against brute force
// ---------------------------------------------------------------------------------------------

// A synthetic profile: layer i may save its input (storage b_i), its output (b_i+1) and one or
// two storages of its own, as real layers do; b_0 is data (not counted) or an activation.
SequentialProfile synthetic_profile(std::size_t layers, std::mt19937& rng) {
  std::uniform_int_distribution<std::size_t> bytes(1, 64);
  std::uniform_int_distribution<int> coin(0, 1), privates(0, 2);
  std::uniform_int_distribution<uint64_t> flops(1, 8);  // small: ties between plans happen
  SequentialProfile p;
  auto storage = [&](std::size_t b) {
    p.storage_bytes.push_back(b);
    return p.storage_bytes.size() - 1;
  };
  std::vector<std::size_t> boundary;
  for (std::size_t i = 0; i <= layers; ++i) boundary.push_back(storage(bytes(rng) * 16));
  const bool data_input = coin(rng);
  for (std::size_t i = 0; i < layers; ++i) {
    LayerProfile l;
    l.input = i == 0 && data_input ? kNoStorage : boundary[i];
    if (l.input != kNoStorage && coin(rng)) l.saved.push_back(boundary[i]);
    if (coin(rng)) l.saved.push_back(boundary[i + 1]);
    for (int k = privates(rng); k > 0; --k) l.saved.push_back(storage(bytes(rng) * 16));
    l.flops = flops(rng);
    p.layers.push_back(l);
  }
  return p;
}

// Every plan of a profile, by brute force: each layer runs plainly, starts a checkpointed
// segment or extends the one before (segments of at most `max_segment` layers, 0: any).
struct Candidate {
  uint64_t flops;
  std::size_t peak;
};

std::vector<Candidate> all_plans(const SequentialProfile& p, std::size_t max_segment) {
  const std::size_t n = p.layers.size();
  std::vector<Candidate> out;
  std::vector<int> label(n, 0);  // 0 plain, 1 starts a segment, 2 extends one
  while (true) {
    std::vector<CheckpointSegment> segments;
    bool valid = true;
    for (std::size_t i = 0; i < n && valid; ++i) {
      if (label[i] == 1) segments.push_back({i, i + 1});
      if (label[i] == 2) {
        valid = i > 0 && label[i - 1] != 0 &&
                (max_segment == 0 || segments.back().end - segments.back().begin < max_segment);
        if (valid) segments.back().end = i + 1;
      }
    }
    if (valid) {
      const CheckpointPlan plan = predict_checkpoint_plan(p, segments);
      out.push_back({plan.extra_flops, plan.predicted_peak_bytes});
    }
    std::size_t i = 0;  // the next labelling, as a base-3 counter
    while (i < n && ++label[i] == 3) label[i++] = 0;
    if (i == n) break;
  }
  return out;
}

struct Best {
  bool found = false;
  uint64_t flops = 0;
  std::size_t peak = 0;
};

// The cheapest (then lowest-peak) plan that fits.
Best best_plan(const std::vector<Candidate>& plans, std::size_t budget) {
  Best best;
  for (const Candidate& c : plans) {
    if (c.peak > budget) continue;
    if (!best.found || c.flops < best.flops || (c.flops == best.flops && c.peak < best.peak))
      best = {true, c.flops, c.peak};
  }
  return best;
}

std::size_t lowest_peak(const std::vector<Candidate>& plans) {
  std::size_t lowest = std::numeric_limits<std::size_t>::max();
  for (const Candidate& c : plans) lowest = std::min(lowest, c.peak);
  return lowest;
}

void check_against_brute_force(std::size_t max_segment, std::size_t max_layers, int trials) {
  std::mt19937 rng(7 + max_segment);
  int planned = 0, impossible = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const std::size_t n = 1 + trial % max_layers;
    const SequentialProfile p = synthetic_profile(n, rng);
    const std::vector<Candidate> plans = all_plans(p, max_segment);
    const std::size_t lowest = lowest_peak(plans);
    const std::size_t plain = p.plain_peak_bytes();
    // Budgets from below the lowest reachable peak to above the plain one.
    for (double f : {0.9, 1.0, 1.1, 1.3, 1.6, 2.0, 3.0}) {
      const auto budget =
          static_cast<std::size_t>(std::min<double>(static_cast<double>(lowest) * f, plain + 16));
      const Best want = best_plan(plans, budget);
      SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << n << " layers, budget "
                                        << budget << ", lowest " << lowest);
      CheckpointPlanOptions options;
      options.max_segment_layers = max_segment;
      if (!want.found) {
        ++impossible;
        expect_error([&] { plan_checkpoints(p, budget, options); }, ErrorKind::Value,
                     {"[plan_checkpoints]", "budget of " + std::to_string(budget) + " bytes",
                      "smallest predicted peak is " + std::to_string(lowest) + " bytes"});
        continue;
      }
      ++planned;
      const CheckpointPlan plan = plan_checkpoints(p, budget, options);
      EXPECT_EQ(plan.extra_flops, want.flops);
      EXPECT_EQ(plan.predicted_peak_bytes, want.peak);
      EXPECT_LE(plan.predicted_peak_bytes, budget);
      EXPECT_EQ(plan.budget_bytes, budget);
      for (const CheckpointSegment& s : plan.segments)
        if (max_segment) {
          EXPECT_LE(s.end - s.begin, max_segment);
        }
    }
  }
  EXPECT_GT(planned, trials * 3);
  EXPECT_GT(impossible, trials / 4);
}

TEST(CheckpointBudget, PlannerIsOptimalAgainstBruteForce) {
  check_against_brute_force(/*max_segment=*/0, /*max_layers=*/8, 240);
}

TEST(CheckpointBudget, LayerByLayerPlannerIsOptimalAgainstBruteForce) {
  check_against_brute_force(/*max_segment=*/1, /*max_layers=*/10, 300);
}

TEST(CheckpointBudget, SegmentsOfAtMostThreeAreOptimalToo) {
  check_against_brute_force(/*max_segment=*/3, /*max_layers=*/8, 160);
}

// A storage held by layers that are not neighbours (a buffer several layers save): the
// planner may overestimate, but what it accepts fits and costs no less than the optimum.
TEST(CheckpointBudget, SharingBeyondNeighboursStaysWithinTheBudget) {
  std::mt19937 rng(11);
  int planned = 0;
  for (int trial = 0; trial < 100; ++trial) {
    SequentialProfile p = synthetic_profile(2 + trial % 6, rng);
    const std::size_t shared = p.storage_bytes.size();
    p.storage_bytes.push_back(256);
    for (std::size_t i = 0; i < p.layers.size(); i += 2) p.layers[i].saved.push_back(shared);
    const std::vector<Candidate> plans = all_plans(p, 0);
    const auto budget = static_cast<std::size_t>(static_cast<double>(lowest_peak(plans)) * 1.4);
    const Best want = best_plan(plans, budget);
    ASSERT_TRUE(want.found);
    CheckpointPlan plan;
    try {
      plan = plan_checkpoints(p, budget);
    } catch (const Error&) {  // it may miss plans it cannot prove to fit, but never lie
      continue;
    }
    ++planned;
    EXPECT_LE(plan.predicted_peak_bytes, budget);
    EXPECT_GE(plan.extra_flops, want.flops);
  }
  EXPECT_GT(planned, 80);
}

// A hundred layers of varied sizes: the plan fits and recomputes less than a forward.
TEST(CheckpointBudget, HundredLayersFitTheBudget) {
  std::mt19937 rng(13);
  const SequentialProfile p = synthetic_profile(100, rng);
  const std::size_t plain = p.plain_peak_bytes();
  for (double f : {0.4}) {
    const auto budget = static_cast<std::size_t>(f * static_cast<double>(plain));
    const CheckpointPlan plan = plan_checkpoints(p, budget);
    EXPECT_LE(plan.predicted_peak_bytes, budget);
    EXPECT_LT(plan.extra_flops, p.forward_flops());
  }
}

TEST(CheckpointBudget, PredictionOfAHandMadeProfile) {
  // Three layers: each saves its input and 100 bytes of its own; inputs of 10, 20, 30 bytes.
  SequentialProfile p;
  p.storage_bytes = {10, 20, 30, 40, 100, 100, 100};
  for (std::size_t i = 0; i < 3; ++i) {
    LayerProfile l;
    l.input = i;
    l.saved = {i, 4 + i};
    l.flops = 10 * (i + 1);
    p.layers.push_back(l);
  }
  EXPECT_EQ(p.plain_peak_bytes(), 360u);
  const CheckpointPlan plan = predict_checkpoint_layers(p, {false, true, false});
  EXPECT_EQ(plan.forward_bytes, 110u + 20u + 130u);
  EXPECT_EQ(plan.layers[1].recompute_peak_bytes, 110u + 120u);  // layer 0, then all of layer 1
  EXPECT_EQ(plan.predicted_peak_bytes, 260u);
  EXPECT_EQ(plan.extra_flops, 20u);
  EXPECT_EQ(plan.forward_flops, 60u);
  EXPECT_DOUBLE_EQ(plan.extra_fraction(), 20.0 / 60.0);
  EXPECT_EQ(plan.checkpointed(), std::vector<std::size_t>{1});
  // Checkpointing the last layer never helps: it is recomputed at once.
  EXPECT_EQ(predict_checkpoint_layers(p, {false, false, true}).predicted_peak_bytes, 360u);
  // The cheapest plan under 300 bytes checkpoints layer 0 (10 FLOPs) rather than layer 1.
  const CheckpointPlan planned = plan_checkpoints(p, 300);
  EXPECT_EQ(planned.checkpointed(), std::vector<std::size_t>{0});
  EXPECT_EQ(planned.predicted_peak_bytes, 10u + 120u + 130u);
  const std::string table = planned.to_string();
  EXPECT_NE(table.find("budget 300 B"), std::string::npos) << table;
  EXPECT_NE(table.find("checkpoint "), std::string::npos) << table;
  expect_error([&] { predict_checkpoint_layers(p, {true}); }, ErrorKind::Value,
               {"[predict_checkpoint_layers]", "1 decisions", "3 layers"});
  p.layers[2].saved.push_back(99);
  expect_error([&] { plan_checkpoints(p, 1000); }, ErrorKind::Index,
               {"[plan_checkpoints]", "layer 2 saves storage 99"});
}

// ---------------------------------------------------------------------------------------------
// Real models: measured against predicted
// ---------------------------------------------------------------------------------------------

// Linear + Tanh layers of different widths (float32), and the input batch (data: not counted).
struct Mlp {
  std::vector<Tensor> params;
  std::vector<CheckpointLayer> layers;
  Tensor x;
};

Mlp make_mlp() {
  const std::vector<int64_t> widths = {48, 160, 96, 224, 64, 192, 128, 32, 256, 80, 112};
  Generator gen(3);
  Mlp m;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    const double scale = 1 / std::sqrt(static_cast<double>(widths[i]));
    Tensor w = (randn({widths[i + 1], widths[i]}, {}, &gen) * scale).requires_grad_(true);
    Tensor b = (randn({widths[i + 1]}, {}, &gen) * 0.1).requires_grad_(true);
    m.params.push_back(w);
    m.params.push_back(b);
    m.layers.push_back([w, b](const Tensor& h) { return tanh(linear(h, w, b)); });
  }
  m.x = randn({64, widths[0]}, {}, &gen);
  return m;
}

Tensor run_plain(const std::vector<CheckpointLayer>& layers, Tensor x) {
  for (const auto& layer : layers) x = layer(x);
  return x;
}

// Backward from the output itself: no loss op that would save more.
void backward_from(const Tensor& y) { autograd::backward({y}, {ones_like(y)}); }

// For each budget: plan, run with the plan under measurement, compare with the prediction
// and the budget, and compare the gradients with the plain run's.
template <class Run, class Reset>
void check_budgets(const SequentialProfile& profile, const std::vector<double>& fractions,
                   std::vector<Tensor> leaves, Run&& run_with, Reset&& reset, const char* model) {
  const std::size_t plain_predicted = profile.plain_peak_bytes();
  reset();
  const std::size_t plain_measured = measure_saved_peak(
      profile, [&] { backward_from(run_with(predict_checkpoint_plan(profile, {}))); });
  const auto want = grads_of(leaves);
  std::printf("%s: plain peak predicted %zu, measured %zu\n", model, plain_predicted,
              plain_measured);
  EXPECT_NEAR(static_cast<double>(plain_measured), static_cast<double>(plain_predicted),
              0.1 * static_cast<double>(plain_predicted));
  for (double f : fractions) {
    const auto budget = static_cast<std::size_t>(f * static_cast<double>(plain_predicted));
    const CheckpointPlan plan = plan_checkpoints(profile, budget);
    SCOPED_TRACE(plan.to_string());
    for (Tensor& t : leaves) t.zero_grad();
    reset();
    const std::size_t measured =
        measure_saved_peak(profile, [&] { backward_from(run_with(plan)); });
    std::printf(
        "%s: budget %zu (%.2f of plain): %zu layers checkpointed, predicted %zu, measured "
        "%zu (%+.1f%%), extra compute %.1f%%\n",
        model, budget, f, plan.checkpointed().size(), plan.predicted_peak_bytes, measured,
        100.0 * (static_cast<double>(measured) - plan.predicted_peak_bytes) /
            static_cast<double>(plan.predicted_peak_bytes),
        100 * plan.extra_fraction());
    EXPECT_LE(plan.predicted_peak_bytes, budget);
    EXPECT_LE(measured, budget);
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(plan.predicted_peak_bytes),
                0.1 * static_cast<double>(plan.predicted_peak_bytes));
    expect_bitwise(grads_of(leaves), want);
  }
}

// The lowest fraction of the plain peak any plan reaches, plus a little.
double lowest_fraction(const SequentialProfile& p) {
  std::size_t lo = 0, hi = p.plain_peak_bytes();
  while (lo + 1 < hi) {  // the smallest budget that plans
    const std::size_t mid = (lo + hi) / 2;
    try {
      plan_checkpoints(p, mid);
      hi = mid;
    } catch (const Error&) {
      lo = mid;
    }
  }
  return static_cast<double>(hi) / static_cast<double>(p.plain_peak_bytes()) + 0.01;
}

TEST(CheckpointBudget, MlpMeasuredPeakMatchesThePrediction) {
  Mlp m = make_mlp();
  const SequentialProfile profile = profile_sequential(m.layers, m.x);
  ASSERT_EQ(profile.layers.size(), 10u);
  std::printf("%s", profile.to_string().c_str());
  // Each layer saves its output (tanh), and its input (linear) is the previous output.
  EXPECT_EQ(profile.layers[0].input, kNoStorage);  // the data batch
  EXPECT_EQ(profile.layers[3].saved_bytes, 64u * 64 * 4);
  EXPECT_EQ(profile.layers[3].input_bytes, 64u * 224 * 4);
  // Layer by layer, checkpointing cannot help here: every boundary stays held, by the Tanh
  // before it or as a checkpoint's input. Segments drop the boundaries inside them.
  CheckpointPlanOptions one_by_one;
  one_by_one.max_segment_layers = 1;
  expect_error([&] { plan_checkpoints(profile, profile.plain_peak_bytes() - 1, one_by_one); },
               ErrorKind::Value,
               {"smallest predicted peak is " + std::to_string(profile.plain_peak_bytes())});
  const double lowest = lowest_fraction(profile);
  check_budgets(
      profile, {1.0, 0.8, 0.6, 0.45, lowest}, m.params,
      [&](const CheckpointPlan& plan) { return checkpoint_with_plan(m.layers, plan, m.x); }, [] {},
      "mlp");
}

TEST(CheckpointBudget, GptBlocksMeasuredPeakMatchesThePrediction) {
  Generator gen(5);
  const nn::GPTConfig config{/*vocab=*/32, /*context=*/16, /*d_model=*/32, /*heads=*/4,
                             /*layers=*/6, /*dropout=*/0.1};
  nn::GPT model(config, &gen);
  // The blocks' input is an activation (as after the embeddings), so it counts. Each run gets
  // a fresh one, made before measuring (as the embeddings are made before the blocks run).
  Tensor e = randn({4, 16, config.d_model}, {}, &gen).requires_grad_(true);
  Tensor x = e * 2.0;
  GeneratorStates states(module_generators(*model.blocks));
  const SequentialProfile profile = profile_sequential(*model.blocks, x);
  std::printf("%s", profile.to_string().c_str());
  EXPECT_NE(profile.layers[0].input, kNoStorage);
  std::vector<Tensor> leaves = model.blocks->parameters();
  leaves.push_back(e);
  check_budgets(
      profile, {1.0, 0.7, 0.5, 0.35, lowest_fraction(profile)}, leaves,
      [&](const CheckpointPlan& plan) { return checkpoint_with_plan(*model.blocks, plan, x); },
      [&] {
        states.restore();
        x = e * 2.0;
      },
      "gpt blocks");
}

TEST(CheckpointBudget, ProfilingLeavesTheGeneratorsAlone) {
  Generator gen(9);
  auto drop = std::make_shared<nn::Dropout>(0.5, &gen);
  nn::Sequential seq{drop, drop};
  Tensor x = randn({8, 8}).requires_grad_(true);
  const Generator::State before = drop->generator().state();
  const Generator::State default_before = default_generator().state();
  const SequentialProfile p = profile_sequential(seq, x);
  EXPECT_TRUE(adjoint::testing::same_state(drop->generator().state(), before));
  EXPECT_TRUE(adjoint::testing::same_state(default_generator().state(), default_before));
  EXPECT_GT(p.layers[0].saved_bytes, 0u);  // the mask counts: made in the run, freed with it
}

TEST(CheckpointBudget, CountsFlopsPerOp) {
  Tensor w = randn({5, 3}).requires_grad_(true);
  Tensor b = randn({5}).requires_grad_(true);
  Tensor a = randn({3, 7}).requires_grad_(true);
  const std::vector<CheckpointLayer> layers = {
      [&](const Tensor& h) { return tanh(linear(h, w, b)); },  // [4, 3] -> [4, 5]
      [&](const Tensor& h) { return exp(h.view({20})); },      // a view, then exp
      [&](const Tensor& h) {
        return matmul(h.view({4, 5}).slice(1, 0, 3), a);
      }};
  const SequentialProfile p = profile_sequential(layers, randn({4, 3}));
  EXPECT_EQ(p.layers[0].flops, 2u * 4 * 5 * 3 + 4 * 5 + 4 * 5);  // products, bias, tanh
  EXPECT_EQ(p.layers[0].ops, 2);
  EXPECT_EQ(p.layers[1].flops, 20u);
  EXPECT_EQ(p.layers[2].flops, 2u * 4 * 7 * 3);
  EXPECT_EQ(p.forward_flops(), p.layers[0].flops + 20u + 2u * 4 * 7 * 3);
}

TEST(CheckpointBudget, ImpossibleBudgetNamesTheSmallestPeak) {
  Mlp m = make_mlp();
  const SequentialProfile profile = profile_sequential(m.layers, m.x);
  const std::size_t lowest = lowest_peak(all_plans(profile, 0));
  expect_error([&] { plan_checkpoints(profile, lowest - 1); }, ErrorKind::Value,
               {"[plan_checkpoints]", "no plan fits the budget of " + std::to_string(lowest - 1),
                "smallest predicted peak is " + std::to_string(lowest) + " bytes"});
  EXPECT_EQ(plan_checkpoints(profile, lowest).predicted_peak_bytes, lowest);
  expect_error([&] { checkpoint_budget(m.layers, 1000, m.x); }, ErrorKind::Value,
               {"budget of 1000 bytes"});
}

TEST(CheckpointBudget, OneCallAndPlanMismatch) {
  Mlp m = make_mlp();
  const SequentialProfile profile = profile_sequential(m.layers, m.x);
  const std::size_t budget = profile.plain_peak_bytes() / 2;
  backward_from(run_plain(m.layers, m.x));
  const auto want = grads_of(m.params);
  for (Tensor& t : m.params) t.zero_grad();
  std::size_t measured =
      measure_saved_peak(profile, [&] { backward_from(checkpoint_budget(m.layers, budget, m.x)); });
  expect_bitwise(grads_of(m.params), want);
  // The profile inside checkpoint_budget holds about two layers; the run stays in budget.
  EXPECT_LE(measured, budget);
  const CheckpointPlan plan = plan_checkpoints(profile, budget);
  const std::vector<CheckpointLayer> fewer(m.layers.begin(), m.layers.begin() + 3);
  expect_error([&] { checkpoint_with_plan(fewer, plan, m.x); }, ErrorKind::Value,
               {"[checkpoint_with_plan]", "the plan is for 10 layers but there are 3"});
}

TEST(CheckpointBudget, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("1048576"), 1048576u);
  EXPECT_EQ(parse_byte_size("512K"), 512u << 10);
  EXPECT_EQ(parse_byte_size("64M"), 64u << 20);
  EXPECT_EQ(parse_byte_size("64mb"), 64u << 20);
  EXPECT_EQ(parse_byte_size("1.5G"), 3u << 29);
  EXPECT_EQ(parse_byte_size("2GiB"), std::size_t{2} << 30);
  EXPECT_EQ(parse_byte_size("100B"), 100u);
  for (const char* bad : {"", "M", "12X", "-5", "1.2.3", "64MM", "1e3"})
    expect_error([&] { parse_byte_size(bad, "train"); }, ErrorKind::Value,
                 {"[train]", "byte size", std::string("'") + bad + "'"});
}

}  // namespace
