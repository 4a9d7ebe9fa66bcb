// Training checkpoints: named parameters plus, optionally, an optimizer's state_dict (under the
// prefix "optim.") in one safetensors file, restored in place into existing tensors.
// Parameters are plain named tensors (e.g. a module's named_parameters()). Also the clean-up of
// temporaries that atomic saves leave behind when their process is killed.
#pragma once

#include <cstddef>
#include <string>

#include "adjoint/io/safetensors.h"
#include "adjoint/optim/optimizer.h"

namespace adjoint::io {

/// The prefix of the optimizer's entries in a checkpoint: "optim.step", "optim.state.0.exp_avg".
inline constexpr const char* kOptimizerPrefix = "optim.";

/// Saves `params` under their own names and, when `optimizer` is given, its state_dict() with
/// names prefixed by "optim.", atomically (see save_safetensors). First removes the stale
/// temporaries of earlier saves of `path` (remove_stale_temporaries). A parameter name
/// starting with "optim." is an error when an optimizer is saved with it.
void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::Optimizer* optimizer = nullptr, const Metadata& metadata = {});
/// The same with an optimizer state given as a state_dict (a sharded optimizer's consolidated
/// one, say); an empty one saves none.
void save_checkpoint(const std::string& path, const NamedTensors& params,
                     const optim::StateDict& optimizer_state, const Metadata& metadata = {});
/// The optimizer's entries of a checkpoint, without their "optim." prefix.
optim::StateDict optimizer_state_of(const SafetensorsFile& file);

/// Restores a checkpoint into the existing `params` (copied in place, so a model and an
/// optimizer holding these tensors see the new values) and, when `optimizer` is given, its
/// state. Every parameter must be in the file with the same shape and dtype; with `strict`,
/// the file may hold nothing else (besides "optim." entries). Everything is checked before
/// anything is modified. Returns the file's metadata. Throws adjoint::Error (op
/// "io.load_checkpoint", or the optimizer's name for a bad optimizer state).
Metadata load_checkpoint(const std::string& path, const NamedTensors& params,
                         optim::Optimizer* optimizer = nullptr, bool strict = true);

/// The same from a file already read by load_safetensors (`path` only names it in messages),
/// so that a caller can validate the metadata first and restore from the very bytes it checked.
void load_checkpoint(const SafetensorsFile& file, const std::string& path,
                     const NamedTensors& params, optim::Optimizer* optimizer = nullptr,
                     bool strict = true);

/// Removes the temporaries `<path>.tmp.<pid>.<n>` that save_safetensors and
/// write_text_file_atomic leave beside `path` when their process dies mid-write (SIGKILL, a
/// crash, power loss), but only those whose process <pid> no longer exists: a save in
/// progress in a live process, this one included, is never touched, nor a temporary of another
/// target. Returns how many it removed; failures to list or remove are ignored (best effort).
/// Caveat: liveness is judged by pid in this pid namespace, so do not share one directory
/// between writers on different hosts or containers.
std::size_t remove_stale_temporaries(const std::string& path);

}  // namespace adjoint::io
