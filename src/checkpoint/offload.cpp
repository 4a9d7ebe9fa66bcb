// SaveOnDisk and SaveAsBFloat16: saved-tensor hooks that move what ops save for backward to a
// temporary file, or shrink it to bfloat16, and bring it back on unpack.
#include "adjoint/offload.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <any>
#include <cstdlib>
#include <cstring>
#include <set>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "backend/host_transfer.h"

namespace adjoint {
namespace detail {

// The unnamed temporary file and its append position. Shared by every record packed into it,
// so it outlives the guard for as long as backward may still read from it.
struct SpillFile {
  int fd = -1;
  std::string dir;
  std::size_t end = 0;  // next free byte (records are page-aligned)
  std::size_t written = 0;

  ~SpillFile() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace detail

namespace {

constexpr const char* kDiskOp = "save_on_disk";

[[noreturn]] void fail_io(const std::string& dir, const std::string& what, int err) {
  throw Error(ErrorKind::IO, kDiskOp,
              "temporary file in '" + dir + "': " + what + ": " + std::strerror(err));
}

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// An unnamed file in dir: O_TMPFILE where the file system supports it, else a mkstemp file
// unlinked at once. Either way no name is ever left behind.
int open_unnamed(const std::string& dir) {
#ifdef O_TMPFILE
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
    fail_io(dir, "cannot create it", errno);
#endif
  std::string name = dir + "/adjoint-saved-XXXXXX";
  int fd2 = ::mkstemp(name.data());
  if (fd2 < 0) fail_io(dir, "cannot create it", errno);
  ::unlink(name.c_str());
  return fd2;
}

// The storages of `keep`, compared by address.
std::set<const StorageImpl*> storages_of(const std::vector<Tensor>& keep) {
  std::set<const StorageImpl*> out;
  for (const Tensor& t : keep)
    if (t.defined()) out.insert(t.impl()->storage.get());
  return out;
}

bool kept(const std::set<const StorageImpl*>& keep, const Tensor& t) {
  return keep.count(t.impl()->storage.get()) > 0;
}

// A saved tensor's bytes in the file: [offset, offset + nbytes). Returns its space to the
// file system when the last reference goes (the saved tensor was released).
struct DiskRecord {
  std::shared_ptr<detail::SpillFile> file;
  std::size_t offset = 0, nbytes = 0;
  Shape shape;
  DType dtype{};
  ~DiskRecord() {
#ifdef FALLOC_FL_PUNCH_HOLE
    if (file && nbytes > 0)  // best effort: a file system without hole punching keeps it
      (void)::fallocate(file->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(offset), static_cast<off_t>(nbytes));
#endif
  }
};

std::any pack_to_disk(const std::shared_ptr<detail::SpillFile>& file,
                      const std::set<const StorageImpl*>& keep, const Tensor& t) {
  if (kept(keep, t) || t.nbytes() == 0) return t;
  const Tensor c = t.contiguous();
  auto rec = std::make_shared<DiskRecord>();
  rec->nbytes = c.nbytes();
  rec->shape = c.shape();
  rec->dtype = c.dtype();
  rec->offset = file->end;
  // The bytes come through the device's host transfer, chunk by chunk (Note [Host transfers]).
  std::size_t done = 0;
  adjoint::detail::stream_to_host(c, [&](const char* p, std::size_t n) {
    for (std::size_t put = 0; put < n;) {
      const ssize_t w =
          ::pwrite(file->fd, p + put, n - put, static_cast<off_t>(rec->offset + done + put));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_io(file->dir, "cannot write " + std::to_string(rec->nbytes) + " bytes", errno);
      }
      put += static_cast<std::size_t>(w);
    }
    done += n;
  });
  // The next record starts on a page boundary, so each can be mapped on its own.
  const std::size_t page = page_size();
  file->end = (rec->offset + rec->nbytes + page - 1) / page * page;
  file->written += rec->nbytes;
  rec->file = file;
  return rec;
}

Tensor unpack_from_disk(const std::any& packed) {
  if (const Tensor* t = std::any_cast<Tensor>(&packed)) return *t;
  const auto& rec = std::any_cast<const std::shared_ptr<DiskRecord>&>(packed);
  Tensor out = empty(rec->shape, rec->dtype);
  void* map = ::mmap(nullptr, rec->nbytes, PROT_READ, MAP_PRIVATE, rec->file->fd,
                     static_cast<off_t>(rec->offset));
  if (map == MAP_FAILED)
    fail_io(rec->file->dir, "cannot map " + std::to_string(rec->nbytes) + " bytes back", errno);
  try {
    kernels::copy_from_host(out, map);
  } catch (...) {
    ::munmap(map, rec->nbytes);
    throw;
  }
  ::munmap(map, rec->nbytes);
  return out;
}

// What the hook keeps is always a Tensor, so that memory_stats() and the saved-memory
// accounting (which sees a packed Tensor's storage) count it. A float32 tensor becomes a
// bfloat16 one (to(), rounding to nearest even). Anything else is kept as it is; a tensor that
// was bfloat16 already is kept as a [..., 2] view with stride 0 in the new last dim (no copy), so
// that unpack does not widen it: a shrunk tensor is freshly made and contiguous, and never has
// that stride.
std::any pack_bfloat16(const std::set<const StorageImpl*>& keep, const Tensor& t) {
  if (t.dtype() == DType::BFloat16) {
    Shape shape = t.shape();
    shape.push_back(2);
    return t.unsqueeze(-1).expand(shape);
  }
  if (t.dtype() != DType::Float32 || kept(keep, t)) return t;
  return detail::detach_alias(t).to(DType::BFloat16);
}

Tensor unpack_bfloat16(const std::any& packed) {
  const Tensor& p = std::any_cast<const Tensor&>(packed);
  if (p.dtype() != DType::BFloat16) return p;
  if (p.dim() > 0 && p.size(-1) == 2 && p.strides().back() == 0) return p.select(-1, 0);
  return p.to(DType::Float32);
}

}  // namespace

SaveOnDisk::SaveOnDisk(const std::string& dir, const std::vector<Tensor>& keep)
    : file_(std::make_shared<detail::SpillFile>()) {
  std::string d = dir;
  if (d.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    d = tmp && *tmp ? tmp : "/tmp";
  }
  file_->dir = d;
  file_->fd = open_unnamed(d);
  auto file = file_;
  auto keep_set = std::make_shared<const std::set<const StorageImpl*>>(storages_of(keep));
  hooks_ = std::make_unique<SavedTensorHooks>(
      [file, keep_set](const Tensor& t) { return pack_to_disk(file, *keep_set, t); },
      unpack_from_disk);
}

SaveOnDisk::~SaveOnDisk() = default;

std::size_t SaveOnDisk::bytes_written() const { return file_->written; }

SaveAsBFloat16::SaveAsBFloat16(const std::vector<Tensor>& keep) {
  auto keep_set = std::make_shared<const std::set<const StorageImpl*>>(storages_of(keep));
  hooks_ = std::make_unique<SavedTensorHooks>(
      [keep_set](const Tensor& t) { return pack_bfloat16(*keep_set, t); }, unpack_bfloat16);
}

SaveAsBFloat16::~SaveAsBFloat16() = default;

}  // namespace adjoint
