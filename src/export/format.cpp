// Reading and writing op fields as JSON, for the export file.
#include "export/format.h"

#include <bit>
#include <charconv>
#include <cstdint>
#include <cstdio>

#include "adjoint/error.h"

namespace adjoint::detail {

using nlohmann::json;

// Note [The export file]
// A safetensors file (io/safetensors.h): tensors "capture.<i>" (what the function read from
// outside, by value) and "constant.<i>" (tensors factories made while tracing), and in the
// metadata "adjoint.export" = "2" and "adjoint.graph", the traced graph as JSON:
//   values       [kind, index, node, shape, dtype, alias_of] per value (ValueKind's order)
//   nodes        {"op": key, "fields": [...], "in": [...], "out": [...], "backward", "random"}
//   inputs, outputs, cotangents, grad_leaves, grads   value ids, as in Graph
//   input_strides, grad_enabled                       the rest of the signature
//   captures     [requires_grad, ...]
//   generators   {"default", "state"} per generator random nodes draw from (node "generator")
//   dynamic      (optional) a family of signatures with dynamic sizes (Note [Dynamic sizes]):
//                "symbols"; "dims" [input, dim, symbol]; "value_dims" [value, dim, formula];
//                "ops" and "constants" [op or constant, field, element, formula]; "recipes"
//                [constant, key, fields]. A formula is [kind, [coefficients as fields]]: "i"
//                for an integer polynomial or its reciprocal, "d" for a real one.
// An op is its registered key and its fields (Note [Exporting ops] in op_fields.h), each field
// a pair [tag, value]: "i" integer, "d" double as its 64 bits in hex (exact, NaN and infinities
// included), "v" integer list, "t" dtype name, "s" string, "n" an absent optional. The graph is
// the one traced, before the passes: import_function plans it again, with its own options.

json field_to_json(const Field& f) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return json::array({"i", v});
        } else if constexpr (std::is_same_v<T, double>) {
          char hex[19];
          std::snprintf(hex, sizeof hex, "%016llx",
                        static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
          return json::array({"d", hex});
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return json::array({"v", v});
        } else if constexpr (std::is_same_v<T, DType>) {
          return json::array({"t", std::string(to_string(v))});
        } else if constexpr (std::is_same_v<T, std::string>) {
          return json::array({"s", v});
        } else {
          return json::array({"n"});
        }
      },
      f);
}

DType dtype_named(const std::string& name) {
  for (const DTypeInfo& row : kDTypeTable)
    if (row.name == name) return row.dtype;
  throw Error(ErrorKind::Value, kImportOp, "unknown dtype '" + name + "'");
}

namespace {

/// An integer field's value: refused unless the JSON holds an integer that fits int64 (a
/// double, 1e23, would otherwise be cast without a check).
int64_t int64_field(const json& j) {
  ADJOINT_CHECK(j.is_number_integer() && (!j.is_number_unsigned() ||
                                          j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)),
                Value, kImportOp, "an integer field holds '", j.dump(), "', not an int64");
  return j.get<int64_t>();
}

}  // namespace

Field field_from_json(const json& j) {
  const std::string tag = j.at(0).get<std::string>();
  if (tag == "i") return int64_field(j.at(1));
  if (tag == "d") {
    // 16 hex digits, parsed without exceptions (std::stoull would throw its own on "zzzz").
    const std::string hex = j.at(1).get<std::string>();
    uint64_t bits = 0;
    const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
    ADJOINT_CHECK(hex.size() == 16 && ec == std::errc() && end == hex.data() + hex.size(), Value,
                  kImportOp, "malformed double field '", hex, "' (16 hex digits)");
    return std::bit_cast<double>(bits);
  }
  if (tag == "v") {
    ADJOINT_CHECK(j.at(1).is_array(), Value, kImportOp, "a list field holds '", j.at(1).dump(),
                  "'");
    std::vector<int64_t> list;
    for (const json& x : j.at(1)) list.push_back(int64_field(x));
    return list;
  }
  if (tag == "t") return dtype_named(j.at(1).get<std::string>());
  if (tag == "s") return j.at(1).get<std::string>();
  ADJOINT_CHECK(tag == "n", Value, kImportOp, "unknown field tag '", tag, "'");
  return FieldNone{};
}

}  // namespace adjoint::detail
