// Tests for the trainer's gradient health (tools/gradient_health.h): recorded gradient, weight
// and update norms equal norms computed directly from .grad and the weights (on an MLP with a
// plain SGD step, whose update is lr·g, and through Trainer::train_step on a tiny GPT); records
// every N steps; layer grouping; the vanish and explode warnings; the NaN/Inf stop names the
// parameter and leaves the weights alone; grads.csv and grads.svg hold what was recorded.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "gradient_health.h"
#include "support/expect.h"
#include "trainer_test_util.h"

using namespace adjoint;
using adjoint::testing::contains;
using adjoint::testing::expect_error;
using tools::GradientHealth;
using tools::GradientHealthOptions;

namespace {

// The oracle: the 2-norm from the values, in double.
double direct_norm(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s += v * v;
  return std::sqrt(s);
}

struct Mlp {
  std::shared_ptr<nn::MLP> net;
  Tensor x, y;
  explicit Mlp(uint64_t seed) {
    Generator gen(seed);
    net = std::make_shared<nn::MLP>(std::vector<int64_t>{3, 8, 8, 2}, nn::Activation::Tanh, true,
                                    &gen);
    x = randn({16, 3}, {}, &gen);
    y = randint(0, 2, {16}, &gen);
  }
  double backward() {
    net->zero_grad();
    Tensor loss = cross_entropy((*net)(x), y);
    loss.backward();
    return loss.item<double>();
  }
  void sgd(double lr) {
    NoGradGuard no_grad;
    for (Tensor p : net->parameters()) p.sub_(p.grad(), lr);
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(GradientHealth, LayersGroupParametersByModuleAndIndex) {
  EXPECT_EQ(tools::layer_of("blocks.2.attn.qkv.weight"), "blocks.2");
  EXPECT_EQ(tools::layer_of("wte.weight"), "wte");
  EXPECT_EQ(tools::layer_of("0.bias"), "0");
  EXPECT_EQ(tools::layer_of("w"), "w");
  EXPECT_EQ(tools::layer_of("encoder.layers.3.weight"), "encoder");
  Mlp m(1);
  GradientHealth h(m.net->named_parameters(), {});
  EXPECT_EQ(h.layers(), (std::vector<std::string>{"0", "2", "4"}));
}

TEST(GradientHealth, RecordsEqualNormsComputedFromGradAndTheSgdUpdate) {
  Mlp m(2);
  GradientHealth h(m.net->named_parameters(), {.every = 2});
  const double lr = 0.05;
  for (int64_t step = 1; step <= 4; ++step) {
    const double loss = m.backward();
    std::vector<double> grad_norms, weight_norms;
    for (const Tensor& p : m.net->parameters()) {
      grad_norms.push_back(direct_norm(p.grad()));
      weight_norms.push_back(direct_norm(p));
    }
    h.after_backward(step, loss);
    m.sgd(lr);
    h.after_update();
    if (step % 2 != 0) {
      EXPECT_EQ(h.records().size(), static_cast<std::size_t>(step / 2));
      continue;
    }
    ASSERT_EQ(h.records().size(), static_cast<std::size_t>(step / 2));
    const tools::GradientRecord& r = h.records().back();
    EXPECT_EQ(r.step, step);
    ASSERT_EQ(r.grad_norm.size(), grad_norms.size());
    ASSERT_EQ(r.update_norm.size(), grad_norms.size());
    for (std::size_t i = 0; i < grad_norms.size(); ++i) {
      EXPECT_NEAR(r.grad_norm[i], grad_norms[i], 1e-5 * grad_norms[i]) << h.names()[i];
      EXPECT_NEAR(r.weight_norm[i], weight_norms[i], 1e-5 * weight_norms[i]) << h.names()[i];
      // SGD moves each weight by lr·g exactly (up to float32 rounding of the subtraction).
      EXPECT_NEAR(r.update_norm[i], lr * grad_norms[i], 1e-4 * lr * grad_norms[i] + 1e-7)
          << h.names()[i];
    }
    // A layer's norm is the root of its parameters' sums of squares.
    EXPECT_NEAR(h.layer_norm(r.grad_norm, 1), std::hypot(grad_norms[2], grad_norms[3]), 1e-6);
  }
}

TEST(GradientHealth, TrainerRecordsTheGradientsItLeavesInGrad) {
  const data::ByteDataset data = trainer_test::corpus();
  tools::TrainConfig c = trainer_test::tiny();
  c.grad_clip = 0;  // clipping rescales .grad in place after the record
  tools::Trainer trainer(c, data);
  GradientHealth h(trainer.model().named_parameters(), {.every = 1});
  const std::vector<Tensor> params = trainer.model().parameters();
  for (int step = 1; step <= 3; ++step) {
    std::vector<Tensor> before;
    for (const Tensor& p : params) before.push_back(p.detach().clone());
    trainer.train_step(nullptr, &h);
    ASSERT_EQ(h.records().size(), static_cast<std::size_t>(step));
    const tools::GradientRecord& r = h.records().back();
    EXPECT_EQ(r.step, step);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const double g = direct_norm(params[i].grad());  // AdamW leaves .grad as backward made it
      const double u = direct_norm(params[i].detach() - before[i]);
      EXPECT_NEAR(r.grad_norm[i], g, 1e-5 * g + 1e-12) << h.names()[i];
      EXPECT_NEAR(r.weight_norm[i], direct_norm(before[i]), 1e-5 * direct_norm(before[i]));
      EXPECT_NEAR(r.update_norm[i], u, 1e-5 * u + 1e-12) << h.names()[i];
    }
  }
}

TEST(GradientHealth, ANanGradientStopsBeforeTheUpdateNamingTheParameter) {
  Mlp m(3);
  // Poison one gradient on purpose with a tensor hook.
  Tensor victim = m.net->get_parameter("2.bias");
  victim.register_hook([](const Tensor& g) { return g * NAN; });
  GradientHealth h(m.net->named_parameters(), {.every = 10});  // not a record step
  const double loss = m.backward();
  expect_error([&] { h.after_backward(3, loss); }, ErrorKind::Value,
               {"[train] step 3: the gradient of 2.bias [8] (float32) holds 8 NaN and 0 infinite",
                "Stopped before the optimizer"});
  // An infinity is caught too, and a later poisoned parameter is counted.
  Mlp m2(4);
  m2.net->get_parameter("0.weight").register_hook([](const Tensor& g) {
    return g * INFINITY + 1.0;  // +inf or -inf, never 0 * inf: no NaN
  });
  m2.net->get_parameter("4.bias").register_hook([](const Tensor& g) { return g * NAN; });
  GradientHealth h2(m2.net->named_parameters(), {});
  const double loss2 = m2.backward();
  expect_error([&] { h2.after_backward(1, loss2); }, ErrorKind::Value,
               {"0.weight [8, 3] (float32) holds 0 NaN and 24 infinite values",
                "(and 1 later parameters' too)"});
}

TEST(GradientHealth, ExplodingLayersAreReportedOncePerStretch) {
  Mlp m(5);
  GradientHealth h(m.net->named_parameters(),
                   {.every = 1, .vanish_below = 0, .explode_above = 1e-9});
  for (int64_t step = 1; step <= 3; ++step) {
    h.after_backward(step, m.backward());
    h.after_update();
    const std::vector<std::string> w = h.take_warnings();
    if (step == 1) {
      ASSERT_EQ(w.size(), 3u);  // every layer, once
      EXPECT_TRUE(contains(w[0], "step 1: the gradients of layer '0' explode: norm ")) << w[0];
      EXPECT_TRUE(contains(w[0], "above 1e-09")) << w[0];
      EXPECT_TRUE(contains(w[2], "layer '4'")) << w[2];
    } else {
      EXPECT_TRUE(w.empty()) << w[0];
    }
  }
}

TEST(GradientHealth, VanishingNeedsKRecordsInARow) {
  Mlp m(6);
  GradientHealth h(m.net->named_parameters(),
                   {.every = 1, .vanish_below = 1e9, .vanish_records = 3, .explode_above = 1e10});
  for (int64_t step = 1; step <= 4; ++step) {
    h.after_backward(step, m.backward());
    const std::vector<std::string> w = h.take_warnings();
    if (step == 3) {
      ASSERT_EQ(w.size(), 3u);
      EXPECT_TRUE(contains(w[1],
                           "step 3: the gradients of layer '2' vanish: norm below 1e+09 for "
                           "3 records in a row"))
          << w[1];
    } else {
      EXPECT_TRUE(w.empty()) << "step " << step << ": " << w[0];
    }
  }
}

TEST(GradientHealth, BadOptionsAreRefused) {
  Mlp m(7);
  expect_error([&] { GradientHealth(m.net->named_parameters(), {.every = -1}); }, ErrorKind::Value,
               {"every >= 0", "got every -1"});
  expect_error(
      [&] { GradientHealth(m.net->named_parameters(), {.vanish_below = 1, .explode_above = 0.5}); },
      ErrorKind::Value, {"vanish_below < explode_above"});
}

TEST(GradientHealth, CsvAndSvgHoldTheRecords) {
  Mlp m(8);
  GradientHealth h(m.net->named_parameters(), {.every = 1});
  for (int64_t step = 1; step <= 2; ++step) {
    h.after_backward(step, m.backward());
    m.sgd(0.1);
    h.after_update();
  }
  const auto dir = std::filesystem::temp_directory_path() / "adjoint_gradient_health_test";
  std::filesystem::create_directories(dir);
  tools::write_gradient_csv(h, (dir / "grads.csv").string());
  tools::write_gradient_svg(h, (dir / "grads.svg").string(), "test");
  const std::string csv = read((dir / "grads.csv").string());
  std::istringstream lines(csv);
  std::string line, header;
  std::getline(lines, header);
  EXPECT_EQ(header, "step,parameter,layer,grad_norm,weight_norm,update_norm,update_ratio");
  int rows = 0;
  while (std::getline(lines, line)) {
    if (rows == 0) {
      EXPECT_TRUE(line.starts_with("1,0.weight,0,")) << line;
      // The ratio column is update_norm / weight_norm of the same record.
      std::vector<double> v;
      std::stringstream cells(line);
      std::string cell;
      for (int i = 0; std::getline(cells, cell, ','); ++i)
        if (i >= 3) v.push_back(std::stod(cell));
      ASSERT_EQ(v.size(), 4u);
      EXPECT_NEAR(v[3], v[2] / v[1], 1e-6 * v[3]);
      EXPECT_NEAR(v[0], h.records()[0].grad_norm[0], 1e-6 * v[0]);
    }
    ++rows;
  }
  EXPECT_EQ(rows, 2 * 6);  // two records of six parameters
  const std::string svg = read((dir / "grads.svg").string());
  EXPECT_TRUE(svg.starts_with("<svg xmlns"));
  EXPECT_TRUE(contains(svg, "log10 gradient norm"));
  EXPECT_TRUE(contains(svg, "update / weight per layer"));
  EXPECT_TRUE(contains(svg, ">4</text>"));  // the last layer's legend entry
  std::filesystem::remove_all(dir);
}
