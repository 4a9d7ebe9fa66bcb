// A plain-loop float64 reference for the nn tests: linear, layer norm, causal self-attention,
// GELU (tanh form) and the whole GPT forward and loss, written from the formulas in
// ../shared/bench/README.md with std:: math only (no adjoint ops), so it can serve as an
// independent oracle. Parameters come as a map from dotted names to row-major values.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace adjoint::testing::oracle {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

/// y[r, o] = b[o] + Σ_i x[r, i] w[o, i], for `rows` rows; b may be empty.
inline Vec linear(const Vec& x, int64_t rows, int64_t in, const Vec& w, const Vec& b, int64_t out) {
  Vec y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

/// Layer norm of each row of length d (biased variance), then * w + b.
inline Vec layer_norm(const Vec& x, int64_t rows, int64_t d, const Vec& w, const Vec& b,
                      double eps = 1e-5) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    var /= static_cast<double>(d);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = (x[r * d + i] - mean) * inv * w[i] + b[i];
  }
  return y;
}

inline double gelu_tanh(double u) {
  return 0.5 * u * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}

/// Causal self-attention on x [B, T, d] with the given qkv and proj weights: query i
/// attends to keys j <= i only (the masked scores are skipped, not set to -inf).
inline Vec attention(const Vec& x, int64_t B, int64_t T, int64_t d, int64_t H, const Vec& qkv_w,
                     const Vec& qkv_b, const Vec& proj_w, const Vec& proj_b) {
  const int64_t hd = d / H;
  const Vec qkv = linear(x, B * T, d, qkv_w, qkv_b, 3 * d);  // [B, T, 3d]
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t e) {
    return qkv[(b * T + t) * 3 * d + part * d + h * hd + e];
  };
  Vec y(B * T * d);  // heads concatenated
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        Vec s(i + 1);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) z += (s[j] = std::exp(s[j] - m));
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += s[j] / z * at(b, j, 2, h, e);
          y[(b * T + i) * d + h * hd + e] = acc;
        }
      }
  return linear(y, B * T, d, proj_w, proj_b, d);
}

struct GptShape {
  int64_t vocab, context, d, heads, layers;
};

/// Logits [B, T, vocab] of the GPT in include/adjoint/nn/gpt.h (no dropout).
inline Vec gpt_logits(const Params& p, const GptShape& s, const std::vector<int64_t>& idx,
                      int64_t B, int64_t T) {
  const int64_t d = s.d, rows = B * T;
  const Vec& wte = p.at("wte.weight");
  const Vec& wpe = p.at("wpe.weight");
  Vec x(rows * d);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < d; ++e)
        x[(b * T + t) * d + e] = wte[idx[b * T + t] * d + e] + wpe[t * d + e];
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string pre = "blocks." + std::to_string(l) + ".";
    auto P = [&](const std::string& n) -> const Vec& { return p.at(pre + n); };
    Vec h = layer_norm(x, rows, d, P("ln1.weight"), P("ln1.bias"));
    Vec a = attention(h, B, T, d, s.heads, P("attn.qkv.weight"), P("attn.qkv.bias"),
                      P("attn.proj.weight"), P("attn.proj.bias"));
    for (int64_t i = 0; i < rows * d; ++i) x[i] += a[i];
    h = layer_norm(x, rows, d, P("ln2.weight"), P("ln2.bias"));
    Vec f = linear(h, rows, d, P("mlp.fc.weight"), P("mlp.fc.bias"), 4 * d);
    for (double& v : f) v = gelu_tanh(v);
    Vec o = linear(f, rows, 4 * d, P("mlp.fc_out.weight"), P("mlp.fc_out.bias"), d);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += o[i];
  }
  Vec h = layer_norm(x, rows, d, p.at("ln_f.weight"), p.at("ln_f.bias"));
  return linear(h, rows, d, wte, {}, s.vocab);  // tied head
}

/// Mean over the B·T positions of -log softmax(logits)[target].
inline double gpt_loss(const Params& p, const GptShape& s, const std::vector<int64_t>& idx,
                       const std::vector<int64_t>& targets, int64_t B, int64_t T) {
  const Vec logits = gpt_logits(p, s, idx, B, T);
  double total = 0;
  for (int64_t r = 0; r < B * T; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < s.vocab; ++c) m = std::max(m, logits[r * s.vocab + c]);
    double z = 0;
    for (int64_t c = 0; c < s.vocab; ++c) z += std::exp(logits[r * s.vocab + c] - m);
    total += m + std::log(z) - logits[r * s.vocab + targets[r]];
  }
  return total / static_cast<double>(B * T);
}

}  // namespace adjoint::testing::oracle
