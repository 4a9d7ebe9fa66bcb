// adjoint::Error, the internal-assert helper and the current op's name (core/op_scope.h).
#include "adjoint/error.h"

#include "core/op_scope.h"

namespace adjoint {

constinit thread_local const char* tls_current_op = nullptr;

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Shape:
      return "shape";
    case ErrorKind::DType:
      return "dtype";
    case ErrorKind::Device:
      return "device";
    case ErrorKind::Index:
      return "index";
    case ErrorKind::Value:
      return "value";
    case ErrorKind::NotImplemented:
      return "not implemented";
    case ErrorKind::Autograd:
      return "autograd";
    case ErrorKind::IO:
      return "io";
    case ErrorKind::Internal:
      return "internal";
    case ErrorKind::OutOfMemory:
      return "out of memory";
  }
  return "unknown";
}

Error::Error(ErrorKind kind, std::string op, const std::string& message)
    : std::runtime_error("[" + op + "] " + message), kind_(kind), op_(std::move(op)) {}

namespace detail {
void throw_internal(const char* file, int line, const std::string& what) {
  throw Error(ErrorKind::Internal, "internal",
              str("assertion failed at ", file, ":", line, ": ", what,
                  " (this is a bug in adjoint; please report it)"));
}
}  // namespace detail

}  // namespace adjoint
