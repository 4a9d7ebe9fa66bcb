// The registry of exportable ops (Note [Exporting ops] in op_fields.h).
#include "core/op_fields.h"

#include <map>
#include <mutex>
#include <set>
#include <typeindex>

namespace adjoint::detail {
namespace {

struct Entry {
  std::type_index type;
  OpFactory factory;
  bool conflict = false;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registrations run at static init
  return *r;
}

}  // namespace

const char* intern_field_string(const std::string& s) {
  static std::mutex mutex;
  static auto* strings = new std::set<std::string>();  // never destroyed: ops point into it
  std::lock_guard lock(mutex);
  return strings->insert(s).first->c_str();
}

void register_exported_op(const char* key, const std::type_info& type, OpFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto [it, inserted] = r.entries.try_emplace(key, Entry{std::type_index(type), factory});
  if (!inserted && it->second.type != std::type_index(type)) it->second.conflict = true;
}

OpFactory exported_op_factory(const std::string& key) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.entries.find(key);
  ADJOINT_CHECK(it != r.entries.end(), Value, "import_function", "the file holds op '", key,
                "', which this build of adjoint does not know");
  ADJOINT_CHECK(!it->second.conflict, Value, "import_function", "two ops of this build are named '",
                key, "'; neither can be read back");
  return it->second.factory;
}

std::vector<std::string> exported_op_key_conflicts() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [key, e] : r.entries)
    if (e.conflict) out.push_back(key);
  return out;
}

std::vector<std::string> exported_op_keys() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [key, e] : r.entries) out.push_back(key);
  return out;
}

}  // namespace adjoint::detail
