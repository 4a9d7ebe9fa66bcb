// Every op of the registry in bfloat16 and float16. The oracle is the same sample in float32
// on the same, already rounded inputs: a kernel computes in float32 and rounds once, so a
// forward differs from it by the rounding of its result (and of the intermediate results of a
// sample made of several ops), and a VJP likewise. The tolerance is the dtype's epsilon times
// a few roundings, relative to the result's magnitude. Samples whose float32 result leaves the
// dtype's range (float16 ends at 65504) are checked where they are in range.
//
// Ops that refuse 16-bit inputs are listed in kRefused with the reason; any other refusal
// fails the test.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>

#include "support/registry.h"

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;

// Families whose ops refuse float16/bfloat16 with a DType error naming the op: LAPACK has no
// 16-bit routines, and a factorisation in 8 or 11 bits of significand is rarely what anyone
// wants (under Autocast these ops run in float32, their policy, as PyTorch offers them); the
// solvers iterate to tolerances 16-bit floats cannot reach (src/scientific/precision.h).
const char* const kRefused[] = {"linalg/", "scientific/"};

bool refusal_expected(const std::string& name) {
  for (const char* prefix : kRefused)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The largest finite value of a dtype, for the range check.
double max_finite(DType d) { return d == DType::Float16 ? 65504.0 : 3.38e38; }

struct SampleRun {
  Tensor out;
  std::vector<Tensor> grads;  // of the floating inputs that require grad, in order
};

// The sample on its inputs converted to `dtype` (floating ones; they keep requiring grad), and
// the VJP of a fixed cotangent (rounded to the low dtype, so both runs use the same one).
SampleRun run_in(const OpSample& s, DType dtype, DType low) {
  std::vector<Tensor> xs, leaves;
  for (const Tensor& x : s.inputs) {
    if (!x.defined() || !is_floating(x.dtype())) {
      xs.push_back(x);
      continue;
    }
    Tensor c = x.detach().to(low).to(dtype);
    if (x.requires_grad()) {
      c.requires_grad_();
      leaves.push_back(c);
    }
    xs.push_back(c);
  }
  SampleRun r;
  r.out = s.fn(xs);
  if (!is_floating(r.out.dtype()) || !r.out.requires_grad() || leaves.empty()) return r;
  const Tensor cot =
      (0.5 + 0.25 * sin(arange(0.0, static_cast<double>(r.out.numel())))).reshape(r.out.shape());
  r.grads = autograd::grad({r.out}, leaves, {cot.to(low).to(r.out.dtype())}, std::nullopt, false,
                           /*allow_unused=*/true);
  return r;
}

// max |got - want| over the elements where want is in `low`'s range (NaN where both are NaN
// counts as equal), against tol * (1 + max |want|).
void expect_close(const Tensor& got_in, const Tensor& want_in, DType low, double rounds,
                  const std::string& what) {
  if (!want_in.defined() || !got_in.defined()) {
    EXPECT_EQ(got_in.defined(), want_in.defined()) << what;
    return;
  }
  ASSERT_EQ(got_in.shape(), want_in.shape()) << what;
  if (want_in.numel() == 0) return;
  const std::vector<double> got =
      got_in.detach().to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> want =
      want_in.detach().to(DType::Float64).contiguous().to_vector<double>();
  double scale = 0, worst = 0;
  std::size_t worst_at = 0;
  for (double w : want)
    if (std::isfinite(w) && std::abs(w) < max_finite(low) / 2) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], g = got[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (!std::isfinite(w) || std::abs(w) >= max_finite(low) / 2) continue;  // out of range
    const double d = std::isnan(g) ? INFINITY : std::abs(g - w);
    if (d > worst) worst = d, worst_at = i;
  }
  const double tol = rounds * dtype_eps(low) * (1 + scale);
  EXPECT_LE(worst, tol) << what << ": element " << worst_at << " is " << got[worst_at]
                        << ", float32 gives " << want[worst_at];
}

struct Param {
  OpSample sample;
  DType low;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.sample.name << " in " << p.low; }

class OpReducedPrecision : public ::testing::TestWithParam<Param> {};

TEST_P(OpReducedPrecision, MatchesFloat32OnTheRoundedInputs) {
  const OpSample& s = GetParam().sample;
  const DType low = GetParam().low;
  SampleRun lo;
  try {
    lo = run_in(s, low, low);
  } catch (const Error& e) {
    if (refusal_expected(s.name) && e.kind() == ErrorKind::DType) GTEST_SKIP() << e.what();
    FAIL() << s.name << " in " << low << " threw: " << e.what();
  }
  const SampleRun f32 = run_in(s, DType::Float32, low);
  // A sample of several ops rounds after each: allow 8 roundings of the result's magnitude.
  constexpr double kRounds = 8;
  // (A sample may promote to float64 itself, through a float64 constant.)
  if (f32.out.dtype() == DType::Float32) {
    EXPECT_EQ(lo.out.dtype(), low) << s.name;
  }
  expect_close(lo.out, f32.out, low, kRounds, s.name + " forward");
  ASSERT_EQ(lo.grads.size(), f32.grads.size());
  for (std::size_t i = 0; i < lo.grads.size(); ++i) {
    if (lo.grads[i].defined() && f32.grads[i].dtype() == DType::Float32) {
      EXPECT_EQ(lo.grads[i].dtype(), low) << s.name << " grad " << i;
    }
    expect_close(lo.grads[i], f32.grads[i], low, 4 * kRounds,
                 s.name + " VJP of input " + std::to_string(i));
  }
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (DType low : {DType::BFloat16, DType::Float16})
    for (const OpSample& s : adjoint::testing::op_registry()) out.push_back({s, low});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpReducedPrecision, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return adjoint::testing::sample_test_name(info.param.sample.name) +
                                  (info.param.low == DType::Float16 ? "_f16" : "_bf16");
                         });

}  // namespace
