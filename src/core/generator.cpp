// xoroshiro128+ seeded through splitmix64, with our own uniform and normal transforms, so the
// streams are identical across compilers and standard libraries.
#include "adjoint/generator.h"

#include <cmath>

#include "core/made_watcher.h"

namespace adjoint {
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

// A watcher hears of generators made and seeded (Note [Things made below the stack] in
// src/core/made_watcher.h): while compile traces, a generator made inside the function draws
// the same at every call (constants of the graph); seeding one made outside cannot be
// replayed (Note [Tracing] in src/compile/trace.cpp).
Generator::Generator(uint64_t seed) {
  detail::note_generator_made(this);
  manual_seed(seed);
}

void Generator::manual_seed(uint64_t seed) {
  detail::note_generator_reseeded(this);
  seed_ = seed;
  uint64_t x = seed;
  s0_ = splitmix64(x);
  s1_ = splitmix64(x);
  has_cached_ = false;
}

uint64_t Generator::next_u64() {
  uint64_t s0 = s0_, s1 = s1_;
  uint64_t result = rotl(s0 + s1, 17) + s0;  // xoroshiro128++
  s1 ^= s0;
  s0_ = rotl(s0, 49) ^ s1 ^ (s1 << 21);
  s1_ = rotl(s1, 28);
  return result;
}

double Generator::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::next_normal() {
  if (has_cached_) {
    has_cached_ = false;
    return cached_normal_;
  }
  double u1 = 1.0 - next_double();  // (0, 1]: log stays finite
  double u2 = next_double();
  double r = std::sqrt(-2.0 * std::log(u1));
  cached_normal_ = r * std::sin(2 * M_PI * u2);
  has_cached_ = true;
  return r * std::cos(2 * M_PI * u2);
}

void Generator::set_state(const State& st) {
  detail::note_generator_reseeded(this);
  s0_ = st.s0;
  s1_ = st.s1;
  seed_ = st.seed;
  cached_normal_ = st.cached_normal;
  has_cached_ = st.has_cached;
}

Generator& default_generator() {
  // Made unwatched even when first needed inside a traced function: it is not local to it.
  static Generator gen = [] {
    detail::MadeWatcher* const watcher = detail::tls_made_watcher;
    detail::tls_made_watcher = nullptr;
    Generator g(0);
    detail::tls_made_watcher = watcher;
    return g;
  }();
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace adjoint
