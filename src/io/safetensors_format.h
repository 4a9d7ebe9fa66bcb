// The safetensors dtype table shared by the reader and the writer: each file dtype's name, its
// element size, and the adjoint dtype it loads as (the same type, bytes unchanged).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "adjoint/dtype.h"

namespace adjoint::io::detail {

/// The format's limit on the JSON header (the reference implementation rejects larger ones).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

enum class FileDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

struct FileDTypeInfo {
  FileDType file;
  std::string_view name;  ///< as written in the header
  std::size_t size;       ///< bytes per element in the file
  DType loads_as;         ///< adjoint dtype of the loaded tensor
};

inline constexpr FileDTypeInfo kFileDTypes[] = {
    {FileDType::F64, "F64", 8, DType::Float64}, {FileDType::F32, "F32", 4, DType::Float32},
    {FileDType::F16, "F16", 2, DType::Float16}, {FileDType::BF16, "BF16", 2, DType::BFloat16},
    {FileDType::I64, "I64", 8, DType::Int64},   {FileDType::I32, "I32", 4, DType::Int32},
    {FileDType::I16, "I16", 2, DType::Int16},   {FileDType::I8, "I8", 1, DType::Int8},
    {FileDType::U8, "U8", 1, DType::UInt8},     {FileDType::BOOL, "BOOL", 1, DType::Bool},
};

/// Dtype names of the format that adjoint cannot load (listed so the error can say so).
inline constexpr std::string_view kUnsupportedFileDTypes[] = {
    "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

inline std::optional<FileDTypeInfo> file_dtype(std::string_view name) {
  for (const FileDTypeInfo& d : kFileDTypes)
    if (d.name == name) return d;
  return std::nullopt;
}

/// The file dtype adjoint writes for `dtype`: the one that loads as it (no conversion on save);
/// nullopt for a dtype the format cannot hold.
inline std::optional<FileDTypeInfo> file_dtype_for(DType dtype) {
  for (const FileDTypeInfo& d : kFileDTypes)
    if (d.loads_as == dtype) return d;
  return std::nullopt;
}

}  // namespace adjoint::io::detail
