// adjoint::Error, the one exception type the library throws on a user's mistake, and the
// helpers that build its messages. Internal invariants use ADJOINT_ASSERT, which names the
// file and line instead of an op.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace adjoint {

enum class ErrorKind {
  Shape,
  DType,
  Device,
  Index,
  Value,
  NotImplemented,
  Autograd,
  IO,
  Internal,
  OutOfMemory,  ///< the allocator could not provide a tensor's memory
};

std::string_view to_string(ErrorKind kind);

/// Thrown for every user error. The message reads `[op] what went wrong: details`.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string op, const std::string& message);
  ErrorKind kind() const { return kind_; }
  /// The op (or component) that raised the error, e.g. "matmul" or "backward".
  const std::string& op() const { return op_; }

 private:
  ErrorKind kind_;
  std::string op_;
};

namespace detail {
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_internal(const char* file, int line, const std::string& what);
}  // namespace detail

}  // namespace adjoint

/// Throws adjoint::Error of the given kind, naming the op, unless `cond` holds.
#define ADJOINT_CHECK(cond, kind, op, ...)                                                         \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      throw ::adjoint::Error(::adjoint::ErrorKind::kind, op, ::adjoint::detail::str(__VA_ARGS__)); \
  } while (0)

/// An internal invariant: a failure is a bug in adjoint, reported with file and line.
#define ADJOINT_ASSERT(cond, ...)                                                             \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      ::adjoint::detail::throw_internal(                                                      \
          __FILE__, __LINE__, ::adjoint::detail::str(#cond, " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
