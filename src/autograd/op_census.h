// The op census: the name of every op struct that apply<Op> or apply_list<Op> is instantiated
// with anywhere in the program, registered before main runs. It lets a test hold the sample
// registry against the ops that exist (Note [Op census]).
#pragma once

#include <string_view>
#include <vector>

namespace adjoint::detail {

// Note [Op census]
// A test of every op over the sample registry (gradcheck, vmap, 16-bit dtypes) cannot see an
// op that has no samples: it would silently go untested. apply<Op> names OpCensus<Op>::
// registered, which makes the compiler instantiate that static member for every op the
// library applies; its initialiser runs at program start and records Op::name. The reference
// compiles to nothing, so the per-op path pays no instruction for it.

/// Records `name` (once); returns true.
bool register_op_name(std::string_view name);
/// The names registered so far, in registration order, each once.
const std::vector<std::string_view>& registered_op_names();

template <class Op>
struct OpCensus {
  static inline const bool registered = register_op_name(Op::name);
};

}  // namespace adjoint::detail
