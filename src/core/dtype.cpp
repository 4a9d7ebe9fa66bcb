// DType names, sizes and promotion, read off the table in adjoint/dtype.h.
#include "adjoint/dtype.h"

#include "adjoint/error.h"

namespace adjoint {

std::size_t itemsize(DType dtype) { return dtype_info(dtype).itemsize; }

std::string_view to_string(DType dtype) { return dtype_info(dtype).name; }

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << to_string(dtype); }

// See Note [The dtype table].
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ra = dtype_info(a).rank, rb = dtype_info(b).rank;
  if (ra != rb) return ra > rb ? a : b;
  const DTypeInfo* best = nullptr;
  for (const DTypeInfo& row : kDTypeTable)
    if (row.rank > ra && (!best || row.rank < best->rank)) best = &row;
  ADJOINT_ASSERT(best, "no dtype ranks above ", a, " and ", b);
  return best->dtype;
}

}  // namespace adjoint
