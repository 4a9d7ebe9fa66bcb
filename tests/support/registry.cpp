// The op sample registry and the sample-input helpers.
#include "support/registry.h"

#include <cctype>

namespace adjoint::testing {

std::vector<OpSample>& op_registry() {
  static std::vector<OpSample> registry;
  return registry;
}

OpSample& SampleSink::add(std::string name, SampleFn fn, std::vector<Tensor> inputs) {
  out_.push_back(OpSample{std::move(name), std::move(fn), std::move(inputs)});
  return out_.back();
}

Registrar::Registrar(void (*fn)(SampleSink&)) {
  SampleSink sink(op_registry());
  fn(sink);
}

std::string sample_test_name(const std::string& sample_name) {
  std::string n = sample_name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

void PrintTo(const OpSample& s, std::ostream* os) { *os << s.name; }

namespace {
Generator& sample_generator() {
  static Generator gen(1234);
  return gen;
}
}  // namespace

Tensor randn64(const Shape& shape) {
  return randn(shape, DType::Float64, &sample_generator()).requires_grad_(true);
}

Tensor uniform64(const Shape& shape, double lo, double hi) {
  Tensor u = rand(shape, DType::Float64, &sample_generator());
  Tensor t = (u * (hi - lo) + lo).detach();
  return t.requires_grad_(true);
}

Tensor constant(const Tensor& t) { return t.detach(); }

}  // namespace adjoint::testing
