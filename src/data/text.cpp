// ByteDataset: reading the corpus (files or a directory tree), the train/validation split and
// random batches; see include/adjoint/data/text.h.
#include "adjoint/data/text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ADJOINT_CHECK(in.good(), IO, "data.ByteDataset", "cannot open ", p.string());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  ADJOINT_CHECK(!in.bad(), IO, "data.ByteDataset", "error while reading ", p.string());
  return bytes;
}

}  // namespace

ByteDataset::ByteDataset(const std::string& path, double validation_fraction) {
  std::error_code ec;
  const fs::path root(path);
  ADJOINT_CHECK(fs::exists(root, ec), IO, "data.ByteDataset", "no such file or directory: ", path);
  std::vector<fs::path> files;
  if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(root, ec))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(root);
  }
  // Symlinks and copies (GPL -> GPL-3) would repeat a text and leak it across the split.
  std::set<fs::path> seen;
  std::vector<uint8_t> all;
  for (const fs::path& f : files) {
    const fs::path canonical = fs::canonical(f, ec);
    if (!seen.insert(ec ? f : canonical).second) continue;
    std::vector<uint8_t> b = read_file(f);
    all.insert(all.end(), b.begin(), b.end());
    files_.push_back(f.string());
  }
  ADJOINT_CHECK(!all.empty(), IO, "data.ByteDataset", path, " holds no bytes");
  std::vector<std::string> names = std::move(files_);
  *this = ByteDataset(std::move(all), validation_fraction);
  files_ = std::move(names);
}

ByteDataset::ByteDataset(std::vector<uint8_t> bytes, double validation_fraction)
    : bytes_(std::move(bytes)) {
  ADJOINT_CHECK(validation_fraction >= 0 && validation_fraction < 1, Value, "data.ByteDataset",
                "validation_fraction must be in [0, 1), got ", validation_fraction);
  split_ = static_cast<int64_t>(bytes_.size()) -
           static_cast<int64_t>(validation_fraction * static_cast<double>(bytes_.size()));
}

TextBatch ByteDataset::batch(Split split, int64_t batch, int64_t context, Generator& gen) const {
  const int64_t begin = split == Split::Train ? 0 : split_;
  const int64_t size = split == Split::Train ? split_ : validation_size();
  ADJOINT_CHECK(batch > 0 && context > 0, Value, "data.ByteDataset",
                "batch and context must be positive, got ", batch, " and ", context);
  ADJOINT_CHECK(size >= context + 1, Value, "data.ByteDataset", "the ",
                split == Split::Train ? "training" : "validation", " split has ", size,
                " bytes, fewer than context + 1 = ", context + 1);
  std::vector<int64_t> in(batch * context), out(batch * context);
  const uint64_t windows = static_cast<uint64_t>(size - context);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = begin + static_cast<int64_t>(gen.next_u64() % windows);
    for (int64_t t = 0; t < context; ++t) {
      in[b * context + t] = bytes_[start + t];
      out[b * context + t] = bytes_[start + t + 1];
    }
  }
  return {tensor(in, Shape{batch, context}), tensor(out, Shape{batch, context})};
}

}  // namespace adjoint::data
