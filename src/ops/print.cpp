// operator<< for tensors: values (summarised past 1000 elements, like PyTorch), then shape,
// dtype and grad_fn or requires_grad.
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <type_traits>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/tensor_impl.h"
#include "backend/host_transfer.h"
#include "core/dispatch.h"

namespace adjoint {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

// Reads elements by row-major index through the device's host transfer (Note [Host transfers]
// in backend/host_transfer.h). A summarised print copies out only the elements it shows: a
// [1, 2^40] expanded tensor has one element in memory, and copying all 2^40 out first would
// not fit; a whole one is copied in one transfer. int64 stays exact (a round trip through
// double would round values beyond 2^53).
class Values {
 public:
  Values(const Tensor& t, bool summarize) : t_(t) {
    if (!summarize) {
      whole_.resize(t.nbytes());
      kernels::copy_to_host(t, whole_.data());
    }
  }

  double real(int64_t flat) const {
    return dispatch_all(t_.dtype(), "print", [&]<class T>() {
      if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t>)
        return static_cast<double>(at<T>(flat));
      else
        return static_cast<double>(static_cast<opmath_t<T>>(at<T>(flat)));
    });
  }
  int64_t integer(int64_t flat) const {
    return dispatch_all(t_.dtype(), "print", [&]<class T>() -> int64_t {
      if constexpr (std::is_integral_v<T>)
        return static_cast<int64_t>(at<T>(flat));  // uint8 as a number, not a character
      else
        return 0;  // not called: print_value reads integers only from integer dtypes
    });
  }

 private:
  template <class T>
  T at(int64_t flat) const {
    if (whole_.empty()) {
      using Host = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
      return static_cast<T>(detail::host_value<Host>(t_, flat, "print"));
    }
    T v;
    std::memcpy(&v, whole_.data() + flat * sizeof(T), sizeof(T));
    return v;
  }

  const Tensor& t_;
  std::vector<char> whole_;  // all values, row-major, when the print shows them all
};

void print_value(std::ostream& os, const Values& vals, int64_t i, DType dt) {
  if (dtype_info(dt).kind == DTypeKind::Integral) {
    os << vals.integer(i);
  } else if (dt == DType::Bool) {
    os << (vals.real(i) != 0 ? "true" : "false");
  } else {
    std::ostringstream s;
    s << std::setprecision(dtype_info(dt).digits) << vals.real(i);  // digits: the dtype table
    os << s.str();
  }
}

void print_dim(std::ostream& os, const Tensor& t, const Values& vals, int64_t dim, int64_t offset,
               int64_t indent, bool summarize) {
  const Shape& shape = t.shape();
  int64_t n = shape[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= shape[d];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == t.dim()) {
      print_value(os, vals, offset + i, t.dtype());
    } else {
      print_dim(os, t, vals, dim + 1, offset + i * inner, indent + 1, summarize);
    }
    if (i + 1 < n) os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (t.is_meta()) {  // no values to print, as PyTorch's tensor(..., device='meta', size=...)
    os << "tensor(..., device=meta, shape=" << t.shape() << ", dtype=" << t.dtype();
    if (auto fn = t.grad_fn()) os << ", grad_fn=" << fn->name();
    return os << ')';
  }
  const bool summarize = t.numel() > kSummarizeAbove;
  const Values vals(t, summarize);
  os << "tensor(";
  if (t.dim() == 0) {
    print_value(os, vals, 0, t.dtype());
  } else if (t.numel() == 0) {
    os << "[]";  // as PyTorch; walking the rows of a [2^40, 0] tensor would never end
  } else {
    print_dim(os, t, vals, 0, 0, 7, summarize);
  }
  os << ", shape=" << t.shape() << ", dtype=" << t.dtype();
  if (auto fn = t.grad_fn()) {
    os << ", grad_fn=" << fn->name();
  } else if (t.requires_grad()) {
    os << ", requires_grad=true";
  }
  return os << ')';
}

}  // namespace adjoint
