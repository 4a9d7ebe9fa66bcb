// Atomic text files: the whole text or nothing at the target path, for the plots and CSV
// files tools and memory timelines write (safetensors has its own, fsync'ed, writer).
#pragma once

#include <string>

namespace adjoint::io {

/// Writes `text` to a temporary file beside `path` and renames it over `path`, so a reader
/// never sees a partial file; the temporary file is removed on failure. Throws adjoint::Error
/// (IO) naming `op` and the path.
void write_text_file_atomic(const std::string& path, const std::string& text, const char* op);

}  // namespace adjoint::io
