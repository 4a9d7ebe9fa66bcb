// Training checkpoints: named parameters plus, optionally, an optimizer's state_dict (under the
// prefix "optim.") in one safetensors file, restored in place into existing tensors.
// Parameters are plain named tensors (e.g. a module's named_parameters()).
#pragma once

#include <string>

#include "adjoint/io/safetensors.h"
#include "adjoint/optim/optimizer.h"

namespace adjoint::io {

/// The prefix of the optimizer's entries in a checkpoint: "optim.step", "optim.state.0.exp_avg".
inline constexpr const char* kOptimizerPrefix = "optim.";

/// Saves `params` under their own names and, when `optimizer` is given, its state_dict() with
/// names prefixed by "optim.", atomically (see save_safetensors). A parameter name starting
/// with "optim." is an error when an optimizer is saved with it.
void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::Optimizer* optimizer = nullptr, const Metadata& metadata = {});

/// Restores a checkpoint into the existing `params` (copied in place, so a model and an
/// optimizer holding these tensors see the new values) and, when `optimizer` is given, its
/// state. Every parameter must be in the file with the same shape and dtype; with `strict`,
/// the file may hold nothing else (besides "optim." entries). Everything is checked before
/// anything is modified. Returns the file's metadata. Throws adjoint::Error (op
/// "io.load_checkpoint", or the optimizer's name for a bad optimizer state).
Metadata load_checkpoint(const std::string& path, const NamedTensors& params,
                         optim::Optimizer* optimizer = nullptr, bool strict = true);

}  // namespace adjoint::io
