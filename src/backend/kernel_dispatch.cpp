// What ops call: each kernel goes to its tensors' device (Note [The kernel table]).
#include "backend/device_kernels.h"

#include <sstream>

#include "adjoint/error.h"
#include "backend/product_recorder.h"
#include "core/op_scope.h"

namespace adjoint::detail {

DeviceType resolve_devices(std::span<const Tensor* const> tensors) {
  const Tensor* chosen = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    const Device d = device_of_defined(*t);
    if (d.is_cpu() && t->dim() == 0) continue;  // a wrapped scalar goes anywhere
    if (!chosen) {
      chosen = t;
    } else if (device_of_defined(*chosen) != d) {
      throw Error(ErrorKind::Device, current_op("kernel"),
                  str("expected all tensors on one device, got ", device_of_defined(*chosen), " (",
                      describe(*chosen), ") and ", d, " (", describe(*t), ")"));
    }
  }
  return chosen ? device_of_defined(*chosen).type() : DeviceType::CPU;
}

DeviceType device_of_all(std::span<const Tensor> tensors) {
  const Tensor* first = nullptr;
  bool one_device = true;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (first == nullptr) first = &t;
    one_device = one_device && device_of_defined(t) == device_of_defined(*first);
  }
  if (first == nullptr) return DeviceType::CPU;
  if (one_device) return device_of_defined(*first).type();
  std::vector<const Tensor*> pointers;
  pointers.reserve(tensors.size());
  for (const Tensor& t : tensors) pointers.push_back(&t);
  return resolve_devices(pointers);
}

void throw_no_backend(DeviceType device) {
  throw Error(ErrorKind::Device, current_op("kernel"),
              str("this build of adjoint has no ", Device(device), " backend (built: cpu, meta)"));
}

}  // namespace adjoint::detail

namespace adjoint::kernels {

constinit thread_local ProductRecorder* tls_product_recorder = nullptr;

// core
Tensor unary(Unary kind, const Tensor& x, double a, double b) {
  ADJOINT_ON_DEVICE(device_of(x), unary(kind, x, a, b));
}
void unary_into(Unary kind, const Tensor& out, const Tensor& x, double a, double b) {
  ADJOINT_ON_DEVICE(device_of(out, x), unary_into(kind, out, x, a, b));
}
Tensor binary(Binary kind, const Tensor& a, const Tensor& b) {
  ADJOINT_ON_DEVICE(device_of(a, b), binary(kind, a, b));
}
void binary_into(Binary kind, const Tensor& out, const Tensor& a, const Tensor& b) {
  ADJOINT_ON_DEVICE(device_of(out, a, b), binary_into(kind, out, a, b));
}
void add_scaled_into(const Tensor& out, const Tensor& x, double alpha) {
  ADJOINT_ON_DEVICE(device_of(out, x), add_scaled_into(out, x, alpha));
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ADJOINT_ON_DEVICE(device_of(cond, a, b), where(cond, a, b));
}
Tensor to_device(const Tensor& x, Device device) {
  ADJOINT_ON_DEVICE(device_of(x), to_device(x, device));
}
Tensor cast(const Tensor& x, DType dtype) { ADJOINT_ON_DEVICE(device_of(x), cast(x, dtype)); }
void copy_into(const Tensor& dst, const Tensor& src) {
  // Copying into a meta tensor is allowed from anywhere (and does nothing), as in PyTorch.
  if (device_of(dst) == DeviceType::Meta) return meta::copy_into(dst, src);
  ADJOINT_ON_DEVICE(device_of(dst, src), copy_into(dst, src));
}
void fill(const Tensor& dst, Scalar value) { ADJOINT_ON_DEVICE(device_of(dst), fill(dst, value)); }
void copy_to_host(const Tensor& x, void* dst) {
  ADJOINT_ON_DEVICE(device_of(x), copy_to_host(x, dst));
}
void copy_from_host(const Tensor& x, const void* src) {
  ADJOINT_ON_DEVICE(device_of(x), copy_from_host(x, src));
}
Tensor reduce(Reduce kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ADJOINT_ON_DEVICE(device_of(x), reduce(kind, x, dims, keepdim));
}
Tensor exclusive_products(const Tensor& x, const std::vector<int64_t>& dims) {
  ADJOINT_ON_DEVICE(device_of(x), exclusive_products(x, dims));
}
Tensor arg_reduce(ArgReduce kind, const Tensor& x, int64_t dim, bool keepdim) {
  ADJOINT_ON_DEVICE(device_of(x), arg_reduce(kind, x, dim, keepdim));
}
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse) {
  ADJOINT_ON_DEVICE(device_of(x), cumsum(x, dim, reverse));
}
Tensor cumprod(const Tensor& x, int64_t dim, bool reverse) {
  ADJOINT_ON_DEVICE(device_of(x), cumprod(x, dim, reverse));
}
Tensor linear_recurrence(const Tensor& a, const Tensor& b, int64_t dim, bool reverse) {
  ADJOINT_ON_DEVICE(device_of(a, b), linear_recurrence(a, b, dim, reverse));
}
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record("matmul", {&a, &b}, "", [a, b] { (void)matmul(a, b); });
  ADJOINT_ON_DEVICE(device_of(a, b), matmul(a, b));
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record("linear", {&x, &w, &bias}, "",
                                 [x, w, bias] { (void)linear(x, w, bias); });
  ADJOINT_ON_DEVICE(device_of(x, w, bias), linear(x, w, bias));
}
void matmul_add_into(const Tensor& c, const Tensor& a, const Tensor& b) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record("matmul_add_into", {&c, &a, &b}, "",
                                 [c, a, b] { matmul_add_into(c, a, b); });
  ADJOINT_ON_DEVICE(device_of(c, a, b), matmul_add_into(c, a, b));
}
void matmul_widened_add_into(const Tensor& c, const Tensor& a, const Tensor& b) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record("matmul_widened_add_into", {&c, &a, &b}, "",
                                 [c, a, b] { matmul_widened_add_into(c, a, b); });
  ADJOINT_ON_DEVICE(device_of(c, a, b), matmul_widened_add_into(c, a, b));
}
void add_widened_into(const Tensor& out, const Tensor& x, DType dtype) {
  ADJOINT_ON_DEVICE(device_of(out, x), add_widened_into(out, x, dtype));
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  ADJOINT_ON_DEVICE(device_of(x, index), index_select(x, dim, index, op));
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  ADJOINT_ON_DEVICE(device_of(x, index), gather(x, dim, index, op));
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   const char* op) {
  ADJOINT_ON_DEVICE(device_of(x, index, src), scatter_add(x, dim, index, src, op));
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 const char* op) {
  ADJOINT_ON_DEVICE(device_of(x, index, source), index_add(x, dim, index, source, op));
}
Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  ADJOINT_ON_DEVICE(device_of(x), softmax(x, dim, log));
}
Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim, bool log) {
  ADJOINT_ON_DEVICE(device_of(gy, y), softmax_backward(gy, y, dim, log));
}
Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim) {
  ADJOINT_ON_DEVICE(device_of(x, mask), masked_softmax(x, mask, dim));
}
void arange(const Tensor& dst, double start, double step) {
  ADJOINT_ON_DEVICE(device_of(dst), arange(dst, start, step));
}
void uniform(const Tensor& dst, double low, double high, Generator& gen) {
  ADJOINT_ON_DEVICE(device_of(dst), uniform(dst, low, high, gen));
}
void normal(const Tensor& dst, double mean, double std, Generator& gen) {
  ADJOINT_ON_DEVICE(device_of(dst), normal(dst, mean, std, gen));
}
void randint(const Tensor& dst, int64_t low, int64_t high, Generator& gen) {
  ADJOINT_ON_DEVICE(device_of(dst), randint(dst, low, high, gen));
}

// attention
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, const Tensor& seed,
                                   const AttentionSpec& spec) {
  ADJOINT_ON_DEVICE(device_of(q, k, v, mask, seed), attention_forward(q, k, v, mask, seed, spec));
}
Tensor attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& seed, const AttentionSpec& spec) {
  ADJOINT_ON_DEVICE(device_of(dout, q, k, v, out, lse, mask, seed),
                    attention_backward(dout, q, k, v, out, lse, mask, seed, spec));
}
Tensor attention_dropout_scale(const Tensor& seed, const Shape& scores, double p, DType dtype) {
  ADJOINT_ON_DEVICE(device_of(seed), attention_dropout_scale(seed, scores, p, dtype));
}

// conv
namespace {
/// A convolution's geometry and path as text: part of what identifies a recorded call.
std::string geometry_key(const ConvGeometry& g, ConvPath path, const Shape& shape = {}) {
  std::ostringstream os;
  auto list = [&](const auto& v) {
    for (int64_t d : v) os << d << ',';
    os << ';';
  };
  list(g.stride);
  list(g.pad_l);
  list(g.pad_r);
  list(g.dilation);
  list(shape);
  os << g.groups << ';' << static_cast<int>(path);
  return os.str();
}
}  // namespace

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g,
                    ConvPath path) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record(
        "conv_forward", {&x, &w, &bias}, geometry_key(g, path),
        [x, w, bias, g, path] { (void)conv_forward(x, w, bias, g, path); });
  ADJOINT_ON_DEVICE(device_of(x, w, bias), conv_forward(x, w, bias, g, path));
}
Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g,
                          const Shape& input_shape, ConvPath path) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record(
        "conv_backward_data", {&gy, &w}, geometry_key(g, path, input_shape),
        [gy, w, g, input_shape, path] { (void)conv_backward_data(gy, w, g, input_shape, path); });
  ADJOINT_ON_DEVICE(device_of(gy, w), conv_backward_data(gy, w, g, input_shape, path));
}
Tensor conv_backward_weight(const Tensor& x, const Tensor& gy, const ConvGeometry& g,
                            const Shape& weight_shape, ConvPath path) {
  if (tls_product_recorder) [[unlikely]]
    tls_product_recorder->record("conv_backward_weight", {&x, &gy},
                                 geometry_key(g, path, weight_shape),
                                 [x, gy, g, weight_shape, path] {
                                   (void)conv_backward_weight(x, gy, g, weight_shape, path);
                                 });
  ADJOINT_ON_DEVICE(device_of(x, gy), conv_backward_weight(x, gy, g, weight_shape, path));
}

// linalg
Tensor lu_solve(const Tensor& a, const Tensor& b, const char* op) {
  ADJOINT_ON_DEVICE(device_of(a, b), lu_solve(a, b, op));
}
Tensor triangular_solve(const Tensor& a, const Tensor& b, bool upper, bool unit_diagonal,
                        const char* op) {
  ADJOINT_ON_DEVICE(device_of(a, b), triangular_solve(a, b, upper, unit_diagonal, op));
}
Tensor cholesky(const Tensor& a, const char* op) {
  ADJOINT_ON_DEVICE(device_of(a), cholesky(a, op));
}
LuDet lu_det(const Tensor& a, const char* op) { ADJOINT_ON_DEVICE(device_of(a), lu_det(a, op)); }
Tensor det_cofactors(const Tensor& a, double tol, const char* op) {
  ADJOINT_ON_DEVICE(device_of(a), det_cofactors(a, tol, op));
}
Eigh eigh(const Tensor& a, bool vectors, const char* op) {
  ADJOINT_ON_DEVICE(device_of(a), eigh(a, vectors, op));
}
Qr qr(const Tensor& a, const char* op) { ADJOINT_ON_DEVICE(device_of(a), qr(a, op)); }
Svd svd(const Tensor& a, bool vectors, const char* op) {
  ADJOINT_ON_DEVICE(device_of(a), svd(a, vectors, op));
}

// nn
void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index,
                         const char* op) {
  ADJOINT_ON_DEVICE(device_of(target), check_class_targets(target, classes, ignore_index, op));
}
CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor& target,
                                  int64_t ignore_index) {
  ADJOINT_ON_DEVICE(device_of(logits, target), cross_entropy(logits, target, ignore_index));
}
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index) {
  ADJOINT_ON_DEVICE(device_of(g, logits, target),
                    cross_entropy_backward(g, logits, target, ignore_index));
}
LayerNormForward layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                            const Tensor& bias, double eps) {
  ADJOINT_ON_DEVICE(device_of(x, weight, bias), layer_norm(x, normalized_dims, weight, bias, eps));
}
Tensor layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, int64_t normalized_dims) {
  ADJOINT_ON_DEVICE(device_of(gy, x, weight, mean, rstd),
                    layer_norm_backward(gy, x, weight, mean, rstd, normalized_dims));
}

Tensor lstm_cell(const Tensor& gates, const Tensor& c) {
  ADJOINT_ON_DEVICE(device_of(gates, c), lstm_cell(gates, c));
}
Tensor lstm_cell_backward(const Tensor& grad, const Tensor& gates, const Tensor& c) {
  ADJOINT_ON_DEVICE(device_of(grad, gates, c), lstm_cell_backward(grad, gates, c));
}
LstmSequenceForward lstm_sequence(const Tensor& xp, const Tensor& w_hh, const Tensor& h0,
                                  const Tensor& c0, bool reverse) {
  ADJOINT_ON_DEVICE(device_of(xp, w_hh, h0, c0), lstm_sequence(xp, w_hh, h0, c0, reverse));
}
Tensor lstm_sequence_backward(const Tensor& grad, const Tensor& gates, const Tensor& cs,
                              const Tensor& c0, const Tensor& w_hh, bool reverse) {
  ADJOINT_ON_DEVICE(device_of(grad, gates, cs, c0, w_hh),
                    lstm_sequence_backward(grad, gates, cs, c0, w_hh, reverse));
}

// norm
Tensor batch_norm_moments(const Tensor& x, int64_t correction) {
  ADJOINT_ON_DEVICE(device_of(x), batch_norm_moments(x, correction));
}
BatchNormForward batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  ADJOINT_ON_DEVICE(device_of(x, weight, bias), batch_norm(x, weight, bias, eps));
}
Tensor batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd) {
  ADJOINT_ON_DEVICE(device_of(gy, x, weight, mean, rstd),
                    batch_norm_backward(gy, x, weight, mean, rstd));
}
GroupNormForward group_norm(const Tensor& x, int64_t groups, const Tensor& weight,
                            const Tensor& bias, double eps) {
  ADJOINT_ON_DEVICE(device_of(x, weight, bias), group_norm(x, groups, weight, bias, eps));
}

// fused
std::shared_ptr<const PreparedFusedProgram> prepare_fused_program(Device device,
                                                                  const FusedProgram& program) {
  ADJOINT_ON_DEVICE(device.type(), prepare_fused_program(device, program));
}
std::vector<Tensor> run_fused_program(const FusedProgram& program,
                                      const PreparedFusedProgram* prepared,
                                      std::span<const Tensor> inputs) {
  ADJOINT_ON_DEVICE(detail::device_of_all(inputs), run_fused_program(program, prepared, inputs));
}

// optim
bool adam_step_exact(Device device) { ADJOINT_ON_DEVICE(device.type(), adam_step_exact(device)); }
void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
               const Tensor& exp_avg_sq, const AdamScalars& s) {
  ADJOINT_ON_DEVICE(device_of(param, grad, exp_avg, exp_avg_sq),
                    adam_step(param, grad, exp_avg, exp_avg_sq, s));
}

// pool
Tensor max_pool_indices(const Tensor& x, const PoolWindows& win) {
  ADJOINT_ON_DEVICE(device_of(x), max_pool_indices(x, win));
}
Tensor avg_pool(const Tensor& x, const PoolWindows& win) {
  ADJOINT_ON_DEVICE(device_of(x), avg_pool(x, win));
}
Tensor avg_pool_backward(const Tensor& g, const PoolWindows& win) {
  ADJOINT_ON_DEVICE(device_of(g), avg_pool_backward(g, win));
}
Tensor pool_gather(const Tensor& x, const Tensor& index, int64_t spatial, const char* op) {
  ADJOINT_ON_DEVICE(device_of(x, index), pool_gather(x, index, spatial, op));
}
Tensor pool_scatter(const Tensor& g, const Tensor& index, const Shape& plane, const char* op) {
  ADJOINT_ON_DEVICE(device_of(g, index), pool_scatter(g, index, plane, op));
}
Tensor im2col(const Tensor& x, const Im2ColGeometry& g) {
  ADJOINT_ON_DEVICE(device_of(x), im2col(x, g));
}
Tensor col2im(const Tensor& cols, const Im2ColGeometry& g, int64_t h, int64_t w) {
  ADJOINT_ON_DEVICE(device_of(cols), col2im(cols, g, h, w));
}

}  // namespace adjoint::kernels
