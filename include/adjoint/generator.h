// Generator: a seedable random source (PCG64-style, our own distributions) so that the same
// seed gives bitwise the same numbers on every machine and thread count.
#pragma once

#include <cstdint>

namespace adjoint {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0);
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  /// 64 random bits.
  uint64_t next_u64();
  /// Uniform on [0, 1) with 53 random bits.
  double next_double();
  /// Standard normal (Box-Muller; the second value is cached).
  double next_normal();

  /// The whole state, so that checkpointing can save and restore it.
  struct State {
    uint64_t s0, s1, seed;
    double cached_normal;
    bool has_cached;
  };
  State state() const { return {s0_, s1_, seed_, cached_normal_, has_cached_}; }
  void set_state(const State& st);

 private:
  uint64_t s0_ = 0, s1_ = 0, seed_ = 0;
  double cached_normal_ = 0;
  bool has_cached_ = false;
};

/// The process-wide default generator used when none is passed.
Generator& default_generator();
/// Seeds the default generator.
void manual_seed(uint64_t seed);

}  // namespace adjoint
