// adjoint-bench: runs one workload of ../shared/bench/README.md with adjoint and prints one
// JSON line with the same fields as the libtorch reference (torch-ref), "impl":"adjoint".
// Workloads register themselves from bench/workloads_*.cpp (see report.h).
//
//   adjoint-bench --workload NAME [--steps N] [--warmup N]
//                 [--threads N] [--blas-threads N]
//                 [--checkpoint none|sqrt|block|budget=BYTES] [--precision fp32|bf16]
//                 [--data-parallel [--zero 0|1|2] [--bucket-mb 25] [--grad-bucket-view]]
//                 [--compile] [--compile-step] [--attention math|fused] [--channels-last]
//                 [--verbose]
// --channels-last (cnn): X and the conv weights stored NHWC, as torch-ref's.
// --attention (gpt-tiny, gpt-long): the attention core as matmul / masked softmax / matmul
// (math, gpt-tiny's default) or as one fused scaled_dot_product_attention op (gpt-long's).
// --data-parallel (mlp, gpt-tiny, gpt-long) runs under `mpirun -np N`: each rank its slice of the
// batch, gradients averaged by DistributedDataParallel during backward; rank 0 prints the line.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/distributed.h"
#include "checkpoint_modes.h"
#include "report.h"

// From OpenBLAS, which adjoint links for its matmuls.
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace bench {
std::vector<Workload>& workloads() {
  static std::vector<Workload> all;
  return all;
}
}  // namespace bench

namespace {

void print_usage(const char* argv0) {
  std::string names;
  for (const auto& w : bench::workloads())
    names += (names.empty() ? "" : "|") + std::string(w.name);
  std::fprintf(stderr,
               "usage: %s --workload {%s} [--steps N] [--warmup N] "
               "[--threads N] [--blas-threads N] [--checkpoint none|sqrt|block|budget=BYTES] "
               "[--precision fp32|bf16] [--data-parallel [--zero 0|1|2] [--bucket-mb 25] "
               "[--grad-bucket-view]] [--compile] [--compile-step] [--attention math|fused] "
               "[--channels-last] [--verbose]\n",
               argv0, names.c_str());
}

// Parses a positive (or, with allow_zero, non-negative) integer option value.
bool parse_int(const char* s, int& out, bool allow_zero) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < (allow_zero ? 0 : 1) || v > 1000000) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--verbose") {
      o.verbose = true;
      continue;
    }
    if (a == "--data-parallel") {
      o.data_parallel = true;
      continue;
    }
    if (a == "--grad-bucket-view") {
      o.grad_bucket_view = true;
      continue;
    }
    if (a == "--channels-last") {
      o.channels_last = true;
      continue;
    }
    if (a == "--compile") {
      o.compile = true;
      continue;
    }
    if (a == "--compile-step") {
      o.compile_step = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      print_usage(argv[0]);
      return 0;
    }
    int* target = a == "--zero"           ? &o.zero
                  : a == "--bucket-mb"    ? &o.bucket_mb
                  : a == "--steps"        ? &o.steps
                  : a == "--warmup"       ? &o.warmup
                  : a == "--threads"      ? &o.threads
                  : a == "--blas-threads" ? &o.blas_threads
                                          : nullptr;
    if (a == "--workload" && i + 1 < argc) {
      o.workload = argv[++i];
    } else if (a == "--checkpoint" && i + 1 < argc) {
      o.checkpoint = argv[++i];
      if (!bench::valid_checkpoint_mode(o.checkpoint)) {
        std::fprintf(stderr,
                     "error: --checkpoint must be none, sqrt, block or budget=BYTES, got '%s'\n",
                     o.checkpoint.c_str());
        return 2;
      }
    } else if (a == "--attention" && i + 1 < argc) {
      o.attention = argv[++i];
      if (o.attention != "math" && o.attention != "fused") {
        std::fprintf(stderr, "error: --attention must be math or fused, got '%s'\n",
                     o.attention.c_str());
        return 2;
      }
    } else if (a == "--precision" && i + 1 < argc) {
      o.precision = argv[++i];
      if (o.precision != "fp32" && o.precision != "bf16") {
        std::fprintf(stderr, "error: --precision must be fp32 or bf16, got '%s'\n",
                     o.precision.c_str());
        return 2;
      }
    } else if (target && i + 1 < argc) {
      if (!parse_int(argv[++i], *target,
                     target == &o.steps || target == &o.blas_threads || target == &o.zero)) {
        std::fprintf(stderr, "error: bad value '%s' for %s\n", argv[i], a.c_str());
        print_usage(argv[0]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "error: unknown or incomplete option '%s'\n", a.c_str());
      print_usage(argv[0]);
      return 2;
    }
  }
  const bench::Workload* w = nullptr;
  for (const auto& t : bench::workloads())
    if (o.workload == t.name) w = &t;
  if (!w) {
    if (o.workload.empty()) {
      std::fprintf(stderr, "error: --workload is required\n");
    } else {
      std::fprintf(stderr, "error: unknown workload '%s'; adjoint-bench has:", o.workload.c_str());
      for (const auto& t : bench::workloads()) std::fprintf(stderr, " %s", t.name);
      std::fprintf(stderr, "\n");
    }
    print_usage(argv[0]);
    return 2;
  }
  const bool gpt = o.workload == "gpt-tiny" || o.workload == "gpt-long";
  if (o.precision != "fp32" && o.workload != "mlp" && o.workload != "deep-mlp" && !gpt &&
      o.workload != "lstm" && o.workload != "lstm-select" && o.workload != "cnn" &&
      o.workload != "attention") {
    std::fprintf(stderr,
                 "error: --precision bf16 applies to mlp, deep-mlp, gpt-tiny, gpt-long, cnn, "
                 "lstm and attention, not %s\n",
                 o.workload.c_str());
    return 2;
  }
  if (o.channels_last && o.workload != "cnn") {
    std::fprintf(stderr, "error: --channels-last applies to cnn, not %s\n", o.workload.c_str());
    return 2;
  }
  if (!o.attention.empty() && !gpt) {
    std::fprintf(stderr, "error: --attention applies to gpt-tiny and gpt-long, not %s\n",
                 o.workload.c_str());
    return 2;
  }
  if (o.data_parallel && o.workload != "mlp" && !gpt) {
    std::fprintf(stderr, "error: --data-parallel applies to mlp, gpt-tiny and gpt-long, not %s\n",
                 o.workload.c_str());
    return 2;
  }
  if (o.zero != 0 && (!o.data_parallel || !gpt || o.zero > 2)) {
    std::fprintf(stderr, "error: --zero 1|2 needs --data-parallel and gpt-tiny or gpt-long\n");
    return 2;
  }
  if (o.compile && o.workload != "op-overhead" && o.workload != "pointwise-chain" && !gpt) {
    std::fprintf(stderr,
                 "error: --compile applies to op-overhead, pointwise-chain, gpt-tiny and "
                 "gpt-long, not %s\n",
                 o.workload.c_str());
    return 2;
  }
  if (o.compile_step && (!gpt || o.compile || o.data_parallel)) {
    std::fprintf(stderr,
                 "error: --compile-step applies to gpt-tiny and gpt-long, without --compile or "
                 "--data-parallel\n");
    return 2;
  }
  if (o.steps == 0) o.steps = w->default_steps;
  if (o.blas_threads < 1) o.blas_threads = o.threads;

  // adjoint's own pool (elementwise, reductions) and OpenBLAS's pthread pool.
  adjoint::set_num_threads(o.threads);
  if (o.blas_threads != o.threads) openblas_set_num_threads(o.blas_threads);

  // --data-parallel: MPI for the whole run (finalised when main returns).
  std::optional<adjoint::dist::Environment> env;
  if (o.data_parallel) env.emplace();
  const bool prints = !env || env->group().rank() == 0;

  bench::Json j;
  j.str("impl", "adjoint");
  j.str("workload", o.workload);
  j.integer("threads", o.threads);
  if (o.compile) j.str("mode", "compile");            // the forward through adjoint::compile
  if (o.compile_step) j.str("mode", "compile-step");  // the whole step compiled
  try {
    w->fn(o, j);
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective: end the whole job.
    if (env) env->group().abort(std::string("error: ") + e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // adjoint's pool sleeps on a condition variable between jobs and uses no OpenMP.
  j.str("omp_wait_policy", "n/a");
  j.integer("adjoint_threads", adjoint::get_num_threads());
  j.integer("blas_threads", openblas_get_num_threads());
  j.str("blas", std::string(openblas_get_config()) + " core=" + openblas_get_corename());
  j.str("sgemm_path", adjoint::float32_matmul_backend());
  if (prints) std::cout << j.dump() << std::endl;
  return 0;
}
