// `attention`: the attention core alone, forward and backward of sum(w * attention(q, k, v)),
// causal, on the fused kernel against the two matmul/softmax paths: `module` is what
// nn::CausalSelfAttention computes without `fused` (matmul, masked_softmax, matmul, the scale
// folded into q: gpt-long's --attention math), `math` is scaled_dot_product_attention_math (a
// where-masked safe softmax, as PyTorch's math backend). This is the comparison PyTorch's
// flash-attention claims are made on (attention alone, not a training step). Shapes: gpt-long's
// (B 2, H 4, L 1024, E 64), gpt-tiny's (B 16, L 128) and the same 2,048 tokens at other lengths.
// --precision bf16 runs every path under autocast from float32 leaves, as the gpt-long bf16 step
// does, and adds the fused kernel with its blocks widened to float32 (`fused_widened`: the
// 16-bit products forced onto the widened path for that call only; Note [bfloat16 attention
// blocks] in src/backend/cpu/attention.cpp). The paths alternate within each repetition; times
// are medians of the repetitions (wall, ms) and ratios medians of the per-repetition ratios.
#include <cmath>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/cpu/gemm16.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::DType;
using adjoint::Tensor;

struct AttentionShape {
  const char* name;
  int64_t batch, heads, length, dim;
};

constexpr AttentionShape kAttentionShapes[] = {
    {"gpt_long", 2, 4, 1024, 64}, {"gpt_tiny", 16, 4, 128, 64}, {"L64", 32, 4, 64, 64},
    {"L256", 8, 4, 256, 64},      {"L512", 4, 4, 512, 64},      {"L2048", 1, 4, 2048, 64},
};

double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

void attention(const Opts& o, Json& j) {
  const bool bf16 = o.precision == "bf16";
  std::vector<std::string> paths = {"fused", "module", "math"};
  if (bf16) paths.push_back("fused_widened");
  for (const AttentionShape& s : kAttentionShapes) {
    adjoint::Generator gen(0);
    const adjoint::Shape shape{s.batch, s.heads, s.length, s.dim};
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
    const Tensor q = (adjoint::randn(shape, DType::Float32, &gen) * scale).requires_grad_(true);
    const Tensor k = adjoint::randn(shape, DType::Float32, &gen).requires_grad_(true);
    const Tensor v = adjoint::randn(shape, DType::Float32, &gen).requires_grad_(true);
    const Tensor w = adjoint::randn(shape, DType::Float32, &gen);
    const Tensor pos = adjoint::arange(s.length);
    const Tensor future = adjoint::gt(pos.unsqueeze(0), pos.unsqueeze(1));  // the module's mask
    auto step = [&](const std::string& path) {
      std::optional<adjoint::Autocast> amp;
      autocast_forward(amp, o);
      std::optional<adjoint::kernels::Gemm16Path> before;
      if (path == "fused_widened")
        before = adjoint::kernels::set_gemm16_path(DType::BFloat16,
                                                   adjoint::kernels::Gemm16Path::Widened);
      Tensor y;
      if (path == "fused" || path == "fused_widened") {
        y = adjoint::scaled_dot_product_attention(q, k, v, {}, 0, true, 1.0);
      } else if (path == "module") {
        const Tensor scores = adjoint::matmul(q, k.transpose(-2, -1));
        y = adjoint::matmul(adjoint::masked_softmax(scores, future, -1), v);
      } else {
        y = adjoint::scaled_dot_product_attention_math(q, k, v, {}, 0, true, 1.0);
      }
      const Tensor loss = (y.to(DType::Float32) * w).sum();
      amp.reset();
      const std::vector<Tensor> g = adjoint::autograd::grad({loss}, {q, k, v});
      if (before) adjoint::kernels::set_gemm16_path(DType::BFloat16, *before);
    };
    for (int i = 0; i < o.warmup; ++i)
      for (const std::string& p : paths) step(p);
    std::vector<Samples> wall(paths.size()), cpu(paths.size()), ratio(paths.size());
    for (int r = 0; r < o.steps; ++r) {
      for (std::size_t i = 0; i < paths.size(); ++i) {
        const double c0 = cpu_ms();
        const auto t0 = Clock::now();
        step(paths[i]);
        wall[i].add(ms(t0, Clock::now()));
        cpu[i].add(cpu_ms() - c0);
      }
      for (std::size_t i = 1; i < paths.size(); ++i)
        ratio[i].add(wall[0].v.back() / wall[i].v.back());
    }
    const std::string prefix = std::string(s.name) + "_";
    for (std::size_t i = 0; i < paths.size(); ++i) {
      j.num(prefix + paths[i] + "_ms", wall[i].median());
      j.num(prefix + paths[i] + "_cpu_ms", cpu[i].median());
      if (i > 0) j.num(prefix + "fused_over_" + paths[i], ratio[i].median());
    }
  }
  common_fields(j, o, Samples{});
}

static RegisterWorkload register_attention{"attention", attention, 5};

}  // namespace
}  // namespace bench
