// The op sample registry: every differentiable op registers sample inputs here, and
// tests/gradcheck/ops_gradcheck_test.cpp runs over all of them (VJP and JVP against finite
// differences, the <u, J v> identity, and gradgradcheck).
//
// Register from a tests/gradcheck/samples_<family>.cpp file (linked into the gradcheck test):
//
//   ADJOINT_REGISTER_SAMPLES(unary) {
//     sink.add("exp/scalar", [](const Inputs& x) { return exp(x[0]); }, {randn64({})});
//     sink.add("exp/noncontiguous", [](const Inputs& x) { return exp(x[0]); },
//         {randn64({3, 4}).t()});
//   }
//
// Inputs are float64 and require grad (use constant(...) for inputs that should not, such as
// integer indices). Cover: 0-d, broadcasting, empty, non-contiguous views, negative dims.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::testing {

using Inputs = std::vector<Tensor>;
using SampleFn = std::function<Tensor(const Inputs&)>;

struct OpSample {
  std::string name;  // "family/op/case", unique; becomes the test name
  SampleFn fn;
  std::vector<Tensor> inputs;  // checked: those that require grad
  bool gradgrad = true;        // run gradgradcheck (off only for ops whose VJP is not smooth)
  bool jvp = true;             // check the JVP rule
  double atol = 1e-5, rtol = 1e-3;
};

std::vector<OpSample>& op_registry();

/// Collects samples while a registration function runs.
class SampleSink {
 public:
  explicit SampleSink(std::vector<OpSample>& out) : out_(out) {}
  OpSample& add(std::string name, SampleFn fn, std::vector<Tensor> inputs);

 private:
  std::vector<OpSample>& out_;
};

struct Registrar {
  explicit Registrar(void (*fn)(SampleSink&));
};

/// The sample's name as a gtest test name: "unary/exp/scalar" becomes "unary_exp_scalar".
std::string sample_test_name(const std::string& sample_name);
/// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const OpSample& s, std::ostream* os);

/// Random float64 leaf that requires grad, N(0, 1) from a fixed per-call seed.
Tensor randn64(const Shape& shape);
/// Uniform on [lo, hi), float64, requires grad (for ops with restricted domains: log, sqrt).
Tensor uniform64(const Shape& shape, double lo, double hi);
/// The same tensor marked as not requiring grad (a constant input of the sample).
Tensor constant(const Tensor& t);

}  // namespace adjoint::testing

#define ADJOINT_REGISTER_SAMPLES(family)                                                       \
  static void adjoint_register_##family(::adjoint::testing::SampleSink& sink);                 \
  static ::adjoint::testing::Registrar adjoint_registrar_##family(&adjoint_register_##family); \
  static void adjoint_register_##family(::adjoint::testing::SampleSink& sink)
