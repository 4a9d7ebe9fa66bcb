// write_text_file_atomic: temp file + rename. The temporary name carries the process id and a
// counter, so concurrent writers of one target never share a temporary file.
#include "adjoint/io/text_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "adjoint/error.h"

namespace adjoint::io {

void write_text_file_atomic(const std::string& path, const std::string& text, const char* op) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    ADJOINT_CHECK(f.good(), IO, op, "cannot create the temporary file '", tmp, "' for '", path,
                  "': ", std::strerror(errno));
    f << text;
    f.flush();
    if (!f.good()) {
      const int err = errno;
      f.close();
      std::remove(tmp.c_str());
      ADJOINT_CHECK(false, IO, op, "error while writing '", tmp, "': ", std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    ADJOINT_CHECK(false, IO, op, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace adjoint::io
