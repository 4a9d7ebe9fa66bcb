// save_safetensors: builds the JSON header (names in the given order, data grouped by element
// size so that every tensor is aligned) and writes header and data to a temporary file that is
// fsync'ed and renamed over the target, so a crash or an error never leaves a torn checkpoint.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/ops.h"
#include "backend/host_transfer.h"
#include "io/safetensors_format.h"

namespace adjoint::io {
namespace {

constexpr const char* kOp = "io.save_safetensors";

[[noreturn]] void fail_io(const std::string& path, const std::string& what, int err) {
  throw Error(ErrorKind::IO, kOp, "'" + path + "': " + what + ": " + std::strerror(err));
}

// The temporary file: created next to the target (rename is atomic only within a file
// system), removed by the destructor unless committed.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<uint64_t> counter{0};
    path_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    // 0666 and the umask give the permissions an ordinary new file gets (mkstemp's 0600 would
    // make the checkpoint private).
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) fail_io(target_, "cannot create the temporary file '" + path_ + "'", errno);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_io(target_, "cannot write the temporary file '" + path_ + "'", errno);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  // fsync, close, rename over the target, then fsync the directory so the rename is durable.
  void commit() {
    if (::fsync(fd_) != 0)
      fail_io(target_, "cannot fsync the temporary file '" + path_ + "'", errno);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0)
      fail_io(target_, "cannot close the temporary file '" + path_ + "'", errno);
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail_io(target_, "cannot rename the temporary file '" + path_ + "' over it", errno);
    committed_ = true;
    std::string dir = std::filesystem::path(target_).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;  // the file is complete; only the rename's durability is unconfirmed
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    // Some file systems cannot fsync a directory (EINVAL); that is not a failed write.
    if (rc != 0 && err != EINVAL && err != ENOTSUP && err != EROFS)
      fail_io(target_, "written, but fsync of its directory failed (the rename may not be durable)",
              err);
  }

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

struct Entry {
  const std::string* name;
  Tensor data;  // contiguous
  detail::FileDTypeInfo dtype;
  uint64_t nbytes;
  uint64_t begin = 0;
};

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  if constexpr (std::endian::native != std::endian::little)
    throw Error(ErrorKind::NotImplemented, kOp, "safetensors needs a little-endian machine");
  NoGradGuard no_grad;

  // Validate everything before the temporary file exists.
  std::vector<Entry> entries;
  std::set<std::string_view> names;
  for (const auto& [name, t] : tensors) {
    ADJOINT_CHECK(name != "__metadata__", Value, kOp, "'", path,
                  "': '__metadata__' is reserved and cannot name a tensor");
    ADJOINT_CHECK(names.insert(name).second, Value, kOp, "'", path, "': the name '", name,
                  "' appears twice");
    ADJOINT_CHECK(t.defined(), Value, kOp, "'", path, "': tensor '", name, "' is undefined");
    std::optional<detail::FileDTypeInfo> dt = detail::file_dtype_for(t.dtype());
    ADJOINT_CHECK(dt.has_value(), DType, kOp, "'", path, "': tensor '", name, "' (", describe(t),
                  ") has a dtype safetensors cannot hold");
    entries.push_back({&name, t.contiguous(), *dt, static_cast<uint64_t>(t.nbytes())});
  }

  // Data layout: 8-byte dtypes, then 4-, 2- and 1-byte ones (each group in the given order), so
  // every tensor starts at a multiple of its element size.
  std::vector<std::size_t> layout(entries.size());
  for (std::size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].dtype.size > entries[b].dtype.size;
  });
  uint64_t offset = 0;
  for (std::size_t i : layout) {
    entries[i].begin = offset;
    offset += entries[i].nbytes;
  }

  // The header, in the given order, with the metadata first (as Python's safetensors).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  for (const Entry& e : entries) {
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = e.dtype.name;
    info["shape"] = e.data.shape().vec();
    info["data_offsets"] = {e.begin, e.begin + e.nbytes};
    header[*e.name] = std::move(info);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& ex) {  // names and metadata must be UTF-8
    throw Error(
        ErrorKind::Value, kOp,
        "'" + path + "': a tensor name or metadata string is not valid UTF-8 (" + ex.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data then starts 8-byte aligned

  unsigned char length[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));

  TempFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (std::size_t i : layout)
    if (entries[i].nbytes > 0)
      adjoint::detail::stream_to_host(
          entries[i].data, [&](const char* bytes, std::size_t n) { file.write(bytes, n); });
  file.commit();
}

}  // namespace adjoint::io
