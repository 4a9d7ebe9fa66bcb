// DType names, sizes and promotion.
#include "adjoint/dtype.h"

#include "adjoint/error.h"

namespace adjoint {

std::size_t itemsize(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return 1;
    case DType::Int64:
      return 8;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
  }
  ADJOINT_ASSERT(false, "unknown dtype");
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "bool";
    case DType::Int64:
      return "int64";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << to_string(dtype); }

// The enumerators are declared in promotion order, so the larger one wins.
DType promote_types(DType a, DType b) { return a > b ? a : b; }

}  // namespace adjoint
