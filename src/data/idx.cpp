// IDX readers (include/adjoint/data/idx.h): the header checked field by field, the data read in
// chunks through zlib's gz* functions (which read gzip and plain files alike), so a header that
// promises more than the file holds fails as truncated instead of allocating what it claims.
#include "adjoint/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::data {
namespace {

// The largest file these readers take: 2^34 elements (16 GiB of bytes), far above any image
// set, and small enough that no product of checked dims overflows.
constexpr int64_t kMaxElements = int64_t{1} << 34;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

class IdxReader {
 public:
  IdxReader(const std::string& path, const char* op) : path_(path), op_(op) {
    std::error_code ec;
    check(std::filesystem::is_regular_file(path, ec), "no such file");
    file_.reset(gzopen(path.c_str(), "rb"));
    check(file_ != nullptr, "cannot open it");
    gzbuffer(file_.get(), 1 << 20);
  }

  // Up to n bytes into out; fewer only at the end of the data.
  int64_t read(uint8_t* out, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 24));
      const int r = gzread(file_.get(), out + got, chunk);
      if (r < 0) fail_decompress();
      if (r == 0) break;
      got += r;
    }
    // A gzip stream cut short reads as a short stream and leaves an error behind.
    int err = Z_OK;
    gzerror(file_.get(), &err);
    if (err != Z_OK) fail_decompress();
    return got;
  }

  // The header of an unsigned-byte IDX file of `rank` dims: the dims.
  std::vector<int64_t> header(int rank) {
    uint8_t magic[4];
    const int64_t got = read(magic, 4);
    check(got == 4, "truncated: the file ends inside the magic number");
    const uint32_t value = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                           (uint32_t{magic[2]} << 8) | magic[3];
    const uint32_t want = 0x0800u | static_cast<uint32_t>(rank);
    char hex[2][16];
    std::snprintf(hex[0], sizeof hex[0], "0x%08x", value);
    std::snprintf(hex[1], sizeof hex[1], "0x%08x", want);
    check(value == want, "not an IDX file of unsigned bytes of rank " + std::to_string(rank) +
                             ": magic number " + hex[0] + ", expected " + hex[1]);
    std::vector<int64_t> dims(static_cast<std::size_t>(rank));
    for (int64_t& d : dims) {
      uint8_t b[4];
      check(read(b, 4) == 4, "truncated: the file ends inside the dims of its header");
      d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    }
    return dims;
  }

  // Exactly n bytes of data, then the end of the file.
  std::vector<uint8_t> data(int64_t n) {
    std::vector<uint8_t> bytes;
    constexpr int64_t kChunk = int64_t{1} << 22;
    int64_t got = 0;
    while (got < n) {
      const int64_t want = std::min(kChunk, n - got);
      bytes.resize(static_cast<std::size_t>(got + want));
      const int64_t r = read(bytes.data() + got, want);
      got += r;
      if (r < want) break;
    }
    check(got == n, "truncated: its dims promise " + std::to_string(n) +
                        " bytes of data, it holds " + std::to_string(got));
    uint8_t extra;
    check(read(&extra, 1) == 0, "has bytes after the " + std::to_string(n) + " its dims promise");
    return bytes;
  }

  void check(bool cond, const std::string& what) const {
    ADJOINT_CHECK(cond, IO, op_, path_, ": ", what);
  }

 private:
  [[noreturn]] void fail_decompress() const {
    int err = Z_OK;
    const char* msg = gzerror(file_.get(), &err);
    throw Error(ErrorKind::IO, op_,
                path_ + ": corrupt or truncated compressed data (zlib: " + (msg ? msg : "?") + ")");
  }

  std::string path_;
  const char* op_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
};

// The element count of dims, each checked; an error names the dims when they are too large.
int64_t element_count(const std::vector<int64_t>& dims, const IdxReader& r) {
  int64_t count = 1;
  for (int64_t d : dims) {
    r.check(d <= kMaxElements && (d == 0 || count <= kMaxElements / d),
            "dims of more than 2^34 elements");
    count *= d;
  }
  return count;
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  IdxReader r(path, "data.read_idx_images");
  const std::vector<int64_t> dims = r.header(3);
  r.check(dims[1] > 0 && dims[2] > 0, "zero-sized images of " + std::to_string(dims[1]) + " x " +
                                          std::to_string(dims[2]) + " pixels");
  const std::vector<uint8_t> bytes = r.data(element_count(dims, r));
  std::vector<float> pixels(bytes.size());
  std::transform(bytes.begin(), bytes.end(), pixels.begin(),
                 [](uint8_t b) { return static_cast<float>(b) / 255.0f; });
  return tensor(pixels, Shape{dims[0], 1, dims[1], dims[2]});
}

Tensor read_idx_labels(const std::string& path) {
  IdxReader r(path, "data.read_idx_labels");
  const std::vector<int64_t> dims = r.header(1);
  const std::vector<uint8_t> bytes = r.data(element_count(dims, r));
  return tensor(std::vector<int64_t>(bytes.begin(), bytes.end()), Shape{dims[0]});
}

ImageDataset read_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  ImageDataset d{read_idx_images(prefix + "-images-idx3-ubyte.gz"),
                 read_idx_labels(prefix + "-labels-idx1-ubyte.gz")};
  ADJOINT_CHECK(d.images.size(0) == d.labels.size(0), IO, "data.read_mnist", prefix,
                ": the images file holds ", d.images.size(0), " images, the labels file ",
                d.labels.size(0), " labels");
  return d;
}

}  // namespace adjoint::data
