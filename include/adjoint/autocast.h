// Automatic mixed precision: inside an Autocast guard each op runs in the dtype of a policy
// modelled on PyTorch's CPU autocast (docs/mixed-precision.md has the table): matrix products
// in the low dtype (bfloat16 or float16), ops that need range or precision (softmax, layer_norm,
// the losses, sums, exp/log) in float32, the rest in the dtype of their inputs.
//
//   {
//     Autocast amp(DType::BFloat16);
//     Tensor loss = model.forward(x);  // float32 parameters, bfloat16 matmuls
//   }
//   loss.backward();  // each op's backward in its forward's dtype; float32 .grad
#pragma once

#include <cstdint>

#include "adjoint/dtype.h"

namespace adjoint {

/// Thread-local, nestable. `Autocast(dtype, false)` turns autocast off inside an autocast
/// region (for a part that must run in float32). Within the outermost guard the low-precision
/// copy of each float32 leaf that requires grad (a parameter) is made once and reused
/// (`cache_casts`); the copies are dropped when that guard ends. Backward never autocasts.
class Autocast {
 public:
  explicit Autocast(DType dtype = DType::BFloat16, bool enabled = true, bool cache_casts = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  uint8_t prev_state_;
  bool prev_cache_;
};

/// Whether ops on this thread are autocast now.
bool is_autocast_enabled();
/// The low dtype of the innermost enabled guard (BFloat16 when none is).
DType autocast_dtype();
/// How many casts the current outermost guard holds in its cache (for tests and tuning).
std::size_t autocast_cache_size();

}  // namespace adjoint
