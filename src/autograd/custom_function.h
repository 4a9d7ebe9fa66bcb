// What the library asks of custom functions' calls beyond the dispatch stack (Note [Custom
// functions in the stack] in function.cpp).
#pragma once

namespace adjoint::detail {

/// Whether `op`, a name an observer was given, is a custom function's call: its work is
/// its forward's ops, which observers see too (so it costs no FLOPs of its own).
bool names_custom_function(const char* op);

}  // namespace adjoint::detail
