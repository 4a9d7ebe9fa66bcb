// Tests for nn::GPT: the exact parameter layout and count of the gpt-tiny benchmark model,
// the weight tie (one tensor), a golden float64 test of a tiny GPT whose loss is checked
// against the loop oracle in gpt_oracle.h and whose gradients are checked against central
// finite differences of that oracle, causality of the logits, dropout modes and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "gpt_oracle.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
namespace oracle = adjoint::testing::oracle;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

oracle::Params params_of(const nn::Module& m) {
  oracle::Params p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = values(t);
  return p;
}

constexpr nn::GPTConfig kTiny{/*vocab=*/11, /*context=*/5,  /*d_model=*/8, /*heads=*/2,
                              /*layers=*/2, /*dropout=*/0.0};
constexpr oracle::GptShape kTinyShape{11, 5, 8, 2, 2};
constexpr int64_t kB = 2, kT = 5;

struct Batch {
  Tensor idx, targets;
  std::vector<int64_t> idx_v, targets_v;
};

Batch make_batch(Generator& gen, int64_t B, int64_t T, int64_t vocab) {
  Tensor tokens = randint(0, vocab, {B, T + 1}, &gen);
  Batch b;
  b.idx = tokens.slice(1, 0, T);
  b.targets = tokens.slice(1, 1, T + 1);
  b.idx_v = b.idx.to_vector<int64_t>();
  b.targets_v = b.targets.to_vector<int64_t>();
  return b;
}

// Checks the gradient of the model's loss at `elements` of each named parameter against
// central differences of the oracle's loss (eps 1e-6). The oracle's loss is accurate to a
// few ulps (~1e-15), so the difference quotient carries ~1e-9 of rounding error besides the
// O(eps²) truncation; the tolerance is 1e-6 relative with that 1e-9 as the absolute floor.
void check_gradients(nn::GPT& model, const Batch& batch,
                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& elements) {
  model.zero_grad();
  model.loss(batch.idx, batch.targets).backward();
  const oracle::Params base = params_of(model);
  const double eps = 1e-6;
  for (const auto& [name, where] : elements) {
    const Tensor p = model.get_parameter(name);
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<double> grad = values(p.grad());
    for (int64_t i : where) {
      ASSERT_LT(i, p.numel()) << name;
      oracle::Params plus = base, minus = base;
      plus[name][i] += eps;
      minus[name][i] -= eps;
      const double fd =
          (oracle::gpt_loss(plus, kTinyShape, batch.idx_v, batch.targets_v, kB, kT) -
           oracle::gpt_loss(minus, kTinyShape, batch.idx_v, batch.targets_v, kB, kT)) /
          (2 * eps);
      EXPECT_NEAR(grad[i], fd, 1e-6 * std::abs(fd) + 1e-9) << name << "[" << i << "]";
    }
  }
}

}  // namespace

TEST(GPT, GptTinyLayoutAndParameterCount) {
  Generator gen(0);
  nn::GPT model(nn::GPTConfig{256, 128, 256, 4, 4, 0.0}, &gen);
  // The gpt-tiny model of ../shared/bench/README.md: 3,257,856 parameters.
  EXPECT_EQ(model.num_parameters(), 3257856);
  std::vector<std::pair<std::string, Shape>> want = {{"wte.weight", {256, 256}},
                                                     {"wpe.weight", {128, 256}}};
  for (int i = 0; i < 4; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    std::vector<std::pair<std::string, Shape>> block = {{b + "ln1.weight", {256}},
                                                        {b + "ln1.bias", {256}},
                                                        {b + "attn.qkv.weight", {768, 256}},
                                                        {b + "attn.qkv.bias", {768}},
                                                        {b + "attn.proj.weight", {256, 256}},
                                                        {b + "attn.proj.bias", {256}},
                                                        {b + "ln2.weight", {256}},
                                                        {b + "ln2.bias", {256}},
                                                        {b + "mlp.fc.weight", {1024, 256}},
                                                        {b + "mlp.fc.bias", {1024}},
                                                        {b + "mlp.fc_out.weight", {256, 1024}},
                                                        {b + "mlp.fc_out.bias", {256}}};
    want.insert(want.end(), block.begin(), block.end());
  }
  want.push_back({"ln_f.weight", {256}});
  want.push_back({"ln_f.bias", {256}});
  auto named = model.named_parameters();
  ASSERT_EQ(named.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(named[i].first, want[i].first);
    EXPECT_EQ(named[i].second.shape(), want[i].second) << want[i].first;
  }
  // Embeddings ~ N(0, 0.02²); LayerNorms start at weight 1, bias 0.
  auto rms = [](const Tensor& t) { return std::sqrt(values(t.square().mean())[0]); };
  EXPECT_NEAR(rms(model.wte->weight), 0.02, 0.001);
  EXPECT_NEAR(rms(model.wpe->weight), 0.02, 0.001);
  adjoint::testing::expect_values(model.ln_f->weight.mean(), {1.0});
  adjoint::testing::expect_values(model.get_parameter("blocks.3.ln2.bias").abs().sum(), {0.0});
  // One mask buffer per block.
  EXPECT_EQ(model.named_buffers().size(), 4u);
  EXPECT_EQ(model.named_buffers()[2].first, "blocks.2.attn.mask");
}

TEST(GPT, ForwardShapeAndFirstLossNearLogVocab) {
  Generator gen(1);
  nn::GPT model(nn::GPTConfig{64, 16, 32, 4, 2, 0.0}, &gen);
  Batch batch = make_batch(gen, 3, 16, 64);
  Tensor logits = model(batch.idx);
  EXPECT_EQ(logits.shape(), (Shape{3, 16, 64}));
  // Tiny embeddings make the logits nearly uniform: the loss starts near ln(vocab).
  EXPECT_NEAR(model.loss(batch.idx, batch.targets).item<double>(), std::log(64.0), 0.05);
  // A shorter sequence uses the first rows of wpe.
  EXPECT_EQ(model(batch.idx.slice(1, 0, 7)).shape(), (Shape{3, 7, 64}));
}

TEST(GPT, HeadIsTiedToTheTokenEmbedding) {
  Generator gen(2);
  nn::GPT model(kTiny, &gen);
  for (const auto& [name, t] : model.named_parameters())
    EXPECT_EQ(name.find("head"), std::string::npos) << name;
  EXPECT_EQ(
      model.num_parameters(),
      11 * 8 + 5 * 8 + 2 * (4 * 8 + 8 * 24 + 24 + 8 * 8 + 8 + 8 * 32 + 32 + 32 * 8 + 8) + 2 * 8);
  model.to(DType::Float64);
  Batch batch = make_batch(gen, kB, kT, 11);
  // The logits are ln_f(x) wteᵀ: changing wte changes the head too.
  Tensor before = model(batch.idx);
  {
    NoGradGuard no_grad;
    // Not a constant row: ln_f's output has mean 0 over d, so a constant would cancel.
    model.wte->weight.select(0, 3).add_(randn({8}, DType::Float64, &gen));
  }
  Tensor after = model(batch.idx);
  // Column 3 of the logits moves even at positions whose token is not 3.
  std::vector<double> b = values(before), a = values(after);
  bool moved = false;
  for (int64_t r = 0; r < kB * kT; ++r)
    if (batch.idx_v[r] != 3 && std::abs(a[r * 11 + 3] - b[r * 11 + 3]) > 1e-3) moved = true;
  EXPECT_TRUE(moved);
}

TEST(GPT, GoldenTinyModelInFloat64) {
  Generator gen(3);
  nn::GPT model(kTiny, &gen);
  model.to(DType::Float64);
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.dtype(), DType::Float64);
  Batch batch = make_batch(gen, kB, kT, 11);

  // Loss at init against the oracle.
  const double loss = model.loss(batch.idx, batch.targets).item<double>();
  const double want =
      oracle::gpt_loss(params_of(model), kTinyShape, batch.idx_v, batch.targets_v, kB, kT);
  EXPECT_NEAR(loss, want, 1e-12 * want);
  EXPECT_NEAR(loss, std::log(11.0), 0.05);
  // The logits too, element by element.
  const std::vector<double> logits = values(model(batch.idx));
  const std::vector<double> want_logits =
      oracle::gpt_logits(params_of(model), kTinyShape, batch.idx_v, kB, kT);
  ASSERT_EQ(logits.size(), want_logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], want_logits[i], 1e-13);

  // Gradients at init: an element of wte (used by both the lookup and the tied head, so
  // both contributions must be summed into the one tensor), of a qkv weight, of ln_f's bias.
  const int64_t tok = batch.idx_v[0];
  check_gradients(model, batch,
                  {{"wte.weight", {tok * 8 + 2, 10 * 8 + 5}},
                   {"wpe.weight", {1 * 8 + 3}},
                   {"blocks.0.attn.qkv.weight", {0, 8 * 8 + 3, 17 * 8 + 7}},
                   {"blocks.1.mlp.fc.weight", {5}},
                   {"ln_f.bias", {0, 6}}});
}

TEST(GPT, GoldenTinyModelEveryParameterAwayFromInit) {
  // The same check with every parameter moved off its initial value (LayerNorm 1 and 0 and
  // tiny embeddings would hide swapped or missing terms), on three elements of each tensor.
  Generator gen(4);
  nn::GPT model(kTiny, &gen);
  model.to(DType::Float64);
  {
    NoGradGuard no_grad;
    for (const Tensor& p : model.parameters()) {
      Tensor t = p;
      t.add_(randn(p.shape(), DType::Float64, &gen) * 0.3);
    }
  }
  Batch batch = make_batch(gen, kB, kT, 11);
  const double loss = model.loss(batch.idx, batch.targets).item<double>();
  const double want =
      oracle::gpt_loss(params_of(model), kTinyShape, batch.idx_v, batch.targets_v, kB, kT);
  EXPECT_NEAR(loss, want, 1e-12 * want);
  std::vector<std::pair<std::string, std::vector<int64_t>>> elements;
  for (const auto& [name, t] : model.named_parameters()) {
    const int64_t n = t.numel();
    elements.push_back({name, {0, (n * 2) / 5, n - 1}});
  }
  check_gradients(model, batch, elements);
}

TEST(GPT, LogitsAreCausal) {
  Generator gen(5);
  nn::GPT model(nn::GPTConfig{20, 6, 16, 2, 2, 0.0}, &gen);
  model.to(DType::Float64);
  Tensor idx = randint(0, 20, {2, 6}, &gen);
  std::vector<int64_t> changed_v = idx.to_vector<int64_t>();
  changed_v[1 * 6 + 5] = (changed_v[1 * 6 + 5] + 7) % 20;  // last token of the second row
  Tensor changed = tensor(changed_v, Shape{2, 6});
  const std::vector<double> a = values(model(idx)), b = values(model(changed));
  for (int64_t t = 0; t < 6; ++t) {
    double diff = 0;
    for (int64_t c = 0; c < 20; ++c)
      diff = std::max(diff, std::abs(a[(6 + t) * 20 + c] - b[(6 + t) * 20 + c]));
    if (t < 5) {
      EXPECT_LE(diff, 1e-13) << "position " << t;
    } else {
      EXPECT_GT(diff, 1e-6);
    }
  }
}

TEST(GPT, DropoutFollowsTrainAndEval) {
  Generator gen(6);
  nn::GPT model(nn::GPTConfig{16, 8, 16, 2, 1, 0.2}, &gen);
  Tensor idx = randint(0, 16, {2, 8}, &gen);
  model.eval();
  const std::vector<float> e1 = model(idx).to_vector<float>();
  EXPECT_EQ(model(idx).to_vector<float>(), e1);
  model.train();
  EXPECT_NE(model(idx).to_vector<float>(), e1);
}

TEST(GPT, SameSeedSameModel) {
  Generator g1(7), g2(7);
  nn::GPT a(kTiny, &g1), b(kTiny, &g2);
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
}

TEST(GPT, Errors) {
  Generator gen(8);
  expect_error(
      [&] {
        nn::GPT(nn::GPTConfig{11, 5, 9, 2, 1, 0.0}, &gen);
      },
      ErrorKind::Value, {"[nn.GPT]", "d_model 9", "heads 2"});
  nn::GPT model(kTiny, &gen);
  expect_error([&] { model(zeros({2, 5})); }, ErrorKind::DType, {"[nn.GPT]", "int64"});
  expect_error([&] { model(zeros({5}, DType::Int64)); }, ErrorKind::Shape, {"[B, T]"});
  expect_error(
      [&] {
        model(zeros({1, 6}, DType::Int64));
      },
      ErrorKind::Shape, {"sequence length 6 exceeds the context 5"});
  expect_error(
      [&] {
        model.loss(zeros({2, 5}, DType::Int64), zeros({2, 4}, DType::Int64));
      },
      ErrorKind::Shape, {"[nn.GPT]", "targets [2, 4] (int64)"});
}
