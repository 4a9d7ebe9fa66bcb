// Shared pieces of adjoint-bench: the command-line options, step timing (medians over the
// timed steps, as the libtorch reference reports them), the flat one-line JSON writer and
// the glibc malloc probe used by deep-mlp. Mirrors ../shared/bench/torch_ref.cpp.
#pragma once

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/mixed_precision.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Per-step samples of one phase.
struct Samples {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  double median() const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    if (n == 0) return NAN;
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  double min() const { return v.empty() ? NAN : *std::min_element(v.begin(), v.end()); }
};

/// Flat, ordered JSON object written on one line; numbers as %.6g like torch-ref.
struct Json {
  std::vector<std::string> items;
  static std::string quote(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') {
        r += '\\';
        r += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        r += ' ';
      } else {
        r += c;
      }
    }
    return r + "\"";
  }
  void str(const std::string& k, const std::string& v) {
    items.push_back(quote(k) + ":" + quote(v));
  }
  void integer(const std::string& k, long long v) {
    items.push_back(quote(k) + ":" + std::to_string(v));
  }
  void num(const std::string& k, double v) {
    char buf[64];
    if (std::isfinite(v)) {
      std::snprintf(buf, sizeof buf, "%.6g", v);
    } else {
      std::snprintf(buf, sizeof buf, "null");
    }
    items.push_back(quote(k) + ":" + buf);
  }
  std::string dump() const {
    std::string r = "{";
    for (size_t i = 0; i < items.size(); ++i) r += (i ? "," : "") + items[i];
    return r + "}";
  }
};

struct Opts {
  std::string workload;
  int steps = 0;  // 0: the workload's default
  int warmup = 3;
  int threads = 2;
  int blas_threads = 0;  // 0: same as threads
  bool verbose = false;
  std::string checkpoint = "none";  // deep-mlp and gpt-tiny: none, sqrt, block, budget=BYTES
  std::string precision = "fp32";   // mlp, deep-mlp and gpt-tiny: fp32 or bf16 (autocast)
  bool data_parallel = false;       // mlp and gpt-tiny: DDP over the ranks of an mpirun job
  int zero = 0;                     // with data_parallel, gpt-tiny: ZeRO stage 0, 1 or 2
  int bucket_mb = 25;               // with data_parallel: DDP's bucket cap in MiB
  bool grad_bucket_view = false;    // with data_parallel: DdpOptions::gradient_as_bucket_view
  bool compile = false;  // op-overhead, pointwise-chain, gpt-tiny: the forward through compile
  // gpt-tiny and gpt-long: the whole step (zero_grad, loss, backward, AdamW) as one compiled
  // function (docs/compile.md, "Training steps").
  bool compile_step = false;
  // gpt-tiny and gpt-long: math (matmul / masked softmax / matmul, as torch-ref) or fused
  // (one scaled_dot_product_attention op); empty: the workload's default (gpt-tiny math,
  // gpt-long fused).
  std::string attention;
  bool channels_last = false;  // cnn: X and the conv weights channels-last (NHWC)
};

/// --precision bf16: the forward and the loss under Autocast to bfloat16, as torch-ref runs
/// them under torch.autocast("cpu", dtype=torch.bfloat16). Call with an empty optional that
/// lives as long as the forward.
inline void autocast_forward(std::optional<adjoint::Autocast>& amp, const Opts& o) {
  if (o.precision == "bf16") amp.emplace(adjoint::DType::BFloat16);
}

/// Fields every record has: step counts and whole-step median and minimum.
inline void common_fields(Json& j, const Opts& o, const Samples& total) {
  if (o.verbose) {  // per-step totals to stderr, for looking at noise
    std::fprintf(stderr, "%s step ms:", o.workload.c_str());
    for (double t : total.v) std::fprintf(stderr, " %.2f", t);
    std::fprintf(stderr, "\n");
  }
  j.integer("steps", o.steps);
  j.integer("warmup", o.warmup);
  j.num("ms_per_step", total.median());
  j.num("ms_per_step_min", total.min());
  if (o.precision == "bf16") {  // which kernels ran (ADJOINT_MAX_CPU_ISA lowers both)
    j.str("bf16_gemm_path", adjoint::bf16_matmul_backend());
    j.str("bf16_conversion_path", adjoint::bfloat16_conversion_path());
  }
}

/// Bytes glibc malloc has handed out (all arenas plus mmap-ed chunks), in MiB.
inline double malloc_in_use_mib() {
  struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd) / (1024.0 * 1024.0);
}

constexpr double kMiB = 1024.0 * 1024.0;

/// A workload: its name on the command line, the function that runs it and fills the JSON,
/// and its default number of timed steps.
struct Workload {
  const char* name;
  void (*fn)(const Opts&, Json&);
  int default_steps;
};

/// Every workload, in registration order. Each bench/workloads_*.cpp registers its own with
///   static bench::RegisterWorkload reg{"mlp", mlp, 100};
std::vector<Workload>& workloads();
struct RegisterWorkload {
  RegisterWorkload(const char* name, void (*fn)(const Opts&, Json&), int default_steps) {
    workloads().push_back({name, fn, default_steps});
  }
};

}  // namespace bench
