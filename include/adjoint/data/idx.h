// Readers for IDX files, the format of MNIST and Fashion-MNIST (Debian's dataset-fashion-mnist
// package installs them gzip-compressed under /usr/share/datasets/fashion-mnist). A file is a
// magic number (two zero bytes, a type byte, a rank byte), the rank's dims as big-endian 32-bit
// counts, then the elements in row-major order; these readers take unsigned bytes (type 0x08).
// Compressed and plain files are both read (zlib tells them apart by their first bytes).
#pragma once

#include <string>

#include "adjoint/tensor.h"

namespace adjoint::data {

/// The images of an IDX file of rank 3 ([N, rows, cols] unsigned bytes) as float32
/// [N, 1, rows, cols] scaled to [0, 1] (each byte divided by 255): the layout a convolution
/// takes, and the values a uint8 tensor would give once converted (the library has no uint8
/// dtype yet). Throws an IO error naming data.read_idx_images and the path when the file is
/// missing or unreadable, is not gzip or IDX (a wrong magic number, a type other than unsigned
/// bytes, a rank other than 3, a zero-sized image), is truncated (fewer bytes than its dims
/// promise) or has bytes after its last image.
Tensor read_idx_images(const std::string& path);

/// The labels of an IDX file of rank 1 ([N] unsigned bytes) as int64 [N], the class indices
/// cross_entropy takes. The same errors as read_idx_images (rank 1), naming
/// data.read_idx_labels.
Tensor read_idx_labels(const std::string& path);

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// One split of Fashion-MNIST (or MNIST) from `dir`: the images ("train-images-idx3-ubyte.gz"
/// or "t10k-images-idx3-ubyte.gz", as read_idx_images reads them) and their labels, whose
/// counts must agree (an IO error naming data.read_mnist otherwise).
struct ImageDataset {
  Tensor images;  ///< float32 [N, 1, 28, 28] in [0, 1]
  Tensor labels;  ///< int64 [N]
};
ImageDataset read_mnist(const std::string& dir = kFashionMnistDir, bool train = true);

}  // namespace adjoint::data
