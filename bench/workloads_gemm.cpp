// `gemm-bf16`: matrix-product throughput in bfloat16 against float32 through adjoint's own
// kernels (public ops, adjoint's thread pool), at the product shapes of the `mlp` and `gpt-tiny`
// workloads: each forward linear, a weight-gradient product (a transposed operand) and the
// attention products of one head batch. Inputs are made in their dtype beforehand; the bfloat16
// time includes rounding the float32 accumulator to the bfloat16 output. Reports GFLOP/s per
// shape and dtype, the bfloat16/float32 ratio over each workload's shapes (total flops over
// total time), and which bfloat16 kernel ran (bf16_gemm_path).
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "report.h"

namespace bench {
namespace {

struct Shape3 {
  const char* name;
  const char* workload;  // "mlp" or "gpt"
  int64_t batch, m, k, n;
  bool trans_a;  // A given as the transposed view of a [k, m] tensor (a weight gradient)
};

constexpr Shape3 kShapes[] = {
    {"mlp_fc1", "mlp", 1, 128, 784, 1024, false},
    {"mlp_fc2", "mlp", 1, 128, 1024, 1024, false},
    {"mlp_fc2_dw", "mlp", 1, 1024, 128, 1024, true},
    {"mlp_fc1_dw", "mlp", 1, 1024, 128, 784, true},
    {"gpt_qkv", "gpt", 1, 2048, 256, 768, false},
    {"gpt_proj", "gpt", 1, 2048, 256, 256, false},
    {"gpt_fc", "gpt", 1, 2048, 256, 1024, false},
    {"gpt_fc_out", "gpt", 1, 2048, 1024, 256, false},
    {"gpt_fc_dw", "gpt", 1, 1024, 2048, 256, true},
    {"gpt_att_scores", "gpt", 64, 128, 64, 128, false},
    {"gpt_att_values", "gpt", 64, 128, 128, 64, false},
};

// Median seconds of one product over at least `min_s` seconds of calls (and 5 calls).
double time_product(const adjoint::Tensor& a, const adjoint::Tensor& b, double min_s) {
  for (int i = 0; i < 3; ++i) (void)adjoint::matmul(a, b);
  Samples s;
  double spent = 0;
  while (spent < min_s || s.v.size() < 5) {
    const auto t0 = Clock::now();
    adjoint::Tensor c = adjoint::matmul(a, b);
    const double t = ms(t0, Clock::now()) / 1e3;
    s.add(t);
    spent += t;
  }
  return s.median();
}

void gemm_bf16(const Opts& o, Json& j) {
  using adjoint::DType;
  using adjoint::Tensor;
  adjoint::Generator gen(0);
  const double min_s = 0.05 * o.steps;  // --steps scales the time per case (default 0.3 s)
  double flops_mlp = 0, t32_mlp = 0, t16_mlp = 0, flops_gpt = 0, t32_gpt = 0, t16_gpt = 0;
  for (const Shape3& s : kShapes) {
    const adjoint::Shape a_shape = s.batch > 1 ? adjoint::Shape{s.batch, s.m, s.k}
                                   : s.trans_a ? adjoint::Shape{s.k, s.m}
                                               : adjoint::Shape{s.m, s.k};
    const adjoint::Shape b_shape =
        s.batch > 1 ? adjoint::Shape{s.batch, s.k, s.n} : adjoint::Shape{s.k, s.n};
    Tensor a = adjoint::randn(a_shape, DType::Float32, &gen);
    Tensor b = adjoint::randn(b_shape, DType::Float32, &gen);
    if (s.trans_a) a = a.t();
    Tensor a16 = a.to(DType::BFloat16), b16 = b.to(DType::BFloat16);
    const double flops = 2.0 * s.batch * s.m * s.k * s.n;
    const double t32 = time_product(a, b, min_s), t16 = time_product(a16, b16, min_s);
    j.num(std::string(s.name) + "_f32_gflops", flops / t32 * 1e-9);
    j.num(std::string(s.name) + "_bf16_gflops", flops / t16 * 1e-9);
    const bool mlp = std::string(s.workload) == "mlp";
    (mlp ? flops_mlp : flops_gpt) += flops;
    (mlp ? t32_mlp : t32_gpt) += t32;
    (mlp ? t16_mlp : t16_gpt) += t16;
  }
  common_fields(j, o, Samples{{(t16_mlp + t16_gpt) * 1e3}});
  j.str("bf16_gemm_path", adjoint::bf16_matmul_backend());
  j.str("bfloat16_conversion", adjoint::bfloat16_conversion_path());
  j.num("mlp_f32_gflops", flops_mlp / t32_mlp * 1e-9);
  j.num("mlp_bf16_gflops", flops_mlp / t16_mlp * 1e-9);
  j.num("mlp_bf16_over_f32", t32_mlp / t16_mlp);
  j.num("gpt_f32_gflops", flops_gpt / t32_gpt * 1e-9);
  j.num("gpt_bf16_gflops", flops_gpt / t16_gpt * 1e-9);
  j.num("gpt_bf16_over_f32", t32_gpt / t16_gpt);
}

static RegisterWorkload register_gemm_bf16{"gemm-bf16", gemm_bf16, 6};

}  // namespace
}  // namespace bench
