// What both fuzz targets share: a byte reader that never runs out (it returns zeros past the
// end), the rule that adjoint::Error is an expected outcome unless its kind is Internal, and
// the switch that steers the generators away from bugs already known (ADJOINT_FUZZ_AVOID_KNOWN).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

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

/// Bugs the generators can steer around, by tag, so that a long run finds new ones instead of
/// the same one again. Each place that steers says which tag it serves. Known: reported before
/// the fuzzers existed and being fixed. Reported: found by these targets (docs/fuzzing.md).
/// When a bug is fixed, its tag and the places using it go.
// Bugs the hardening issue found and fixed: their tags stay in the targets (a regression would
// show up under them), and nothing steers around them any more.
inline constexpr const char* kKnownBugs[] = {
    "bool-unary",        // fixed: operand_data checks each operand's element type
    "huge-shape",        // fixed: checked_numel where tensors are made
    "scalar-cast",       // fixed: Scalar keeps doubles, converts with a check
    "nan-fill-int",      // fixed: scalar_to<T> refuses NaN / inf / out of range
    "int-alpha-assert",  // fixed: check_alpha
    "layer-norm-empty",  // fixed: empty normalized shapes work
    "trainer-stoull",    // fixed: metadata parsed strictly before any weight is copied
};
// Reported by these targets and not yet fixed: none. Fixed, and no longer steered around:
// int-extremes, float-to-int, int-pow, arange-length, index-add-0d, backward-throw-leak,
// inplace-saved-cycle (Note [Stale saves and reference cycles]), int-matmul-overflow,
// split-huge-pieces (check_piece_count in src/ops/shape.cpp); found in session 17, never steered
// around: a graph break the traced function caught (trace.cpp's break_trace), a huge expanded
// view's history (positions() in src/autograd/view_tracking.cpp).
inline constexpr std::array<const char*, 0> kReportedBugs{};

/// Whether to steer around the bug `tag`: ADJOINT_FUZZ_AVOID_KNOWN=1 avoids the known bugs,
/// =2 the reported ones too; ADJOINT_FUZZ_AVOID=tag,tag adds single tags (to minimize a crash
/// of one kind while the others stay out of the way). Unset, the default, avoids nothing.
inline bool avoid(std::string_view tag) {
  static const std::set<std::string, std::less<>> avoided = [] {
    std::set<std::string, std::less<>> s;
    const char* level = std::getenv("ADJOINT_FUZZ_AVOID_KNOWN");
    const int n = level ? std::atoi(level) : 0;
    if (n >= 1) s.insert(std::begin(kKnownBugs), std::end(kKnownBugs));
    if (n >= 2) s.insert(std::begin(kReportedBugs), std::end(kReportedBugs));
    if (const char* extra = std::getenv("ADJOINT_FUZZ_AVOID")) {
      std::string list = extra;
      for (std::size_t pos = 0; pos <= list.size();) {
        const std::size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) s.insert(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    }
    return s;
  }();
  return avoided.count(tag) > 0;
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

/// The input, in a memory file read through /proc/self/fd: no disk traffic per run.
struct InputFile {
  int fd = -1;
  std::string path;
  explicit InputFile(const char* name) {
    fd = ::memfd_create(name, 0);
    if (fd < 0) finding("memfd_create failed:", std::strerror(errno));
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void set(const uint8_t* data, std::size_t size) {
    if (::ftruncate(fd, 0) != 0) finding("ftruncate failed");
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) finding("pwrite failed");
      done += static_cast<std::size_t>(n);
    }
  }
};

}  // namespace adjoint::fuzz
