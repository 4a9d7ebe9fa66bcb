// Shape: a small vector of dimension sizes (or strides) stored inline up to six dims, so that
// creating a tensor does not allocate for its metadata. Also the broadcasting rules.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace adjoint {

class Shape {
 public:
  static constexpr int kInline = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.data() + dims.size()); }
  explicit Shape(std::size_t n, int64_t value = 0) { resize(n, value); }
  Shape(const Shape& o) {
    if (!o.heap_) {
      std::copy(o.inline_, o.inline_ + kInline, inline_);  // fixed size: no branches, no loop
      size_ = o.size_;
    } else {
      assign(o.begin(), o.end());
    }
  }
  Shape(Shape&& o) noexcept { steal(std::move(o)); }
  Shape& operator=(const Shape& o) {
    if (this == &o) return *this;
    if (!o.heap_ && !heap_) {
      std::copy(o.inline_, o.inline_ + kInline, inline_);
      size_ = o.size_;
    } else {
      assign(o.begin(), o.end());
    }
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      steal(std::move(o));
    }
    return *this;
  }
  ~Shape() {
    if (heap_) release();  // inline check: most shapes never leave the inline buffer
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](std::size_t i) { return data()[i]; }
  int64_t operator[](std::size_t i) const { return data()[i]; }
  int64_t back() const { return data()[size_ - 1]; }
  int64_t& back() { return data()[size_ - 1]; }

  void resize(std::size_t n, int64_t value = 0);
  void push_back(int64_t v);
  void insert(std::size_t pos, int64_t v);
  void erase(std::size_t pos);
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  /// Product of the sizes (1 for a 0-d shape); a Value error when it overflows int64.
  int64_t numel() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  template <class It>
  void assign(It first, It last) {
    resize(static_cast<std::size_t>(last - first));
    std::copy(first, last, data());
  }
  void release();
  void steal(Shape&& o);

  int64_t inline_[kInline] = {};
  int64_t* heap_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = kInline;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);
std::string to_string(const Shape& s);

/// Contiguous (row-major) strides for a shape, in elements.
Shape contiguous_strides(const Shape& shape);

/// NumPy broadcasting of two shapes; throws a Shape error naming `op` if they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

/// Wraps a possibly negative dim into [0, ndim); throws an Index error naming `op` if out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace adjoint
