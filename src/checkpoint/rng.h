// The generator states a checkpointed region records before its first run and puts back for
// its recomputation, so random ops (dropout) draw the same numbers again; the states the
// generators had before the recomputation are restored afterwards, so backward does not
// advance anyone's random stream.
#pragma once

#include <utility>
#include <vector>

#include "adjoint/generator.h"

namespace adjoint::detail {

class RngSnapshot {
 public:
  RngSnapshot() = default;
  /// The states of the default generator and of `gens` (duplicates and nulls skipped).
  static RngSnapshot capture(const std::vector<Generator*>& gens);
  const std::vector<std::pair<Generator*, Generator::State>>& states() const { return states_; }

 private:
  friend class RngReplay;
  std::vector<std::pair<Generator*, Generator::State>> states_;
};

/// While alive, the generators are in the snapshot's states; then back where they were.
class RngReplay {
 public:
  explicit RngReplay(const RngSnapshot& snapshot);
  ~RngReplay();
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  RngSnapshot before_;
};

}  // namespace adjoint::detail
