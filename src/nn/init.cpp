// nn::init: the initialisers. Random values are drawn in float64 from the given Generator,
// in the tensor's logical (row-major) order, then stored with copy_ under NoGradGuard, so a
// float32 and a float64 tensor from the same seed hold the same numbers up to rounding, and
// strided views fill in the same order as contiguous tensors.
#include "adjoint/nn/init.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"

namespace adjoint::nn::init {
namespace {

void check_floating(const Tensor& t, const char* op) {
  ADJOINT_CHECK(t.defined(), Value, op, "got an undefined tensor");
  ADJOINT_CHECK(t.is_floating_point(), DType, op, "expected a floating-point tensor, got ",
                describe(t));
}

// Writes `values` (float64, same shape) into t without recording.
Tensor store(Tensor t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

int64_t checked_fan_in(const Tensor& t, const char* op) {
  const int64_t fan_in = fan_in_and_fan_out(t).first;
  ADJOINT_CHECK(fan_in > 0, Shape, op, "fan_in is 0 for ", describe(t),
                "; the bound would be infinite");
  return fan_in;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double negative_slope) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight) {
  ADJOINT_CHECK(weight.defined(), Value, "nn.init", "got an undefined tensor");
  ADJOINT_CHECK(weight.dim() >= 2, Shape, "nn.init",
                "fan in and fan out need a tensor with at least 2 dims, got ", describe(weight));
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

Tensor uniform_(Tensor t, Generator& gen, double a, double b) {
  check_floating(t, "nn.init.uniform_");
  ADJOINT_CHECK(a <= b, Value, "nn.init.uniform_", "expected a <= b, got [", a, ", ", b, ")");
  NoGradGuard no_grad;
  Tensor values = rand(t.shape(), DType::Float64, &gen) * (b - a) + a;
  return store(std::move(t), values);
}

Tensor normal_(Tensor t, Generator& gen, double mean, double std_dev) {
  check_floating(t, "nn.init.normal_");
  ADJOINT_CHECK(std_dev >= 0, Value, "nn.init.normal_", "std must be non-negative, got ", std_dev);
  NoGradGuard no_grad;
  Tensor values = randn(t.shape(), DType::Float64, &gen) * std_dev + mean;
  return store(std::move(t), values);
}

Tensor constant_(Tensor t, double value) {
  ADJOINT_CHECK(t.defined(), Value, "nn.init.constant_", "got an undefined tensor");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor xavier_uniform_(Tensor t, Generator& gen, double gain) {
  check_floating(t, "nn.init.xavier_uniform_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  ADJOINT_CHECK(fan_in + fan_out > 0, Shape, "nn.init.xavier_uniform_",
                "fan_in + fan_out is 0 for ", describe(t));
  // U(-a, a) has variance a^2 / 3 = gain^2 * 2 / (fan_in + fan_out)
  const double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(std::move(t), gen, -a, a);
}

Tensor xavier_normal_(Tensor t, Generator& gen, double gain) {
  check_floating(t, "nn.init.xavier_normal_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  ADJOINT_CHECK(fan_in + fan_out > 0, Shape, "nn.init.xavier_normal_", "fan_in + fan_out is 0 for ",
                describe(t));
  const double sigma = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(std::move(t), gen, 0.0, sigma);
}

Tensor kaiming_uniform_(Tensor t, Generator& gen, Nonlinearity nonlinearity,
                        double negative_slope) {
  check_floating(t, "nn.init.kaiming_uniform_");
  const int64_t fan_in = checked_fan_in(t, "nn.init.kaiming_uniform_");
  // variance b^2 / 3 = gain^2 / fan_in keeps the activations' scale through the layer
  const double b =
      calculate_gain(nonlinearity, negative_slope) * std::sqrt(3.0 / static_cast<double>(fan_in));
  return uniform_(std::move(t), gen, -b, b);
}

Tensor kaiming_normal_(Tensor t, Generator& gen, Nonlinearity nonlinearity, double negative_slope) {
  check_floating(t, "nn.init.kaiming_normal_");
  const int64_t fan_in = checked_fan_in(t, "nn.init.kaiming_normal_");
  const double sigma =
      calculate_gain(nonlinearity, negative_slope) / std::sqrt(static_cast<double>(fan_in));
  return normal_(std::move(t), gen, 0.0, sigma);
}

}  // namespace adjoint::nn::init
