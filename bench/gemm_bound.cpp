// Note [The gemm bound]
// A step cannot run faster than its matrix products at the rate this CPU computes those
// shapes, so adjoint-bench reports that bound beside each step (issue 42): it runs one more
// step with a recorder on the kernel table (src/backend/product_recorder.h) that sees every
// matmul, linear, product added into a gradient (matmul_add_into, matmul_widened_add_into)
// and convolution (forward, backward-data, backward-weight), forward and backward, as called:
// kind, shapes, strides, dtypes and a convolution's geometry. Each distinct call is then run
// again on the same tensors, alone, twice to warm up and then 5 times, and its best time is
// counted once per call the step made. gemm_bound_ms is their sum; step_over_gemm_bound is
// ms_per_step over it. The products inside the fused attention kernel are not kernel-table
// calls and are not in the bound (gpt-long's bound is its linear layers' products), nor is
// anything but products and convolutions. The step it records is one more, after the timed
// ones, and the calls run again write into the tensors they were given (gradients), so the
// bound is measured last.
#include "gemm_bound.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

#include "adjoint/tensor_impl.h"
#include "backend/product_recorder.h"

namespace bench {
namespace {

class Recorder final : public adjoint::kernels::ProductRecorder {
 public:
  struct Call {
    long long count = 0;
    std::function<void()> again;
  };
  void record(const char* kind, std::initializer_list<const adjoint::Tensor*> operands,
              const std::string& extra, std::function<void()> again) override {
    std::ostringstream key;
    key << kind << '|' << extra;
    for (const adjoint::Tensor* t : operands) {
      key << '|';
      if (!t->defined()) continue;
      key << static_cast<int>(t->dtype()) << ':';
      for (int64_t d : t->shape()) key << d << ',';
      key << ':';
      for (int64_t s : t->strides()) key << s << ',';
    }
    Call& c = calls[key.str()];
    if (c.count++ == 0) c.again = std::move(again);
    ++total;
  }
  std::map<std::string, Call> calls;
  long long total = 0;
};

}  // namespace

GemmBound measure_gemm_bound(const std::function<void()>& one_step) {
  Recorder recorder;
  adjoint::kernels::tls_product_recorder = &recorder;
  try {
    one_step();
  } catch (...) {
    adjoint::kernels::tls_product_recorder = nullptr;
    throw;
  }
  adjoint::kernels::tls_product_recorder = nullptr;
  GemmBound b;
  b.calls = recorder.total;
  b.distinct = static_cast<long long>(recorder.calls.size());
  for (auto& [key, call] : recorder.calls) {
    for (int i = 0; i < 2; ++i) call.again();
    double best = 1e300;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      call.again();
      best = std::min(best, ms(t0, Clock::now()));
    }
    b.ms += best * static_cast<double>(call.count);
  }
  return b;
}

void report_gemm_bound(Json& j, double ms_per_step, const std::function<void()>& one_step) {
  const GemmBound b = measure_gemm_bound(one_step);
  j.num("gemm_bound_ms", b.ms);
  j.num("step_over_gemm_bound", b.ms > 0 ? ms_per_step / b.ms : 0.0);
  j.integer("gemm_bound_calls", b.calls);
  j.integer("gemm_bound_distinct", b.distinct);
}

}  // namespace bench
