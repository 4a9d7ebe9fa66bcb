// nn::init: the weight initialisers (uniform, normal, Xavier/Glorot, Kaiming/He, constants),
// as torch.nn.init. Each fills an existing tensor in place, records no graph (so it works on
// parameters that require grad), and draws from an explicit, seeded Generator: the same seed
// gives the same weights on every machine.
#pragma once

#include <cstdint>
#include <utility>

#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint::nn::init {

/// The nonlinearity that follows a layer, for the recommended gain.
enum class Nonlinearity { Linear, ReLU, LeakyReLU, Tanh, Sigmoid };

/// torch.nn.init.calculate_gain: 1 for Linear and Sigmoid, sqrt(2) for ReLU, 5/3 for Tanh,
/// sqrt(2 / (1 + slope^2)) for LeakyReLU with `negative_slope`.
double calculate_gain(Nonlinearity nonlinearity, double negative_slope = 0.01);

/// (fan_in, fan_out) of a weight of at least 2 dims: [out, in, k...] gives
/// fan_in = in * prod(k), fan_out = out * prod(k). Fewer dims is a Shape error.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);

/// Fills `t` from U(a, b). Returns t (the same handle).
Tensor uniform_(Tensor t, Generator& gen, double a = 0, double b = 1);
/// Fills `t` from N(mean, std_dev^2).
Tensor normal_(Tensor t, Generator& gen, double mean = 0, double std_dev = 1);
/// Fills `t` with `value` (any dtype).
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);

/// Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, Generator& gen, double gain = 1);
/// Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, Generator& gen, double gain = 1);
/// He, fan_in mode: U(-b, b) with b = gain * sqrt(3 / fan_in), gain from `nonlinearity`
/// (and `negative_slope` for LeakyReLU).
Tensor kaiming_uniform_(Tensor t, Generator& gen, Nonlinearity nonlinearity = Nonlinearity::ReLU,
                        double negative_slope = 0);
/// He, fan_in mode: N(0, std^2) with std = gain / sqrt(fan_in).
Tensor kaiming_normal_(Tensor t, Generator& gen, Nonlinearity nonlinearity = Nonlinearity::ReLU,
                       double negative_slope = 0);

}  // namespace adjoint::nn::init
