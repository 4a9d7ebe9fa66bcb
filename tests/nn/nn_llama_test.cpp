// Tests for the Llama block and model (adjoint/nn/llama_block.h, llama.h) against a plain
// composition written here from basic ops (matmul, softmax, masked_fill, sigmoid, index_select),
// with rotary embedding as an explicit rotation matrix per position and grouped-query attention
// as key/value heads repeated by hand: values and gradients in float64. Then the key/value cache
// (a prefix, then one token at a time, and a chunk) against the full forward, greedy generation
// with the cache against generation without, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

// ---- the plain composition (the oracle) ----

Tensor plain_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  return x / sqrt(mean(x * x, {-1}, true) + eps) * w;
}

// x [B, h, T, hd] at positions offset .. offset + T - 1: row t times R_tᵀ, where R_t turns each
// pair of features (i, i + hd/2) by (offset + t) base^(-2i/hd).
Tensor plain_rope(const Tensor& x, int64_t offset, double base) {
  const int64_t T = x.size(2), hd = x.size(3), half = hd / 2;
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> r(hd * hd, 0.0);
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(offset + t) * std::pow(base, -2.0 * i / hd);
      r[i * hd + i] = std::cos(theta);
      r[i * hd + i + half] = -std::sin(theta);
      r[(i + half) * hd + i] = std::sin(theta);
      r[(i + half) * hd + i + half] = std::cos(theta);
    }
    const Tensor rot = tensor(r, Shape{hd, hd});
    rows.push_back(matmul(x.select(2, t), rot.t()));  // [B, h, hd]
  }
  return stack(rows, 2);
}

// Grouped-query causal attention with key/value head h / (H / Hkv) repeated for query head h,
// softmax over masked scores; queries at positions offset + i see keys 0 .. offset + i.
Tensor plain_attention(const nn::GroupedQueryAttention& m, const Tensor& x, double base) {
  const int64_t B = x.size(0), T = x.size(1), H = m.heads(), Hkv = m.kv_heads(), hd = m.head_dim();
  auto heads = [&](const Tensor& w, int64_t h) {
    return matmul(x, w.t()).reshape({B, T, h, hd}).permute({0, 2, 1, 3});
  };
  const Tensor q = plain_rope(heads(m.wq->weight, H), 0, base);
  const Tensor k = plain_rope(heads(m.wk->weight, Hkv), 0, base);
  const Tensor v = heads(m.wv->weight, Hkv);
  std::vector<Tensor> kr, vr;
  for (int64_t h = 0; h < H; ++h) {
    kr.push_back(k.select(1, h / (H / Hkv)));
    vr.push_back(v.select(1, h / (H / Hkv)));
  }
  const Tensor scores = matmul(q, stack(kr, 1).transpose(2, 3)) / std::sqrt(double(hd));
  const Tensor pos = arange(T);
  const Tensor future = gt(pos.unsqueeze(0), pos.unsqueeze(1));  // key j > query i
  const Tensor p =
      softmax(masked_fill(scores, future, -std::numeric_limits<double>::infinity()), -1);
  const Tensor y = matmul(p, stack(vr, 1)).permute({0, 2, 1, 3}).reshape({B, T, H * hd});
  return matmul(y, m.wo->weight.t());
}

Tensor plain_swiglu(const nn::SwiGLU& f, const Tensor& x) {
  const Tensor gate = matmul(x, f.w1->weight.t());
  const Tensor up = matmul(x, f.w3->weight.t());
  return matmul(gate * sigmoid(gate) * up, f.w2->weight.t());
}

Tensor plain_block(const nn::LlamaBlock& b, const Tensor& x, double base) {
  const double eps = b.attention_norm->eps();
  const Tensor h =
      x + plain_attention(*b.attention, plain_rms_norm(x, b.attention_norm->weight, eps), base);
  return h + plain_swiglu(*b.feed_forward, plain_rms_norm(h, b.ffn_norm->weight, eps));
}

Tensor plain_llama(const nn::Llama& m, const Tensor& idx) {
  const int64_t B = idx.size(0), T = idx.size(1);
  const Tensor emb = m.tok_embeddings->weight;
  Tensor x = index_select(emb, 0, idx.reshape({B * T})).reshape({B, T, emb.size(1)});
  for (std::size_t i = 0; i < m.layers->size(); ++i)
    x = plain_block(*m.layers->at<nn::LlamaBlock>(i), x, m.config().rope_base);
  x = plain_rms_norm(x, m.norm->weight, m.config().norm_eps);
  return matmul(x, (m.output ? m.output->weight : emb).t());
}

// The gradients of sum(out * probe) with respect to x and every parameter of `m`.
std::vector<std::vector<double>> grads_of(nn::Module& m, const Tensor& x, const Tensor& out,
                                          const Tensor& probe) {
  std::vector<Tensor> wrt = m.parameters();
  wrt.push_back(x);
  std::vector<std::vector<double>> g;
  for (const Tensor& t : autograd::grad({sum(out * probe)}, wrt)) g.push_back(values(t));
  return g;
}

nn::LlamaConfig tiny_config(int64_t kv_heads, bool tied) {
  return {.vocab = 29,
          .context = 16,
          .d_model = 16,
          .heads = 4,
          .kv_heads = kv_heads,
          .layers = 2,
          .hidden = 0,
          .rope_base = 10000,
          .norm_eps = 1e-5,
          .tie_embeddings = tied};
}

}  // namespace

TEST(SwiGLU, MatchesPlainFormula) {
  Generator gen(1);
  nn::SwiGLU f(6, 10, &gen);
  f.to(DType::Float64);
  std::vector<std::string> names;
  for (const auto& [n, t] : f.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"w1.weight", "w2.weight", "w3.weight"}));
  const Tensor x = randn({2, 3, 6}, DType::Float64, &gen);
  expect_near_all(values(f(x)), values(plain_swiglu(f, x)), 1e-14);
}

TEST(GroupedQueryAttention, MatchesExplicitlyRepeatedHeads) {
  for (int64_t kv : {int64_t{1}, int64_t{2}, int64_t{4}}) {
    Generator gen(10 + kv);
    nn::GroupedQueryAttention attn(16, 4, kv, 8, 10000, &gen);
    attn.to(DType::Float64);
    EXPECT_EQ(attn.wk->weight.shape(), (Shape{kv * 4, 16}));
    const Tensor x = randn({2, 7, 16}, DType::Float64, &gen).requires_grad_(true);
    const Tensor y = attn(x);
    const Tensor want = plain_attention(attn, x, 10000);
    expect_near_all(values(y), values(want), 1e-12);
    const Tensor probe = randn(y.shape(), DType::Float64, &gen);
    const auto got = grads_of(attn, x, y, probe), oracle = grads_of(attn, x, want, probe);
    for (std::size_t i = 0; i < got.size(); ++i) expect_near_all(got[i], oracle[i], 1e-11);
  }
}

TEST(LlamaBlock, MatchesPlainComposition) {
  Generator gen(20);
  nn::LlamaBlock block(16, 4, 2, 24, 8, 500.0, 1e-5, &gen);
  block.to(DType::Float64);
  {
    NoGradGuard no_grad;  // weights of the norms away from 1, so they are tested too
    for (const Tensor& w : {block.attention_norm->weight, block.ffn_norm->weight})
      Tensor(w).copy_(1 + 0.3 * randn(w.shape(), DType::Float64, &gen));
  }
  const Tensor x = randn({2, 8, 16}, DType::Float64, &gen).requires_grad_(true);
  const Tensor y = block(x);
  const Tensor want = plain_block(block, x, 500.0);
  expect_near_all(values(y), values(want), 1e-12);
  const Tensor probe = randn(y.shape(), DType::Float64, &gen);
  const auto got = grads_of(block, x, y, probe), oracle = grads_of(block, x, want, probe);
  ASSERT_EQ(got.size(), 10u);  // 2 norms, wq wk wv wo, w1 w2 w3, and x
  for (std::size_t i = 0; i < got.size(); ++i) expect_near_all(got[i], oracle[i], 1e-11);
}

TEST(Llama, MatchesPlainCompositionTiedAndUntied) {
  for (bool tied : {false, true}) {
    Generator gen(30);
    nn::Llama model(tiny_config(2, tied), &gen);
    model.to(DType::Float64);
    const auto params = model.named_parameters();
    EXPECT_EQ(params.front().first, "tok_embeddings.weight");
    EXPECT_EQ(params[1].first, "layers.0.attention_norm.weight");
    EXPECT_EQ(params[2].first, "layers.0.attention.wq.weight");
    EXPECT_EQ(params.back().first, tied ? "norm.weight" : "output.weight");
    EXPECT_EQ(params.size(), 2u + 9u * 2 + (tied ? 0 : 1));
    EXPECT_EQ(model.config().hidden, nn::llama_hidden(16));
    const Tensor idx = randint(0, 29, {3, 11}, &gen);
    const Tensor logits = model(idx);
    ASSERT_EQ(logits.shape(), (Shape{3, 11, 29}));
    const Tensor want = plain_llama(model, idx);
    expect_near_all(values(logits), values(want), 1e-11);
    // The loss is the mean cross-entropy of those logits.
    const Tensor targets = randint(0, 29, {3, 11}, &gen);
    const std::vector<double> l = values(want);
    const std::vector<int64_t> tg = targets.to_vector<int64_t>();
    double nll = 0;
    for (int64_t r = 0; r < 33; ++r) {
      double peak = -1e300, z = 0;
      for (int64_t c = 0; c < 29; ++c) peak = std::max(peak, l[r * 29 + c]);
      for (int64_t c = 0; c < 29; ++c) z += std::exp(l[r * 29 + c] - peak);
      nll += std::log(z) + peak - l[r * 29 + tg[r]];
    }
    EXPECT_NEAR(model.loss(idx, targets).item<double>(), nll / 33, 1e-12);
  }
}

TEST(Llama, TiedHeadGetsBothGradients) {
  Generator gen(31);
  nn::Llama model(tiny_config(2, true), &gen);
  model.to(DType::Float64);
  const Tensor idx = randint(0, 29, {2, 5}, &gen);
  model.loss(idx, randint(0, 29, {2, 5}, &gen)).backward();
  // Rows never looked up get their gradient from the head alone: nonzero everywhere.
  const std::vector<double> g = values(model.tok_embeddings->weight.grad());
  for (int64_t row = 0; row < 29; ++row) {
    double s = 0;
    for (int64_t c = 0; c < 16; ++c) s += std::abs(g[row * 16 + c]);
    EXPECT_GT(s, 0) << "row " << row;
  }
}

// Under autocast the projections are bfloat16 while the residual stream stays float32: the
// rotary tables follow the projections. The loss stays near float32's (bfloat16 keeps 8 bits).
TEST(Llama, AutocastBfloat16TracksFloat32) {
  Generator gen(32);
  nn::Llama model(tiny_config(2, false), &gen);
  const Tensor idx = randint(0, 29, {2, 9}, &gen), targets = randint(0, 29, {2, 9}, &gen);
  const double f32 = model.loss(idx, targets).item<double>();
  Tensor low;
  {
    Autocast amp(DType::BFloat16);
    low = model.loss(idx, targets);
  }
  EXPECT_NEAR(low.item<double>(), f32, 0.02 * f32);
  low.backward();  // and the gradients reach the float32 weights
  EXPECT_EQ(model.layers->at<nn::LlamaBlock>(1)->attention->wq->weight.grad().dtype(),
            DType::Float32);
}

TEST(KVCache, PrefixThenOneTokenAtATimeMatchesFullForward) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    Generator gen(40);
    nn::Llama model(tiny_config(2, false), &gen);
    model.to(dtype);
    model.eval();
    const Tensor idx = randint(0, 29, {2, 14}, &gen);
    InferenceMode inference;
    const std::vector<double> full = values(model(idx));  // [2, 14, 29]
    std::vector<nn::KVCache> caches = model.make_caches();
    auto expect_rows = [&](const Tensor& logits, int64_t from) {
      const std::vector<double> got = values(logits);
      const int64_t T = logits.size(1);
      const double tol = dtype == DType::Float64 ? 1e-12 : 2e-5;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < 29; ++c)
            EXPECT_NEAR(got[(b * T + t) * 29 + c], full[(b * 14 + from + t) * 29 + c], tol)
                << to_string(dtype) << " position " << from + t;
    };
    expect_rows(model.forward(idx.narrow(1, 0, 5), caches), 0);  // the prefix, P = 5
    for (int64_t t = 5; t < 11; ++t) {                           // one token at a time
      expect_rows(model.forward(idx.narrow(1, t, 1), caches), t);
      EXPECT_EQ(caches[1].length(), t + 1);
    }
    expect_rows(model.forward(idx.narrow(1, 11, 3), caches), 11);  // a chunk: the masked path
  }
}

TEST(KVCache, GreedyGenerationWithCacheEqualsRecomputation) {
  Generator gen(41);
  nn::Llama model(tiny_config(1, true), &gen);
  model.eval();
  InferenceMode inference;
  const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  auto argmax_last = [](const Tensor& logits) {
    return argmax(logits.select(1, logits.size(1) - 1).reshape({-1})).item<int64_t>();
  };
  // Without a cache: the whole sequence again at every step.
  std::vector<int64_t> plain = prompt;
  std::vector<std::vector<double>> plain_logits;
  while (plain.size() < 16) {
    const Tensor logits = model(tensor(plain, Shape{1, static_cast<int64_t>(plain.size())}));
    plain_logits.push_back(values(logits.select(1, logits.size(1) - 1)));
    plain.push_back(argmax_last(logits));
  }
  // With: the prompt once, then the last token only.
  std::vector<nn::KVCache> caches = model.make_caches();
  std::vector<int64_t> cached = prompt;
  Tensor logits = model.forward(tensor(prompt, Shape{1, 5}), caches);
  for (std::size_t step = 0; cached.size() < 16; ++step) {
    expect_near_all(values(logits.select(1, logits.size(1) - 1)), plain_logits[step], 1e-5);
    cached.push_back(argmax_last(logits));
    if (cached.size() < 16)
      logits = model.forward(tensor(std::vector<int64_t>{cached.back()}, Shape{1, 1}), caches);
  }
  EXPECT_EQ(cached, plain);
  EXPECT_EQ(caches[0].length(), 15);
}

TEST(KVCache, Errors) {
  nn::KVCache cache(4);
  const Tensor k = zeros({1, 2, 3, 4});
  {
    NoGradGuard no_grad;
    cache.append(k, k);
    expect_error([&] { cache.append(k, k); }, ErrorKind::Shape, {"nn.KVCache", "capacity 4"});
    expect_error(
        [&] {
          cache.append(zeros({1, 3, 1, 4}), zeros({1, 3, 1, 4}));
        },
        ErrorKind::Shape, {"nn.KVCache", "[1, 3, 1, 4]", "[1, 2, 4, 4]"});
    expect_error([&] { cache.append(k, zeros({1, 2, 3, 5})); }, ErrorKind::Shape, {"nn.KVCache"});
  }
  const Tensor kg = zeros({1, 2, 1, 4}).requires_grad_(true);
  expect_error([&] { cache.append(kg, kg); }, ErrorKind::Value, {"nn.KVCache", "NoGradGuard"});
  expect_error([] { nn::KVCache(0); }, ErrorKind::Value, {"nn.KVCache"});
}

TEST(Llama, Errors) {
  expect_error([] { nn::GroupedQueryAttention(16, 4, 3, 8); }, ErrorKind::Value,
               {"nn.GroupedQueryAttention", "kv_heads 3"});
  expect_error([] { nn::GroupedQueryAttention(12, 4, 4, 8); }, ErrorKind::Value,
               {"nn.GroupedQueryAttention", "even"});
  nn::GroupedQueryAttention attn(16, 4, 2, 8);
  expect_error(
      [&] {
        attn(zeros({1, 9, 16}));
      },
      ErrorKind::Shape, {"nn.GroupedQueryAttention", "context 8"});
  expect_error(
      [&] {
        attn(zeros({1, 3, 15}));
      },
      ErrorKind::Shape, {"nn.GroupedQueryAttention", "[1, 3, 15]"});
  nn::LlamaConfig bad = tiny_config(2, false);
  bad.kv_heads = 3;
  expect_error([&] { nn::Llama m(bad); }, ErrorKind::Value, {"nn.Llama", "kv_heads 3"});
  nn::Llama model(tiny_config(2, false));
  expect_error([&] { model(zeros({1, 3})); }, ErrorKind::DType, {"nn.Llama", "int64"});
  expect_error(
      [&] {
        model(zeros({1, 17}, DType::Int64));
      },
      ErrorKind::Shape, {"nn.Llama", "context 16"});
  NoGradGuard no_grad;
  std::vector<nn::KVCache> one(1, nn::KVCache(16));
  expect_error(
      [&] {
        model.forward(zeros({1, 3}, DType::Int64), one);
      },
      ErrorKind::Value, {"nn.Llama", "1 caches for 2 layers"});
  std::vector<nn::KVCache> caches = model.make_caches();
  model.forward(zeros({1, 10}, DType::Int64), caches);
  expect_error(
      [&] {
        model.forward(zeros({1, 7}, DType::Int64), caches);
      },
      ErrorKind::Shape, {"nn.Llama", "positions 10 .. 16", "context 16"});
}
