// operator<< for tensors: values (summarised past 1000 elements, like PyTorch), then shape,
// dtype and grad_fn or requires_grad.
#include <iomanip>
#include <ostream>
#include <sstream>

#include "adjoint/autograd.h"
#include "adjoint/tensor_impl.h"
#include "core/dispatch.h"

namespace adjoint {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

// The elements in row-major order, int64 ones exactly (a round trip through double would round
// those beyond 2^53, and cast 2^63 back to int64, which is undefined).
struct Values {
  std::vector<double> reals;
  std::vector<int64_t> ints;
  explicit Values(const Tensor& t) {
    if (t.dtype() == DType::Int64) {
      ints = t.to_vector<int64_t>();
    } else {
      reals = t.to_vector<double>();
    }
  }
};

void print_value(std::ostream& os, const Values& vals, int64_t i, DType dt) {
  if (dt == DType::Int64) {
    os << vals.ints[i];
  } else if (dt == DType::Bool) {
    os << (vals.reals[i] != 0 ? "true" : "false");
  } else {
    std::ostringstream s;
    s << std::setprecision(dtype_info(dt).digits) << vals.reals[i];  // digits: the dtype table
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
  const Values vals(t);
  os << "tensor(";
  if (t.dim() == 0) {
    print_value(os, vals, 0, t.dtype());
  } else if (t.numel() == 0) {
    os << "[]";  // as PyTorch; walking the rows of a [2^40, 0] tensor would never end
  } else {
    print_dim(os, t, vals, 0, 0, 7, t.numel() > kSummarizeAbove);
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
