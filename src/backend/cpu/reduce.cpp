// Reductions (sum, prod, max, min) over any set of dims, and argmax/argmin along one dim.
// Each output element is reduced by one thread in a fixed order, so results do not depend on
// the thread count. Floating sums accumulate in double.
//
// Note [Reducing repeated elements]: a reduced dim of stride 0 (an expand) repeats the same
// elements, so the kernels read each unique element once and account for the repeats after:
// max/min and argmax/argmin ignore them (the first index of an extremum along a repeated dim
// is 0), a sum multiplies by the repeat count and a product raises to it. A reduction of
// `ones({1}).expand({2^40})` thus costs one element, not 2^40 (found by fuzz_ops: a timeout).
// Integers wrap as the element-by-element loop does (multiplication modulo 2^64 is exact). For
// floats the unique elements' double accumulator is multiplied by the count (or raised to
// it), rounding once where the loop would round at every step. For one repeated float32 or
// 16-bit value the loop's double sum is exact below 2^29 repeats, so the two agree bitwise;
// otherwise they may differ in the last bits, as sums in another order do.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/wrapping.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

const char* reduce_name(Reduce k) {
  switch (k) {
    case Reduce::Sum:
      return "sum";
    case Reduce::Prod:
      return "prod";
    case Reduce::Max:
      return "max";
    case Reduce::Min:
      return "min";
  }
  return "reduce";
}

// The reduction split into kept dims (one output each) and reduced dims (looped per output).
struct Plan {
  Shape out_shape;                 // keepdim or not, as asked
  Shape kept_sizes, kept_strides;  // in elements of x
  Shape red_sizes, red_strides;
  int64_t outputs = 1, per_output = 1;
  int64_t leading_rows = 0;  // see leading_rows()
  bool trailing = false;     // x contiguous and the reduced dims are its last ones
  int64_t repeats = 1;       // how often each reduced element repeats (stride-0 reduced dims)
};

Plan make_plan(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const char* op) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    if (nd > 0) {
      ADJOINT_CHECK(!reduced[w] || dims.empty(), Value, op, "dim ", d, " appears more than once");
      reduced[w] = true;
    }
  }
  Plan p;
  for (int64_t i = 0; i < nd; ++i) {
    if (reduced[i]) {
      if (keepdim) p.out_shape.push_back(1);
      if (x.strides()[i] == 0 && x.shape()[i] > 1) {  // Note [Reducing repeated elements]
        p.repeats *= x.shape()[i];
        continue;
      }
      p.red_sizes.push_back(x.shape()[i]);
      p.red_strides.push_back(x.strides()[i]);
      p.per_output *= x.shape()[i];
    } else {
      p.kept_sizes.push_back(x.shape()[i]);
      p.kept_strides.push_back(x.strides()[i]);
      p.outputs *= x.shape()[i];
      p.out_shape.push_back(x.shape()[i]);
    }
  }
  if (x.is_contiguous() && nd > 0) {
    int64_t first_reduced = nd;
    for (int64_t i = nd; i-- > 0 && reduced[i];) first_reduced = i;
    bool all_trailing = true;
    for (int64_t i = 0; i < first_reduced; ++i) all_trailing &= !reduced[i];
    p.trailing = all_trailing && first_reduced < nd;
  }
  return p;
}

// Offset (elements) of flat index `i` over sizes/strides.
int64_t offset_of(int64_t i, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// For a contiguous x whose reduced dims all come before its kept dims (a bias gradient:
// summing [rows, cols] over rows), the number of leading rows; 0 otherwise.
int64_t leading_rows(const Tensor& x, const std::vector<int64_t>& dims, const Plan& p) {
  if (!x.is_contiguous() || p.red_sizes.empty() || p.kept_sizes.empty()) return 0;
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i)
    if (wrap_dim(sorted[i], x.dim(), "reduce") != static_cast<int64_t>(i)) return 0;
  return p.per_output;
}

// out[j] = step-fold of x[i * cols + j] over rows i (a bias gradient: summing [rows, cols]
// over rows). Blocks of kBlock columns are folded in registers down all the rows, so each
// element costs a load and a fold instead of also loading and storing its running out[j];
// every column is still folded alone in row order, so the result is the same whichever way
// the columns are blocked or split over threads.
template <class T, class Acc, class Step>
void run_leading(int64_t rows, int64_t cols, const T* x, Acc* out, Acc init, Step step) {
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(rows * kBlock, 1));
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j = b * kBlock;
      if (j + kBlock <= cols) {
        Acc acc[kBlock];
        for (int64_t k = 0; k < kBlock; ++k) acc[k] = init;
        for (int64_t i = 0; i < rows; ++i) {
          const T* row = x + i * cols + j;
          for (int64_t k = 0; k < kBlock; ++k) acc[k] = step(acc[k], row[k]);
        }
        for (int64_t k = 0; k < kBlock; ++k) out[j + k] = acc[k];
      } else {  // the last, partial block
        for (int64_t c = j; c < cols; ++c) out[c] = init;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = j; c < cols; ++c) out[c] = step(out[c], x[i * cols + c]);
      }
    }
  });
}

template <class T, class Acc, class Step>
void run_plan(const Plan& p, const T* x, Acc* out, Acc init, Step step) {
  if (p.leading_rows > 0) return run_leading(p.leading_rows, p.outputs, x, out, init, step);
  // Contiguous inner block: the reduced dims are the trailing ones of a contiguous x.
  const bool inner_contiguous = (p.red_sizes.size() == 1 && p.red_strides[0] == 1) || p.trailing;
  parallel_for(p.outputs, std::max<int64_t>(32768 / std::max<int64_t>(p.per_output, 1), 1),
               [&](int64_t begin, int64_t end) {
                 for (int64_t o = begin; o < end; ++o) {
                   const T* base = x + offset_of(o, p.kept_sizes, p.kept_strides);
                   Acc acc = init;
                   if (inner_contiguous) {
                     for (int64_t j = 0; j < p.per_output; ++j) acc = step(acc, base[j]);
                   } else {
                     for (int64_t j = 0; j < p.per_output; ++j)
                       acc = step(acc, base[offset_of(j, p.red_sizes, p.red_strides)]);
                   }
                   out[o] = acc;
                 }
               });
}

// acc[j] = 0 + x[0][j] + x[1][j] + ... for `rows` rows of `cols`, in row order. Whole rows
// stream through (the chunk's rows are contiguous); four rows per pass over acc, which adds
// them in the same order and loads and stores acc a quarter as often.
template <class T>
void add_rows_in_order(const T* x, int64_t rows, int64_t cols, double* acc) {
  std::fill(acc, acc + cols, 0.0);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T *x0 = x + r * cols, *x1 = x0 + cols, *x2 = x1 + cols, *x3 = x2 + cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] = (((acc[j] + x0[j]) + x1[j]) + x2[j]) + x3[j];
  }
  for (; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) acc[j] += x[r * cols + j];
}

/// out[j] = 0 + partial[0][j] + partial[1][j] + ..., in chunk order: a sum over leading dims
/// from its chunks' sums (`chunks` rows of `cols` doubles).
void add_chunk_rows(const double* partial, int64_t chunks, int64_t cols, double* out) {
  std::fill(out, out + cols, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < cols; ++j) out[j] += partial[c * cols + j];
}

template <class T>
void run_leading_sum(int64_t rows, int64_t cols, const T* x, double* out) {
  const int64_t chunks = (rows + kSumChunkRows - 1) / kSumChunkRows;
  if (chunks <= 1 || cols == 0)  // one chunk: the column-blocked loop, which splits columns
    return run_leading<T, double>(rows, cols, x, out, 0.0, [](double a, T v) { return a + v; });
  std::vector<double> partial(static_cast<std::size_t>(chunks * cols));
  const int64_t grain = std::max<int64_t>(1, 131072 / kSumChunkRows / cols);
  parallel_for(chunks, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * kSumChunkRows, r1 = std::min(rows, r0 + kSumChunkRows);
      add_rows_in_order(x + r0 * cols, r1 - r0, cols, partial.data() + c * cols);
    }
  });
  add_chunk_rows(partial.data(), chunks, cols, out);
}

// Note [Floating sums in chunks]: a float32 or float64 sum whose reduced elements are
// contiguous (a full sum of a contiguous tensor, each row of a sum over trailing dims) adds
// them in chunks of kSumChunk (512): each chunk as 16 interleaved double sums added pairwise
// (simd_sum_widened, vectorised, the same bits on every instruction set), the chunks' sums in
// order into one double. A single serial double sum waits 4 cycles on each add: a full sum of
// 4M floats took 3.4 ms, the chunks 0.4 ms. One output's chunks run on all threads and are
// added in chunk order, so the result is the same for any thread count; compile's fused loop
// sums its values in the same chunks (cpu/fused_program.cpp), so compiled and eager sums agree bit
// for bit. A sum over leading dims (a bias gradient: [rows, cols] over rows) adds each column
// in one double per chunk of kSumChunkRows rows, in row order, and then the chunks' sums in
// order: the chunks run on all threads, each over whole rows (contiguous memory), and compile's
// fused loop sums in the same chunks. Other layouts (strided) keep the element-order loop.
template <class T>
void run_floating_sum(const Plan& p, const T* x, double* out) {
  const bool inner_contiguous = (p.red_sizes.size() == 1 && p.red_strides[0] == 1) || p.trailing;
  if (p.leading_rows > 0) return run_leading_sum(p.leading_rows, p.outputs, x, out);
  if (!inner_contiguous)
    return run_plan<T, double>(p, x, out, 0.0, [](double a, T v) { return a + v; });
  const int64_t n = p.per_output;
  if (p.outputs == 1 && n <= kSumChunk) {  // one chunk (a loss): no buffer, no threads
    out[0] = 0.0 + chunk_sum(x + offset_of(0, p.kept_sizes, p.kept_strides), n);
    return;
  }
  if (p.outputs == 1) {
    const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
    std::vector<double> partial(static_cast<std::size_t>(chunks));
    const T* base = x + offset_of(0, p.kept_sizes, p.kept_strides);
    parallel_for(chunks, std::max<int64_t>(1, 32768 / kSumChunk), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        partial[static_cast<std::size_t>(c)] =
            chunk_sum(base + c * kSumChunk, std::min(kSumChunk, n - c * kSumChunk));
    });
    double acc = 0;
    for (double v : partial) acc += v;
    out[0] = acc;
    return;
  }
  parallel_for(p.outputs, std::max<int64_t>(32768 / std::max<int64_t>(n, 1), 1),
               [&](int64_t begin, int64_t end) {
                 for (int64_t o = begin; o < end; ++o)
                   out[o] = add_chunk_sums(0.0, x + offset_of(o, p.kept_sizes, p.kept_strides), n);
               });
}

// a^n modulo 2^64, by squaring (n >= 1).
int64_t pow_wrap(int64_t a, int64_t n) {
  int64_t r = 1;
  for (; n > 0; n >>= 1, a = mul_wrap(a, a))
    if (n & 1) r = mul_wrap(r, a);
  return r;
}

// Each of acc's reductions ran over the unique elements; they repeat `repeats` times. See Note
// [Reducing repeated elements].
template <class Acc, class Pow>
void account_repeats(Reduce k, std::vector<Acc>& acc, int64_t repeats, Pow pow) {
  for (Acc& a : acc) {
    if (k == Reduce::Sum) a = mul_wrap(a, static_cast<Acc>(repeats));
    if (k == Reduce::Prod) a = pow(a, repeats);
  }
}

}  // namespace

Tensor cpu::reduce(Reduce k, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* op = reduce_name(k);
  if (is_reduced(x)) {  // See Note [Reduced-precision kernels]
    Tensor wide = cpu::reduce(k, widen_keeping_repeats(x), dims, keepdim);
    // An integer sum or product stays int64 (as below); the rest narrow back.
    const bool to_int64 = !is_floating(x.dtype()) && (k == Reduce::Sum || k == Reduce::Prod);
    return to_int64 ? wide : narrow_to(wide, x.dtype());
  }
  Plan p = make_plan(x, dims, keepdim, op);
  p.leading_rows = leading_rows(x, dims, p);
  ADJOINT_CHECK(p.per_output > 0 || (k != Reduce::Max && k != Reduce::Min) || p.outputs == 0, Shape,
                op, "cannot reduce over an empty dimension (input ", describe(x), ")");
  DType out_dtype = is_floating(x.dtype())                    ? x.dtype()
                    : (k == Reduce::Sum || k == Reduce::Prod) ? DType::Int64
                                                              : x.dtype();
  Tensor out = make_empty(p.out_shape, out_dtype);
  const char* data = static_cast<const char*>(x.raw_data());
  dispatch_opmath_all(x.dtype(), op, [&]<class T>() {
    const T* xs = reinterpret_cast<const T*>(data);
    if constexpr (std::is_floating_point_v<T>) {
      T* o = out.data_ptr<T>();
      std::vector<double> acc(p.outputs);
      switch (k) {
        case Reduce::Sum:
          run_floating_sum<T>(p, xs, acc.data());
          break;
        case Reduce::Prod:
          run_plan<T, double>(p, xs, acc.data(), 1.0, [](double a, T v) { return a * v; });
          break;
        case Reduce::Max:
          run_plan<T, double>(p, xs, acc.data(), -std::numeric_limits<double>::infinity(),
                              [](double a, T v) { return max_step(a, v); });
          break;
        case Reduce::Min:
          run_plan<T, double>(p, xs, acc.data(), std::numeric_limits<double>::infinity(),
                              [](double a, T v) { return min_step(a, v); });
          break;
      }
      if (p.repeats > 1)
        account_repeats(k, acc, p.repeats,
                        [](double a, int64_t n) { return std::pow(a, static_cast<double>(n)); });
      for (int64_t i = 0; i < p.outputs; ++i) o[i] = static_cast<T>(acc[i]);
    } else {
      using Acc = int64_t;
      std::vector<Acc> acc(p.outputs);
      switch (k) {
        case Reduce::Sum:
          run_plan<T, Acc>(p, xs, acc.data(), 0, [](Acc a, T v) { return add_wrap(a, Acc(v)); });
          break;
        case Reduce::Prod:
          run_plan<T, Acc>(p, xs, acc.data(), 1, [](Acc a, T v) { return mul_wrap(a, Acc(v)); });
          break;
        case Reduce::Max:
          run_plan<T, Acc>(p, xs, acc.data(), std::numeric_limits<Acc>::min(),
                           [](Acc a, T v) { return std::max(a, Acc(v)); });
          break;
        case Reduce::Min:
          run_plan<T, Acc>(p, xs, acc.data(), std::numeric_limits<Acc>::max(),
                           [](Acc a, T v) { return std::min(a, Acc(v)); });
          break;
      }
      if (p.repeats > 1) account_repeats(k, acc, p.repeats, pow_wrap);
      dispatch_opmath_all(out.dtype(), op, [&]<class O>() {
        O* o = out.data_ptr<O>();
        for (int64_t i = 0; i < p.outputs; ++i) o[i] = static_cast<O>(acc[i]);
      });
    }
  });
  return out;
}

Tensor cpu::arg_reduce(ArgReduce k, const Tensor& x, int64_t dim, bool keepdim) {
  const char* op = k == ArgReduce::ArgMax ? "argmax" : "argmin";
  if (is_reduced(x)) return cpu::arg_reduce(k, widen_keeping_repeats(x), dim, keepdim);
  Plan p = make_plan(x, {dim}, keepdim, op);
  ADJOINT_CHECK(p.per_output > 0, Shape, op, "cannot reduce over an empty dimension (input ",
                describe(x), ")");
  Tensor out = make_empty(p.out_shape, DType::Int64);
  int64_t* o = out.data_ptr<int64_t>();
  dispatch_opmath_all(x.dtype(), op, [&]<class T>() {
    const T* xs = static_cast<const T*>(x.raw_data());
    const bool want_max = k == ArgReduce::ArgMax;
    parallel_for(p.outputs, 1024, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* base = xs + offset_of(i, p.kept_sizes, p.kept_strides);
        int64_t best = 0;
        T best_v = base[0];
        for (int64_t j = 1; j < p.per_output; ++j) {
          T v = base[j * p.red_strides[0]];
          if (best_v != best_v) break;  // NaN wins and stays
          if (v != v || (want_max ? v > best_v : v < best_v)) best = j, best_v = v;
        }
        o[i] = best;
      }
    });
  });
  return out;
}

}  // namespace adjoint::kernels
