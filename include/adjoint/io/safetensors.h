// Safetensors files (https://github.com/huggingface/safetensors): save and load named tensors
// with string metadata, in a format Python's safetensors reads and writes. Saving is atomic;
// loading validates the whole header and never reads out of bounds. See docs/checkpoints.md.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::io {

/// Named tensors in a fixed order (the same type as optim::StateDict).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
/// The file's "__metadata__": free-form string pairs.
using Metadata = std::map<std::string, std::string>;

/// What load_safetensors returns.
struct SafetensorsFile {
  NamedTensors tensors;  ///< in the order of the file's header (the order they were saved in)
  Metadata metadata;
};

/// Writes `tensors` (each dtype as itself: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL) and
/// `metadata`
/// to `path`. The file is 8 bytes of little-endian header length N, N bytes of JSON header
/// (padded with spaces to a multiple of 8), then the data. The header lists tensors in the
/// given order; in the data, tensors are laid out back to back, 8-byte dtypes first, then
/// 4-byte, 2-byte and 1-byte, each group in the given order, so that every tensor is aligned to its
/// element size (as Python's safetensors does). Views and non-contiguous tensors are saved by
/// value. Atomic: the bytes go to a temporary file in the same directory, which is fsync'ed and
/// renamed over `path` (then the directory is fsync'ed); on any error the temporary file is
/// removed and an existing file at `path` is left untouched. Throws adjoint::Error (kind IO or
/// Value, op "io.save_safetensors") for undefined tensors, duplicate or reserved names
/// ("__metadata__"), names that are not UTF-8, and I/O failures.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});

/// Reads a safetensors file. F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL load as the
/// dtype of the same name (other dtypes are rejected). Throws adjoint::Error (kind IO, op
/// "io.load_safetensors", naming the file) when the file is missing or unreadable, shorter than 8
/// bytes, has a header length past its end, a header that is not a JSON object (or has duplicate
/// keys), an unknown dtype, a malformed shape, data_offsets whose size differs from shape x
/// itemsize, offsets out of range, overlapping or with gaps, or bytes after the last tensor.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace adjoint::io
