// load_safetensors: reads and validates the header (JSON object, no duplicate keys, known
// dtypes, shapes matching data_offsets, offsets tiling the data exactly), then reads each
// tensor's bytes straight into its storage.
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "adjoint/error.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/ops.h"
#include "backend/host_transfer.h"
#include "io/safetensors_format.h"

namespace adjoint::io {
namespace {

constexpr const char* kOp = "io.load_safetensors";
using Json = nlohmann::ordered_json;

// Note [Header nesting]: a valid header nests three levels (the header object, an entry
// object, its shape and offsets arrays). Deeper values are rejected while parsing, before
// anything recurses over them: nlohmann's dump() (used in error messages) is recursive, and a
// header of a few MB of '[' overflowed the stack (found by fuzz_loaders).
constexpr int kMaxHeaderDepth = 16;

// What errors quote of a header value or name: its start, so that a message about a huge
// value stays readable.
constexpr std::size_t kMaxQuoted = 96;

std::string shortened(const std::string& s) {
  if (s.size() <= kMaxQuoted) return s;
  return s.substr(0, kMaxQuoted) + "... (" + std::to_string(s.size()) + " bytes)";
}

// A header value as JSON text for an error message (bounded depth: see Note [Header nesting]).
std::string quote(const Json& v) { return shortened(v.dump()); }

// The open file, with the checks every read needs: all reads are at validated offsets, and a
// short read (the file shrank) is an error, never a partially filled tensor.
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail(std::string("cannot open it: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(::fileno(f_), &st) != 0)
      fail(std::string("cannot stat it: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("is not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() {
    if (f_) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }

  void read(uint64_t offset, void* dst, uint64_t n) {
    if (n == 0) return;
    if (offset > size_ || n > size_ - offset) fail("read past the end of the file");
    if (::fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0)
      fail(std::string("cannot seek: ") + std::strerror(errno));
    if (std::fread(dst, 1, n, f_) != n)
      fail(std::ferror(f_) ? std::string("read error: ") + std::strerror(errno)
                           : std::string("unexpected end of file (did it change while loading?)"));
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::IO, kOp, "'" + path_ + "': " + what);
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

struct TensorInfo {
  std::string name;
  detail::FileDTypeInfo dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Parses the header text, rejecting duplicate keys at any depth (nlohmann keeps the last one
// silently; the format forbids them).
Json parse_header(const File& file, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        // See Note [Header nesting]. Throwing here stops the parser; what it built so far is
        // freed without recursion.
        if (depth >= kMaxHeaderDepth)
          file.fail("the header nests deeper than " + std::to_string(kMaxHeaderDepth) +
                    " levels (a valid one nests 3)");
        if (ev == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, cb);
  } catch (const Json::exception& e) {
    file.fail(std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) file.fail("the header has the key '" + shortened(duplicate) + "' twice");
  if (!header.is_object()) file.fail("the header is not a JSON object");
  return header;
}

uint64_t unsigned_of(const File& file, const Json& v, const std::string& what) {
  if (!v.is_number_unsigned()) file.fail(what + " must be a non-negative integer, got " + quote(v));
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const File& file, const std::string& name, const Json& v,
                       uint64_t buffer_size) {
  const std::string where = "tensor '" + shortened(name) + "'";
  if (!v.is_object()) file.fail(where + ": entry must be an object, got " + quote(v));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) file.fail(where + ": missing \"" + field + "\"");
  TensorInfo info;
  info.name = name;

  const Json& dt = v["dtype"];
  if (!dt.is_string()) file.fail(where + ": dtype must be a string, got " + quote(dt));
  const std::string dts = dt.get<std::string>();
  std::optional<detail::FileDTypeInfo> fd = detail::file_dtype(dts);
  if (!fd) {
    const bool known = std::find(std::begin(detail::kUnsupportedFileDTypes),
                                 std::end(detail::kUnsupportedFileDTypes),
                                 dts) != std::end(detail::kUnsupportedFileDTypes);
    file.fail(where + (known ? ": dtype " + dts + " is not supported by adjoint"
                             : ": unknown dtype \"" + shortened(dts) + "\""));
  }
  info.dtype = *fd;

  const Json& sh = v["shape"];
  if (!sh.is_array()) file.fail(where + ": shape must be an array, got " + quote(sh));
  // numel, and the product of the non-zero sizes, must fit int64 (strides of an empty tensor
  // are products of sizes too).
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_product = 1;
  bool empty = false;
  for (const Json& d : sh) {
    const uint64_t size = unsigned_of(file, d, where + ": shape entry");
    if (size == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(nonzero_product, size, &nonzero_product) ||
               nonzero_product > kMax) {
      file.fail(where + ": shape " + quote(sh) + " is too large");
    }
    info.shape.push_back(static_cast<int64_t>(size));
  }
  const uint64_t numel = empty ? 0 : nonzero_product;
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(info.dtype.size), &nbytes))
    file.fail(where + ": shape " + quote(sh) + " is too large");

  const Json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    file.fail(where + ": data_offsets must be [begin, end], got " + quote(off));
  info.begin = unsigned_of(file, off[0], where + ": data_offsets begin");
  info.end = unsigned_of(file, off[1], where + ": data_offsets end");
  if (info.begin > info.end)
    file.fail(where + ": data_offsets " + quote(off) + " end before they begin");
  if (info.end > buffer_size)
    file.fail(where + ": data_offsets " + quote(off) + " are out of range (the data is " +
              std::to_string(buffer_size) + " bytes)");
  if (info.end - info.begin != nbytes)
    file.fail(where + ": data_offsets " + quote(off) + " span " +
              std::to_string(info.end - info.begin) + " bytes but " + dts + " " + quote(sh) +
              " needs " + std::to_string(nbytes));
  return info;
}

// The tensors must tile [0, buffer_size) exactly: no overlap, no gap, no trailing bytes.
void check_coverage(const File& file, std::vector<const TensorInfo*> by_offset,
                    uint64_t buffer_size) {
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->begin < cursor)
      file.fail("tensors '" + shortened(prev->name) + "' and '" + shortened(t->name) +
                "' overlap in the data");
    if (t->begin > cursor)
      file.fail("bytes [" + std::to_string(cursor) + ", " + std::to_string(t->begin) +
                ") of the data belong to no tensor (a gap before '" + shortened(t->name) + "')");
    cursor = t->end;
    prev = t;
  }
  if (cursor != buffer_size)
    file.fail("the data has " + std::to_string(buffer_size - cursor) +
              " trailing bytes after the last tensor");
}

Tensor read_tensor(File& file, const TensorInfo& info, uint64_t data_start) {
  Tensor t = empty(info.shape, info.dtype.loads_as);
  const uint64_t nbytes = info.end - info.begin;
  if (nbytes == 0) return t;
  // Every file dtype adjoint loads is its own dtype: the bytes go into the tensor as they are,
  // through the device's host transfer in chunks (Note [Host transfers]).
  uint64_t at = data_start + info.begin;
  const bool is_bool = t.dtype() == DType::Bool;
  adjoint::detail::stream_from_host(t, [&](char* bytes, std::size_t n) {
    file.read(at, bytes, n);
    at += n;
    // Any non-zero byte is true; a bool object must hold exactly 0 or 1.
    if (is_bool)
      for (std::size_t i = 0; i < n; ++i) bytes[i] = bytes[i] != 0;
  });
  return t;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  if constexpr (std::endian::native != std::endian::little)
    throw Error(ErrorKind::NotImplemented, kOp, "safetensors needs a little-endian machine");
  File file(path);
  if (file.size() < 8)
    file.fail("the file is " + std::to_string(file.size()) +
              " bytes, too short for the 8-byte header length");
  unsigned char len_bytes[8];
  file.read(0, len_bytes, 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  if (header_len > file.size() - 8)
    file.fail("the header length " + std::to_string(header_len) + " runs past the end of the " +
              std::to_string(file.size()) + "-byte file");
  if (header_len > detail::kMaxHeaderBytes)
    file.fail("the header length " + std::to_string(header_len) +
              " exceeds the format's limit of " + std::to_string(detail::kMaxHeaderBytes) +
              " bytes");
  std::string text(header_len, '\0');
  file.read(8, text.data(), header_len);
  if (text.empty() || text[0] != '{') file.fail("the header does not start with '{'");
  Json header = parse_header(file, text);

  const uint64_t data_start = 8 + header_len;
  const uint64_t buffer_size = file.size() - data_start;
  SafetensorsFile out;
  std::vector<TensorInfo> infos;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      const Json& meta = it.value();
      if (meta.is_null()) continue;
      if (!meta.is_object()) file.fail("__metadata__ must be an object, got " + quote(meta));
      for (auto m = meta.begin(); m != meta.end(); ++m) {
        if (!m.value().is_string())
          file.fail("__metadata__ must map strings to strings; '" + shortened(m.key()) + "' is " +
                    quote(m.value()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    infos.push_back(parse_entry(file, it.key(), it.value(), buffer_size));
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : infos) by_offset.push_back(&t);
  check_coverage(file, std::move(by_offset), buffer_size);

  out.tensors.reserve(infos.size());
  for (const TensorInfo& info : infos)
    out.tensors.emplace_back(info.name, read_tensor(file, info, data_start));
  return out;
}

}  // namespace adjoint::io
