// Shape storage, printing, contiguous strides and broadcasting.
#include "adjoint/shape.h"

#include <sstream>

#include "adjoint/error.h"
#include "core/op_scope.h"

namespace adjoint {

void Shape::release() {
  delete[] heap_;
  heap_ = nullptr;
  capacity_ = kInline;
}

void Shape::steal(Shape&& o) {
  size_ = o.size_;
  if (o.heap_) {
    heap_ = o.heap_;
    capacity_ = o.capacity_;
    o.heap_ = nullptr;
    o.capacity_ = kInline;
  } else {
    std::copy(o.inline_, o.inline_ + o.size_, inline_);
  }
  o.size_ = 0;
}

void Shape::resize(std::size_t n, int64_t value) {
  if (n > capacity_) {
    auto* grown = new int64_t[n];
    std::copy(begin(), end(), grown);
    delete[] heap_;
    heap_ = grown;
    capacity_ = n;
  }
  for (std::size_t i = size_; i < n; ++i) data()[i] = value;
  size_ = n;
}

void Shape::push_back(int64_t v) {
  if (size_ == capacity_) {
    std::size_t old = size_;
    resize(2 * capacity_);
    size_ = old;
  }
  data()[size_++] = v;
}

void Shape::insert(std::size_t pos, int64_t v) {
  push_back(0);
  for (std::size_t i = size_ - 1; i > pos; --i) data()[i] = data()[i - 1];
  data()[pos] = v;
}

void Shape::erase(std::size_t pos) {
  for (std::size_t i = pos; i + 1 < size_; ++i) data()[i] = data()[i + 1];
  --size_;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  bool overflow = false, zero = false;
  for (int64_t d : *this) {
    overflow |= __builtin_mul_overflow(n, d, &n);
    zero |= d == 0;
  }
  // A zero anywhere makes the product 0, even when the dims before it overflowed.
  if (zero) return 0;
  ADJOINT_CHECK(!overflow, Value, detail::current_op("numel"), "shape ", *this,
                " is too large: it has more than 2^63 - 1 elements");
  return n;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

std::string to_string(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    // Wraps instead of overflowing (undefined) for a shape too large: the tensor made with
    // these strides refuses that shape (Note [Tensor size limits]).
    __builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride);
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ADJOINT_CHECK(da == db || da == 1 || db == 1, Shape, op, "shapes ", a, " and ", b,
                  " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  // Two tensors that exist can broadcast to a shape that cannot (expanded [2^40, 1] with
  // [1, 2^40]): report it here, naming the op, before a kernel asks for the memory.
  int64_t count = 1;
  bool overflow = false;
  for (int64_t d : out) overflow |= __builtin_mul_overflow(count, std::max<int64_t>(d, 1), &count);
  ADJOINT_CHECK(!overflow, Value, op, "shapes ", a, " and ", b, " broadcast to ", out,
                ", which is too large: more than 2^63 - 1 elements");
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  ADJOINT_CHECK(dim >= -n && dim < n, Index, op, "dim ", dim, " is out of range for a tensor with ",
                ndim, " dims (expected [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

}  // namespace adjoint
