// Where saved activations live between forward and backward: on disk (SaveOnDisk) or in RAM as
// bfloat16 (SaveAsBFloat16). Both are saved-tensor hooks (autograd.h): RAII guards that apply
// to the tensors ops save while they are alive, and the saved values stay where they were put
// until backward reads them, even after the guard is gone. See docs/offload.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/tensor.h"

namespace adjoint {

namespace detail {
struct SpillFile;
}

/// Spills every tensor saved for backward to an unnamed temporary file in `dir` (default:
/// $TMPDIR, else /tmp) and reads it back, memory-mapped, when backward needs it. The file has
/// no name from the start (O_TMPFILE, or unlinked right after creation), so nothing is left
/// behind on any exit path, errors and crashes included; its space is returned as the saved
/// tensors are released. Tensors sharing storage with `keep` (typically the model's
/// parameters, which stay in memory anyway) are kept as they are. Exact: values come back
/// bit for bit. Throws adjoint::Error (IO, "save_on_disk") when the file cannot be created or
/// written, naming the directory and the reason.
class SaveOnDisk {
 public:
  explicit SaveOnDisk(const std::string& dir = "", const std::vector<Tensor>& keep = {});
  ~SaveOnDisk();
  SaveOnDisk(const SaveOnDisk&) = delete;
  SaveOnDisk& operator=(const SaveOnDisk&) = delete;
  /// Bytes written to the file so far.
  std::size_t bytes_written() const;

 private:
  std::shared_ptr<detail::SpillFile> file_;
  std::unique_ptr<SavedTensorHooks> hooks_;
};

/// Keeps every float32 tensor saved for backward as bfloat16 (round to nearest even), half
/// the bytes, and widens it back when backward reads it: opt-in and lossy (8 significant bits,
/// so gradients carry relative errors of about 2^-9 per saved factor). Other dtypes (float64,
/// indices, masks) and tensors sharing storage with `keep` are kept as they are.
class SaveAsBFloat16 {
 public:
  explicit SaveAsBFloat16(const std::vector<Tensor>& keep = {});
  ~SaveAsBFloat16();
  SaveAsBFloat16(const SaveAsBFloat16&) = delete;
  SaveAsBFloat16& operator=(const SaveAsBFloat16&) = delete;

 private:
  std::unique_ptr<SavedTensorHooks> hooks_;
};

}  // namespace adjoint
