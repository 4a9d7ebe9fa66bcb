// The export file's format (Note [The export file] in format.cpp): its keys, and an op field
// as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/op_fields.h"

namespace adjoint::detail {

inline constexpr const char* kExportOp = "export_function";
inline constexpr const char* kImportOp = "import_function";
/// Metadata keys: the format's version, and the graph as JSON.
inline constexpr const char* kFormatKey = "adjoint.export";
inline constexpr const char* kFormatVersion = "2";  // 2: cross_entropy has no scale field
inline constexpr const char* kGraphKey = "adjoint.graph";

nlohmann::json field_to_json(const Field& f);
Field field_from_json(const nlohmann::json& j);
DType dtype_named(const std::string& name);

}  // namespace adjoint::detail
