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

void print_value(std::ostream& os, double v, DType dt) {
  if (dt == DType::Bool) {
    os << (v != 0 ? "true" : "false");
  } else if (dt == DType::Int64) {
    os << static_cast<int64_t>(v);
  } else {
    std::ostringstream s;
    s << std::setprecision(dt == DType::Float64 ? 8 : 5) << v;
    os << s.str();
  }
}

void print_dim(std::ostream& os, const Tensor& t, const std::vector<double>& vals, int64_t dim,
               int64_t offset, int64_t indent, bool summarize) {
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
      print_value(os, vals[offset + i], t.dtype());
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
  std::vector<double> vals = t.to_vector<double>();
  os << "tensor(";
  if (t.dim() == 0) {
    print_value(os, vals[0], t.dtype());
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
