// Helpers the checkpoint-budget files share: the number formatting of their reports, and the
// per-layer bytes of a profile.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "adjoint/checkpoint_budget.h"

namespace adjoint::detail {

/// printf into a std::string (the report tables).
__attribute__((format(printf, 1, 2))) inline std::string str_printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buf[256];
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

/// 1536 -> "1.5 KiB".
inline std::string human_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return str_printf(u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}

/// 2.5e9 -> "2.50 GFLOP".
inline std::string human_flops(uint64_t flops) {
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  double v = static_cast<double>(flops);
  int u = 0;
  while (v >= 1000 && u < 5) v /= 1000, ++u;
  return str_printf(u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
}

/// Fills each layer's saved_bytes (first-saver attribution) and input_bytes from the ids.
void fill_layer_bytes(SequentialProfile& profile);

}  // namespace adjoint::detail
