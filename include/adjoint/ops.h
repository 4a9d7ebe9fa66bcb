// The differentiable operations and factories, as free functions. Each is defined in
// src/ops/<family>.cpp together with its VJP and JVP rules.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint {

// ---- factories (src/core/factories.cpp) ----
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
Tensor scalar_tensor(Scalar value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor empty_like(const Tensor& t);
/// [0, end) with step 1, int64 unless options say otherwise.
Tensor arange(int64_t end, TensorOptions options = DType::Int64);
/// [start, end) with `step`; dtype float32 unless given.
Tensor arange(double start, double end, double step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
/// Uniform on [0, 1).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
/// Standard normal.
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
/// Uniform integers in [low, high), int64.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);
/// A tensor holding a copy of `data`, in the given shape (1-d if shape is omitted).
template <class T>
Tensor tensor(const std::vector<T>& data, std::optional<Shape> shape = std::nullopt,
              TensorOptions options = TensorOptions(dtype_of_v<T>));
Tensor tensor(std::initializer_list<double> data, TensorOptions options = {});
Tensor tensor(std::initializer_list<double> data, const Shape& shape, TensorOptions options = {});
/// Wraps memory the caller owns as a tensor, without copying (libtorch's from_blob): `data`
/// holds elements of options.dtype() at `strides` (contiguous when omitted), and must stay
/// valid while any tensor viewing it lives. With a deleter, deleter(data) is called exactly
/// once, when the last tensor (or view, or saved copy of the handle) sharing the storage dies;
/// without one the caller keeps ownership and frees it after the tensors are gone. CPU only;
/// the pointer must be aligned to the element size; strides must not be negative. The tensor
/// is a leaf (requires_grad as options say); writes through it change the caller's memory.
Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter,
                 TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, const Shape& strides,
                 std::function<void(void*)> deleter, TensorOptions options = {});

// ---- conversion and copies ----
Tensor to(const Tensor& x, DType dtype);
/// x on `device` (itself when there already); see Tensor::to(Device).
Tensor to(const Tensor& x, Device device);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);

// ---- elementwise (src/ops/unary.cpp, binary.cpp, activation.cpp) ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
Tensor silu(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, Scalar exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor pow(Scalar base, const Tensor& exponent);

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
/// cond ? a : b, broadcasting all three; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);

// Comparisons and logic return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);

// ---- reductions (src/ops/reduce.cpp); an empty dims list means all dims ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Maximum over all elements.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
/// (values, indices) along `dim`; the gradient flows to the selected element.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
/// Maximum over dims; the gradient is shared evenly between tied maxima.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
/// Vector p-norm over dims (p = 2 by default; p = inf is the max-abs norm).
Tensor norm(const Tensor& x, double p = 2, const std::vector<int64_t>& dims = {},
            bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// ---- scans along one dim (src/ops/scan.cpp) ----
/// Cumulative sum along `dim`, as torch.cumsum: y_k = x_0 + ... + x_k. Integer and bool inputs
/// give int64; floating ones keep their dtype and accumulate in float64 (autocast: float32).
Tensor cumsum(const Tensor& x, int64_t dim);
/// Cumulative product along `dim`, as torch.cumprod; its gradient is exact where x has zeros.
Tensor cumprod(const Tensor& x, int64_t dim);
/// The first-order linear recurrence along `dim`: h_k = a_k h_{k-1} + b_k from h_{-1} = 0, or,
/// when `reverse`, h_k = a_k h_{k+1} + b_k from the last element (JAX's associative scan of
/// affine maps). Floating a and b broadcast to one shape. cumsum is a = 1; the scans'
/// derivatives are written with it, and it differentiates to any order.
Tensor linear_recurrence(const Tensor& a, const Tensor& b, int64_t dim, bool reverse = false);

// ---- linear algebra (src/ops/linalg.cpp) ----
/// torch.matmul semantics: 1-d and 2-d operands, batched with broadcasting of batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x Wᵀ + b with W of shape [out, in]; one op.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);

// ---- shape and views (src/ops/shape.cpp): views share storage with their input ----
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// Sums `x` down to `shape` (the inverse of broadcasting); used for unbroadcasting gradients.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- indexing (src/ops/indexing.cpp); indices are int64 ----
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// x with src added at `index` along dim (out of place); repeated indices accumulate.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// x with `source` rows added at `index` along dim (out of place).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
/// Rows of `weight` picked by integer `indices`; the gradient sums over repeated indices.
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- nn functions (src/ops/nn.cpp) ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
/// softmax(masked_fill(x, mask, -inf), dim) as one op: `mask` is bool, broadcasts to x, and
/// true marks an entry to leave out (masked_fill's convention). Masked entries come out exactly
/// 0, and so does every entry of a row that is masked throughout (the composite gives NaN
/// there), as torch's SDPA does. The kernel skips the work of masked entries, so a causal
/// attention mask costs nothing extra.
Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim);
/// Softmax cross-entropy from logits [N, C] (or [C]) and int64 class indices [N], fused.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean);
/// Normalises over the trailing `normalized_shape` dims; weight and bias are optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace adjoint
