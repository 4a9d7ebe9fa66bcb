// The op census's list (Note [Op census] in op_census.h).
#include "autograd/op_census.h"

#include <algorithm>

namespace adjoint::detail {
namespace {

std::vector<std::string_view>& names() {
  static std::vector<std::string_view> all;  // filled during static initialisation only
  return all;
}

}  // namespace

bool register_op_name(std::string_view name) {
  auto& all = names();
  if (std::find(all.begin(), all.end(), name) == all.end()) all.push_back(name);
  return true;
}

const std::vector<std::string_view>& registered_op_names() { return names(); }

}  // namespace adjoint::detail
