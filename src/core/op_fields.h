// An op's attributes as a flat list of plain values, so that a traced graph can be written to a
// file and read back in another process (export, src/export/). See Note [Exporting ops].
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/error.h"
#include "adjoint/shape.h"

namespace adjoint {
class Generator;
}

namespace adjoint::detail {

// Note [Exporting ops]
// An op struct's members are its attributes (the exponent of pow, a view's shape, the dims of a
// sum) and, for a forward that sets them, the state its backward reads. An op with members
// names them in one place, beside its rules:
//   auto fields() { return std::tie(dims, keepdim); }
// and TypedTracedOp (src/autograd/apply.h) refuses to compile an op with members but no
// fields(), so that no attribute can be left out of a file silently. Each op type is registered
// under its name (or `export_name` where two ops share a name: "pow" and "pow_scalar") when
// the program starts (a static member of TypedTracedOp<Op>, initialised in the file that
// calls apply<Op>), with a factory that rebuilds it from its fields. What is not an op struct
// (a factory's constant, with its recipe) says how a file holds it with an ExternalExport.
// Fields are integers (also bools, enums), doubles (kept as their bits: NaN, infinities and -0
// survive), integer lists (shapes), dtypes (by name), strings (an op name an error reports) and
// absent optionals. An op that holds what no file can (a tensor) says
// `static constexpr bool exportable = false;`, and exporting a graph with it throws.

struct FieldNone {
  bool operator==(const FieldNone&) const = default;
};
using Field = std::variant<int64_t, double, std::vector<int64_t>, DType, std::string, FieldNone>;
using FieldList = std::vector<Field>;

/// Reads fields back in the order they were written; throws naming the op on a mismatch.
class FieldReader {
 public:
  FieldReader(const FieldList& fields, const char* op) : fields_(fields), op_(op) {}
  template <class T>
  const T& next() {
    ADJOINT_CHECK(pos_ < fields_.size(), Value, op_, "the exported op has ", fields_.size(),
                  " fields, fewer than this build of adjoint reads");
    const Field& f = fields_[pos_++];
    ADJOINT_CHECK(std::holds_alternative<T>(f), Value, op_, "field ", pos_ - 1,
                  " of the exported op has another type than this build of adjoint reads");
    return std::get<T>(f);
  }
  /// Takes an absent optional's field if it is next.
  bool take_none() {
    if (pos_ >= fields_.size() || !std::holds_alternative<FieldNone>(fields_[pos_])) return false;
    ++pos_;
    return true;
  }
  void finish() const {
    ADJOINT_CHECK(pos_ == fields_.size(), Value, op_, "the exported op has ", fields_.size(),
                  " fields, more than this build of adjoint reads (", pos_, ")");
  }

 private:
  const FieldList& fields_;
  std::size_t pos_ = 0;
  const char* op_;
};

/// A string field read back as a `const char*` that lives as long as the program.
const char* intern_field_string(const std::string& s);

template <class T>
concept HasFields = requires(T& t) {
  t.fields();
};

template <class T>
void put_field(FieldList& out, const T& v);
template <class T>
void take_field(FieldReader& in, T& v);

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class Tuple>
void put_tuple(FieldList& out, const Tuple& t) {
  std::apply([&](const auto&... m) { (put_field(out, m), ...); }, t);
}

template <class T>
void put_field(FieldList& out, const T& v) {
  if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) {
    out.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v));
  } else if constexpr (std::is_same_v<T, DType>) {
    out.emplace_back(std::in_place_type<DType>, v);
  } else if constexpr (std::is_enum_v<T>) {
    out.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    out.emplace_back(std::in_place_type<double>, static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    out.emplace_back(std::in_place_type<std::vector<int64_t>>, v);
  } else if constexpr (std::is_same_v<T, Shape>) {
    out.emplace_back(std::in_place_type<std::vector<int64_t>>, v.begin(), v.end());
  } else if constexpr (std::is_same_v<T, const char*>) {
    out.emplace_back(std::in_place_type<std::string>, v ? v : "");
  } else if constexpr (IsOptional<T>::value) {
    if (v) {
      put_field(out, *v);
    } else {
      out.emplace_back(std::in_place_type<FieldNone>);
    }
  } else {
    static_assert(HasFields<T>,
                  "a field is a number, bool, enum, DType, shape, optional, or a "
                  "struct with fields()");
    T copy = v;  // fields() gives references into a non-const struct
    put_tuple(out, copy.fields());
  }
}

template <class T>
void take_field(FieldReader& in, T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    v = in.next<int64_t>() != 0;
  } else if constexpr (std::is_integral_v<T>) {
    v = static_cast<T>(in.next<int64_t>());
  } else if constexpr (std::is_same_v<T, DType>) {
    v = in.next<DType>();
  } else if constexpr (std::is_enum_v<T>) {
    v = static_cast<T>(in.next<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    v = static_cast<T>(in.next<double>());
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    v = in.next<std::vector<int64_t>>();
  } else if constexpr (std::is_same_v<T, Shape>) {
    v = Shape(in.next<std::vector<int64_t>>());
  } else if constexpr (std::is_same_v<T, const char*>) {
    v = intern_field_string(in.next<std::string>());
  } else if constexpr (IsOptional<T>::value) {
    if (in.take_none()) {
      v.reset();
      return;
    }
    typename T::value_type x{};
    take_field(in, x);
    v = x;
  } else {
    std::apply([&](auto&... m) { (take_field(in, m), ...); }, v.fields());
  }
}

/// In each file that defines ops: a symbol import_function refers to, so that a program
/// linked against the static library gets the file's ops (and their registrations) even when
/// it calls none of them itself (src/export/linked_ops.h lists the files).
#define ADJOINT_OPS_FILE(file) \
  namespace adjoint::detail {  \
  void link_ops_##file() {}    \
  }

class TracedOp;
/// What a factory may need beyond the fields: the generator a random draw reads (the importing
/// process's default one, or the imported function's own).
struct OpImportContext {
  Generator* generator = nullptr;
};
using OpFactory = std::shared_ptr<const TracedOp> (*)(const FieldList&, const OpImportContext&);

/// Registers the factory of an exportable op under `key` (once per op type; two types under
/// one key are noted, and neither can then be read back).
void register_exported_op(const char* key, const std::type_info& type, OpFactory factory);
/// The factory registered under `key`; throws naming it when none or several are.
OpFactory exported_op_factory(const std::string& key);
/// Keys that two op types registered (a test asserts there are none).
std::vector<std::string> exported_op_key_conflicts();
/// Every registered key.
std::vector<std::string> exported_op_keys();

}  // namespace adjoint::detail
