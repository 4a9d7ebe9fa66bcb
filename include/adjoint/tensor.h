// Tensor: a cheap, shared handle to a TensorImpl. Copying a Tensor copies the handle (like
// libtorch): both see the same data, gradient and history. Methods mirror the free functions
// declared in ops.h (x.exp() == exp(x)); their definitions live with the ops.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/device.h"
#include "adjoint/dtype.h"
#include "adjoint/scalar.h"
#include "adjoint/shape.h"

namespace adjoint {

struct TensorImpl;
class Node;
class Tensor;

/// Options for factories, libtorch style:
///   zeros({2, 3}, TensorOptions().dtype(DType::Float64).requires_grad(true))
/// A DType or a Device converts implicitly: zeros({2}, DType::Int64), zeros({2}, kMeta).
/// Without a device, a factory uses default_device() (cpu unless a DeviceGuard lives).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}    // NOLINT: implicit on purpose
  TensorOptions(Device d) : device_(d) {}  // NOLINT: implicit on purpose
  DType dtype() const { return dtype_; }
  bool requires_grad() const { return requires_grad_; }
  /// The device asked for, or default_device() when none was.
  Device device() const { return device_ ? *device_ : default_device(); }
  bool has_device() const { return device_.has_value(); }
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions dtype(DType d) const {
    TensorOptions o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r) const {
    TensorOptions o = *this;
    o.requires_grad_ = r;
    return o;
  }

 private:
  DType dtype_ = kDefaultFloat;
  bool requires_grad_ = false;
  std::optional<Device> device_;
};

/// libtorch's option builders (torch::dtype, torch::device, torch::requires_grad): each starts
/// a TensorOptions, so `zeros({2, 3}, dtype(kFloat64).requires_grad(true))` reads as in
/// libtorch.
inline TensorOptions dtype(DType d) { return TensorOptions(d); }
inline TensorOptions device(Device d) { return TensorOptions(d); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

/// Removes a hook when asked (remove()); dropping the handle keeps the hook.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove() {
    if (remover_) std::exchange(remover_, nullptr)();
  }

 private:
  std::function<void()> remover_;
};

enum class Reduction { None, Mean, Sum };
enum class GeluApproximation { None, Tanh };

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles point at the same tensor.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t dim) const;
  int64_t numel() const;
  DType dtype() const;
  /// Where the storage lives (cpu, meta).
  Device device() const;
  bool is_meta() const { return device().is_meta(); }
  int64_t storage_offset() const;
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  std::size_t nbytes() const;
  /// Version of the underlying storage; in-place ops bump it.
  uint64_t version() const;
  /// True when both tensors share storage (e.g. one is a view of the other).
  bool shares_storage(const Tensor& other) const;

  // ---- libtorch's names for the metadata above (docs/coming-from-libtorch.md) ----
  /// shape() (libtorch's sizes()).
  const Shape& sizes() const { return shape(); }
  /// dim().
  int64_t ndimension() const { return dim(); }
  /// dtype() (libtorch's scalar_type()).
  DType scalar_type() const { return dtype(); }
  /// Bytes per element: itemsize(dtype()).
  int64_t element_size() const { return static_cast<int64_t>(itemsize(dtype())); }
  /// This tensor's dtype and device as factory options (requires_grad false, as libtorch's).
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }

  // ---- element access ----
  template <class T>
  T* data_ptr() const;
  void* raw_data() const;
  /// The single element of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  /// All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as needing a gradient; throws for integer tensors or non-leaves (when false).
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  /// The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  /// Drops .grad (set_to_none, the PyTorch 2 default) or zeroes it in place.
  void zero_grad(bool set_to_none = true) const;
  /// The node that produced this tensor; null for leaves and tensors without history.
  std::shared_ptr<Node> grad_fn() const;
  /// Keeps .grad for a non-leaf after backward.
  void retain_grad() const;
  bool retains_grad() const;
  void backward(const Tensor& gradient = {}, bool retain_graph = false,
                bool create_graph = false) const;
  /// A hook that sees (and may replace, by returning a defined tensor) this tensor's gradient.
  HookHandle register_hook(std::function<Tensor(const Tensor&)> hook) const;
  /// On a leaf that requires grad: `hook(leaf)` runs once the leaf's .grad is final for a
  /// backward() run (after the run added this run's gradient into it, whichever way), once
  /// per run in which a gradient reaches the leaf (a run that reaches it with none, a branch
  /// that gave no gradient, does not run it). autograd::grad, which never writes .grad, does
  /// not run it. What data-parallel training starts each gradient's all-reduce from. Register
  /// and remove hooks while no backward run on another thread reaches the leaf.
  HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  /// Same storage, no history, requires_grad false.
  Tensor detach() const;
  /// Makes this handle (and every copy of it) refer to `data`'s values, shape and dtype while
  /// keeping its autograd identity: a leaf stays the same leaf with the same requires_grad,
  /// and its .grad() is dropped when the dtype or shape changes. What libtorch's set_data
  /// does; Module::to uses it so that references to a parameter see the converted tensor.
  /// Forward-mode tangents, derivatives of the old values, are dropped at every level.
  void set_data(const Tensor& data) const;
  Tensor& detach_();
  /// Forward-mode tangent at the innermost dual level (undefined when none).
  Tensor tangent() const;

  // ---- conversions and copies ----
  Tensor to(DType dtype) const;
  /// The tensor on `device` (itself when it is there already), differentiable like a copy.
  /// To meta: the shape, dtype and strides without the values. From meta: an error (there is
  /// nothing to copy); to_empty gives uninitialised memory instead.
  Tensor to(Device device) const;
  /// A tensor of this shape and dtype on `device` with uninitialised values and no history
  /// (how meta modules are materialised, libtorch's empty_like(x, device)).
  Tensor to_empty(Device device) const;
  Tensor contiguous() const;
  Tensor clone() const;

  // ---- elementwise ----
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor square() const;
  Tensor pow(Scalar exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  Tensor add(const Tensor& other) const;
  Tensor sub(const Tensor& other) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;

  // ---- reductions (dims empty = all dims) ----
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1,
             bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, int64_t correction = 1,
             bool keepdim = false) const;
  Tensor prod(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor norm(double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;

  // ---- linear algebra ----
  Tensor matmul(const Tensor& other) const;
  Tensor dot(const Tensor& other) const;
  Tensor outer(const Tensor& other) const;

  // ---- shape and views ----
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  /// Transpose of a matrix (a 0-d or 1-d tensor is returned as is).
  Tensor t() const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
               int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- indexing ----
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // ---- nn ----
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- in-place (bump the version; recorded when the tensor has history; tangents follow
  // at visible dual levels, see docs/transforms.md) ----
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& clamp_(std::optional<double> min, std::optional<double> max);
  Tensor& zero_();
  Tensor& fill_(Scalar value);
  Tensor& copy_(const Tensor& src);

  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator+=(Scalar o) { return add_(o); }
  Tensor& operator-=(Scalar o) { return sub_(o); }
  Tensor& operator*=(Scalar o) { return mul_(o); }
  Tensor& operator/=(Scalar o) { return div_(o); }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// Prints values (abbreviated when large), shape, dtype and grad_fn.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
/// "[2, 3] (float32)": how errors describe a tensor.
std::string describe(const Tensor& t);

}  // namespace adjoint
