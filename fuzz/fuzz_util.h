// What both fuzz targets share: a byte reader that never runs out (it returns zeros past the
// end), the rule that adjoint::Error is an expected outcome unless its kind is Internal, and
// the switch that steers the generators away from bugs already known (ADJOINT_FUZZ_AVOID_KNOWN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "adjoint/error.h"

namespace adjoint::fuzz {

/// Reads the fuzz input front to back; past the end every read gives 0 (libFuzzer's inputs
/// grow from short ones, so a short input must still mean a program).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  std::size_t consumed() const { return pos_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  bool flag() { return u8() & 1; }
  /// Uniform-ish in [lo, hi] (both included).
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(u8() % span);
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// True when ADJOINT_FUZZ_AVOID_KNOWN=1: the generators then leave out inputs that reach bugs
/// already reported and being fixed (each place says which), so that a run can find new ones.
/// The default (unset) exercises everything.
inline bool avoid_known() {
  static const bool avoid = [] {
    const char* v = std::getenv("ADJOINT_FUZZ_AVOID_KNOWN");
    return v && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return avoid;
}

/// ADJOINT_FUZZ_TRACE=1: the targets print what they do and each adjoint::Error (to turn a
/// crashing input into a reproducer).
inline bool trace() {
  static const bool on = [] {
    const char* v = std::getenv("ADJOINT_FUZZ_TRACE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

/// A finding: print why and abort, so that libFuzzer saves the input as a crash.
[[noreturn]] inline void finding(const char* what, const char* detail = "") {
  std::fprintf(stderr, "\n==adjoint-fuzz== FINDING: %s %s\n", what, detail);
  std::fflush(stderr);
  std::abort();
}

#define ADJOINT_FUZZ_CHECK(cond, ...)                                                      \
  do {                                                                                     \
    if (!(cond)) ::adjoint::fuzz::finding("invariant failed: " #cond " at " __FILE__, ""); \
  } while (0)

/// Runs f(); an adjoint::Error is an expected answer to bad input (returns false), except an
/// internal one (a failed ADJOINT_ASSERT), which is a finding like any other exception type.
template <class F>
bool run_expecting_errors(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Internal) finding("internal error:", e.what());
    if (trace()) std::fprintf(stderr, "    -> adjoint::Error: %s\n", e.what());
    return false;
  } catch (const std::exception& e) {
    finding("an exception that is not adjoint::Error:", e.what());
  } catch (...) {
    finding("an exception of unknown type");
  }
}

}  // namespace adjoint::fuzz
