// Element types and PyTorch's type promotion, all driven by one table (Note [The dtype table]):
// adding a storage type (an fp8 one day) means a C++ storage type, a row of that table and a
// case in DType; the dispatch helpers of src/core/dispatch.h follow from the table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "adjoint/half.h"

namespace adjoint {

// The enumerators' values are stable (new ones go last); promotion reads the table's rank,
// never the enumerator order.
enum class DType : uint8_t {
  Bool,
  Int64,
  Float32,
  Float64,
  Float16,
  BFloat16,
  UInt8,
  Int8,
  Int16,
  Int32
};

inline constexpr DType kDefaultFloat = DType::Float32;

// libtorch's names for the dtypes (c10::kFloat, ...), so that code written against libtorch
// reads the same: zeros({2}, dtype(kFloat64)). docs/coming-from-libtorch.md has the mapping.
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8, kByte = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8, kChar = DType::Int8;
inline constexpr DType kInt16 = DType::Int16, kShort = DType::Int16;
inline constexpr DType kInt32 = DType::Int32, kInt = DType::Int32;
inline constexpr DType kInt64 = DType::Int64, kLong = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16, kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32, kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64, kDouble = DType::Float64;

enum class DTypeKind : uint8_t { Bool, Integral, Floating };

// Note [The dtype table]
// One row per dtype: enumerator, C++ storage type, name, size, kind, promotion rank, the dtype
// kernels compute in ("opmath": float32 for the 16-bit floats, int64 for the integers narrower
// than it, itself otherwise), machine epsilon (0 for non-floating types) and the significant
// digits printing shows. promote_types takes the higher rank; two dtypes of equal rank (uint8
// and int8, float16 and bfloat16, which neither holds) promote to the lowest-ranked dtype above
// both (int16, float32), as PyTorch's promote_types does.
//
// The dtypes whose opmath is wider than themselves are storage types: a kernel that computes
// widens them at its entry and narrows the result once (Note [Reduced-precision kernels] in
// src/backend/cpu/opmath.h). For the narrow integers that gives PyTorch's values: an int64
// sum, product or difference narrowed to uint8 is the uint8 one, wrapped modulo 256.
#define ADJOINT_FORALL_DTYPES(X)                                                   \
  X(Bool, bool, "bool", 1, Bool, 0, Bool, 0.0, 1)                                  \
  X(UInt8, uint8_t, "uint8", 1, Integral, 1, Int64, 0.0, 3)                        \
  X(Int8, int8_t, "int8", 1, Integral, 1, Int64, 0.0, 3)                           \
  X(Int16, int16_t, "int16", 2, Integral, 2, Int64, 0.0, 5)                        \
  X(Int32, int32_t, "int32", 4, Integral, 3, Int64, 0.0, 10)                       \
  X(Int64, int64_t, "int64", 8, Integral, 4, Int64, 0.0, 19)                       \
  X(Float16, ::adjoint::Half, "float16", 2, Floating, 5, Float32, 0x1p-10, 4)      \
  X(BFloat16, ::adjoint::BFloat16, "bfloat16", 2, Floating, 5, Float32, 0x1p-7, 4) \
  X(Float32, float, "float32", 4, Floating, 6, Float32, 0x1p-23, 5)                \
  X(Float64, double, "float64", 8, Floating, 7, Float64, 0x1p-52, 8)

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t itemsize;
  DTypeKind kind;
  int rank;      ///< promotion rank
  DType opmath;  ///< the dtype kernels compute in
  double eps;    ///< machine epsilon: the gap between 1 and the next value (0 if not floating)
  int digits;    ///< significant digits operator<< prints
};

inline constexpr std::array<DTypeInfo, 10> kDTypeTable = {{
#define ADJOINT_DTYPE_ROW(E, T, NAME, SIZE, KIND, RANK, OPMATH, EPS, DIGITS) \
  {DType::E, NAME, SIZE, DTypeKind::KIND, RANK, DType::OPMATH, EPS, DIGITS},
    ADJOINT_FORALL_DTYPES(ADJOINT_DTYPE_ROW)
#undef ADJOINT_DTYPE_ROW
}};

// The rows indexed by enumerator value, so that a lookup (is_floating, itemsize, ... on the
// per-op path) is one load.
inline constexpr std::array<DTypeInfo, kDTypeTable.size()> kDTypeByEnum = [] {
  std::array<DTypeInfo, kDTypeTable.size()> by_enum{};
  for (const DTypeInfo& row : kDTypeTable) by_enum[static_cast<std::size_t>(row.dtype)] = row;
  return by_enum;
}();

/// The table row of a dtype.
constexpr const DTypeInfo& dtype_info(DType d) { return kDTypeByEnum[static_cast<std::size_t>(d)]; }

std::size_t itemsize(DType dtype);
std::string_view to_string(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);

constexpr bool is_floating(DType d) { return dtype_info(d).kind == DTypeKind::Floating; }
constexpr bool is_integral(DType d) { return dtype_info(d).kind != DTypeKind::Floating; }
/// The dtype kernels compute in: float32 for float16 and bfloat16, the dtype itself otherwise.
constexpr DType opmath_dtype(DType d) { return dtype_info(d).opmath; }
/// A dtype stored narrower than kernels compute it (float16, bfloat16, uint8, int8, int16,
/// int32): widened at a computing kernel's entry.
constexpr bool is_storage_only(DType d) { return opmath_dtype(d) != d; }
/// A floating dtype stored narrower than it computes (float16, bfloat16).
constexpr bool is_reduced_float(DType d) { return is_floating(d) && is_storage_only(d); }
/// Machine epsilon of a floating dtype (2^-10 for float16, 2^-7 for bfloat16, ...).
constexpr double dtype_eps(DType d) { return dtype_info(d).eps; }

/// The smallest dtype that holds both (PyTorch's promote_types): bool < {uint8, int8} < int16 <
/// int32 < int64 < {float16, bfloat16} < float32 < float64; uint8 with int8 gives int16, and
/// float16 with bfloat16 gives float32.
DType promote_types(DType a, DType b);

/// Maps a C++ storage type to its DType (bool, uint8_t, int8_t, int16_t, int32_t, int64_t, Half,
/// BFloat16, float, double).
template <class T>
struct dtype_of;
#define ADJOINT_DTYPE_OF(E, T, ...)          \
  template <>                                \
  struct dtype_of<T> {                       \
    static constexpr DType value = DType::E; \
  };
ADJOINT_FORALL_DTYPES(ADJOINT_DTYPE_OF)
#undef ADJOINT_DTYPE_OF
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace adjoint
