// Gradient health of a training run (adjoint-train's grads.svg and grads.csv): the norm of each
// parameter's gradient and of its update relative to its weight, recorded every N steps,
// warnings when a layer's gradients vanish or explode, and a named error on a NaN or infinite
// gradient, caught before the optimizer spreads it into the weights. The trainer calls it
// between backward and the update; nothing here runs inside the engine.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::tools {

struct GradientHealthOptions {
  int64_t every = 10;  ///< steps between records (0: no records; the NaN/Inf check still runs)
  /// A layer whose gradient norm stays below this for `vanish_records` records in a row is
  /// reported as vanished. A healthy layer of the demo model sits around 1e-2 to 1.
  double vanish_below = 1e-6;
  int64_t vanish_records = 5;
  /// A layer whose gradient norm rises above this is reported as exploding (clipping then
  /// shrinks the whole update by that much).
  double explode_above = 1e2;
};

/// One record: per parameter (in names() order), the gradient's norm before clipping, the
/// weight's norm before the update, and the norm of the update (weight after - before).
struct GradientRecord {
  int64_t step = 0;
  std::vector<double> grad_norm, weight_norm, update_norm;
};

/// The layer a parameter belongs to, for grouping: its first name component, with the next one
/// when that is an index ("blocks.2.attn.qkv.weight" -> "blocks.2", "wte.weight" -> "wte",
/// "0.bias" -> "0").
std::string layer_of(const std::string& parameter_name);

class GradientHealth {
 public:
  GradientHealth(std::vector<std::pair<std::string, Tensor>> named_parameters,
                 GradientHealthOptions options);

  /// After backward and before clipping and the update of step `step` (1-based, as loss.csv):
  /// throws an adjoint::Error naming the first parameter whose gradient holds a NaN or an
  /// infinity; on a record step keeps the gradient norms and a copy of the weights, and checks
  /// the layers against the thresholds (take_warnings gives what it found).
  void after_backward(int64_t step, double loss);
  /// After the optimizer's update: on a record step, the update norms.
  void after_update();

  /// Warnings since the last call, one line each, naming the layer and step.
  std::vector<std::string> take_warnings();

  const std::vector<std::string>& names() const { return names_; }
  /// The layers, in order of first appearance, and for each parameter its layer's index.
  const std::vector<std::string>& layers() const { return layers_; }
  const std::vector<GradientRecord>& records() const { return records_; }
  const GradientHealthOptions& options() const { return options_; }

  /// sqrt of the sum of squares over a layer's parameters of one record's `norms`.
  double layer_norm(const std::vector<double>& norms, std::size_t layer) const;

 private:
  void check_layers(const GradientRecord& r);
  [[noreturn]] void throw_non_finite(int64_t step, double loss, std::size_t first, int64_t nan,
                                     int64_t inf) const;

  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<std::string> layers_;
  std::vector<std::size_t> layer_index_;  // per parameter
  GradientHealthOptions options_;
  std::vector<GradientRecord> records_;
  std::vector<Tensor> before_;  // weights before the update, on a record step only
  std::vector<int64_t> vanished_for_;
  std::vector<bool> exploding_;
  std::vector<std::string> warnings_;
};

/// grads.csv: one row per parameter and record,
/// "step,parameter,layer,grad_norm,weight_norm,update_norm,update_ratio".
void write_gradient_csv(const GradientHealth& health, const std::string& path);
/// grads.svg: two panels of one line per layer against the step, log10 of the gradient norm
/// (with the vanish and explode thresholds dashed) and log10 of update norm / weight norm.
void write_gradient_svg(const GradientHealth& health, const std::string& path,
                        const std::string& title);

}  // namespace adjoint::tools
