// The CPU's executor of compile's fused programs: an interpreter over blocks of elements that
// stay in the first-level cache (Note [Fused programs are kernels] in
// backend/fused_program.h; Note [Pointwise fusion] in src/compile/fusion.cpp).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "adjoint/tensor_impl.h"
#include "adjoint/threading.h"
#include "backend/cpu/simd_math.h"
#include "backend/device_kernels.h"
#include "core/dispatch.h"
#include "core/half_convert.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

/// Elements per block: a program's registers of one block take at most kRegisterBytes, so
/// that they stay in the first-level cache (32 KiB here) beside the inputs and outputs streaming
/// through, and longer blocks spread the per-instruction cost of each kernel call. A multiple of
/// kSumChunk, so that a sum's chunks never straddle blocks. On pointwise-chain (Zen 4): its
/// 4-register forward 2.5 ms at 1024 elements against 2.7 at 512; its 6-register backward 4.4
/// ms at 512 against 4.9 at 1024.
constexpr int64_t kMinBlock = 512, kMaxBlock = 2048, kRegisterBytes = 16384;
static_assert(kMinBlock % kSumChunk == 0);

template <class T>
int64_t block_elements(const FusedProgram& p) {
  int64_t block = kMinBlock;
  while (block * 2 <= kMaxBlock &&
         static_cast<int64_t>(sizeof(T)) * block * 2 * p.num_registers <= kRegisterBytes)
    block *= 2;
  return block;
}
/// Blocks are shared between threads above this many elements, as the elementwise kernels.
constexpr int64_t kParallelElements = 262144;

/// How a block reads one input that broadcasts into the group's shape.
struct InputReader {
  enum class Kind { Direct, Scalar, Periodic, Repeated, Strided } kind;
  const char* data;
  int64_t period = 0;            // Periodic: the input repeats every `period` elements;
                                 // Repeated: each of its elements `period` times (a row statistic)
  std::vector<int64_t> sizes;    // Strided: the group's shape
  std::vector<int64_t> strides;  // Strided: the input's strides in elements (0: broadcast)
};

template <class T>
InputReader reader_for(const Tensor& x, const Shape& shape) {
  // (run_fused_program has checked that x broadcasts to `shape`: check_fused_inputs)
  InputReader r;
  r.kind = InputReader::Kind::Strided;
  r.data = static_cast<const char*>(x.impl()->data());
  bool all_broadcast = true;  // an expanded scalar (the cotangent of a sum) has every stride 0
  for (int64_t d = 0; d < x.dim(); ++d)
    all_broadcast = all_broadcast && (x.strides()[d] == 0 || x.shape()[d] == 1);
  if (x.numel() == 1 || all_broadcast) {
    r.kind = InputReader::Kind::Scalar;
    return r;
  }
  if (x.shape() == shape && x.is_contiguous()) {
    r.kind = InputReader::Kind::Direct;
    return r;
  }
  const int64_t rank = static_cast<int64_t>(shape.size()), xr = x.dim();
  // Contiguous trailing dims equal to the group's, leading ones broadcast (a bias row).
  if (x.is_contiguous()) {
    int64_t period = 1, d = 0;
    for (; d < xr && x.shape()[xr - 1 - d] == shape[rank - 1 - d]; ++d)
      period *= shape[rank - 1 - d];
    bool rest_one = true;
    for (int64_t e = d; e < xr; ++e) rest_one = rest_one && x.shape()[xr - 1 - e] == 1;
    if (rest_one && period == x.numel()) {
      r.kind = InputReader::Kind::Periodic;
      r.period = period;
      return r;
    }
  }
  // Contiguous leading dims equal to the group's, trailing ones of size 1 (a mean per row).
  if (x.is_contiguous() && xr == rank) {
    int64_t d = rank, repeat = 1;
    for (; d > 0 && x.shape()[d - 1] == 1; --d) repeat *= shape[d - 1];
    bool lead_equal = true;
    for (int64_t e = 0; e < d; ++e) lead_equal = lead_equal && x.shape()[e] == shape[e];
    if (lead_equal && repeat > 1) {
      r.kind = InputReader::Kind::Repeated;
      r.period = repeat;
      return r;
    }
  }
  r.sizes.assign(shape.begin(), shape.end());
  r.strides.assign(static_cast<std::size_t>(rank), 0);
  for (int64_t d = 0; d < xr; ++d)
    if (x.shape()[d] != 1) r.strides[static_cast<std::size_t>(rank - xr + d)] = x.strides()[d];
  return r;
}

/// Elements [start, start + n) of the input (of element type S), as a pointer into it or
/// copied into `reg` (converted to T where S is not T: a where's bool condition).
template <class T, class S = T>
const T* read_block(const InputReader& r, int64_t start, int64_t n, T* reg) {
  const S* x = reinterpret_cast<const S*>(r.data);
  switch (r.kind) {
    case InputReader::Kind::Direct:
      if constexpr (std::is_same_v<S, T>) {
        return x + start;
      } else if constexpr (is_reduced_float_v<S>) {
        detail::convert(x + start, reg, n);  // vectorised widening (core/half_convert.h)
        return reg;
      } else {
        for (int64_t j = 0; j < n; ++j) reg[j] = static_cast<T>(x[start + j]);
        return reg;
      }
    case InputReader::Kind::Scalar:
      std::fill(reg, reg + n, static_cast<T>(x[0]));
      return reg;
    case InputReader::Kind::Periodic:
      for (int64_t j = 0, p = start % r.period; j < n; ++j) {
        reg[j] = static_cast<T>(x[p]);
        if (++p == r.period) p = 0;
      }
      return reg;
    case InputReader::Kind::Repeated:
      for (int64_t j = 0, i = start / r.period, k = start % r.period; j < n; ++j) {
        reg[j] = static_cast<T>(x[i]);
        if (++k == r.period) {
          k = 0;
          ++i;
        }
      }
      return reg;
    case InputReader::Kind::Strided:
      break;
  }
  const std::size_t rank = r.sizes.size();
  std::vector<int64_t> index(rank);
  int64_t rest = start, offset = 0;
  for (std::size_t d = rank; d-- > 0;) {
    index[d] = rest % r.sizes[d];
    rest /= r.sizes[d];
    offset += index[d] * r.strides[d];
  }
  for (int64_t j = 0; j < n; ++j) {
    reg[j] = static_cast<T>(x[offset]);
    for (std::size_t d = rank; d-- > 0;) {  // the odometer
      offset += r.strides[d];
      if (++index[d] < r.sizes[d]) break;
      offset -= r.strides[d] * r.sizes[d];
      index[d] = 0;
    }
  }
  return reg;
}

/// Input k's block, read as its dtype says (Program::input_dtype).
template <class T>
const T* read_input(const InputReader& r, DType dtype, int64_t start, int64_t n, T* reg) {
  if (dtype == DType::Bool) return read_block<T, bool>(r, start, n, reg);
  if constexpr (std::is_same_v<T, float>) {
    if (dtype == DType::BFloat16) return read_block<T, BFloat16>(r, start, n, reg);
    if (dtype == DType::Float16) return read_block<T, Half>(r, start, n, reg);
  }
  return read_block<T>(r, start, n, reg);
}

/// dst = x rounded to the 16-bit dtype and widened again (dst may be x), in registers: what an
/// op of that dtype stores.
void round_block(const float* x, float* dst, int64_t n, DType dtype) {
  dispatch_reduced_floating(dtype, "fused pointwise",
                            [&]<class H>() { detail::round_through(x, dst, n, H{}); });
}

/// Each instruction's vectorised kernel (simd_unary_fn, simd_binary_fn), fetched when
/// the fused node is made: a direct call costs about 7 ns less than going through unary_block's
/// checks and dispatch, and the backward of pointwise-chain makes 18 calls per block of 512
/// elements. Kinds without one go through the block kernels.
template <class T>
struct InstrKernel {
  SimdUnaryFn<T> unary = nullptr;
  SimdBinaryFn<T> binary = nullptr;
  T a = 0, b = 0;
  T e = 0;           // the epilogue's constant
  T pa = 0, pb = 0;  // the prologue's constant, by operand
};

/// What a program's runs share, worked out once.
template <class T>
struct Prepared {
  int generation = 0;                   // simd_target_generation() when the kernels were fetched
  std::vector<InstrKernel<T>> kernels;  // by instruction
};

template <class T>
Prepared<T> prepare(const FusedProgram& p) {
  Prepared<T> r;
  r.generation = simd_target_generation();
  r.kernels.resize(p.code.size());
  for (std::size_t i = 0; i < p.code.size(); ++i) {
    const FusedInstr& in = p.code[i];
    const PointwiseKernel& k = in.kernel;
    if (k.is_cast || k.is_where) continue;
    if (k.is_binary) {
      const ScalarStep none = ScalarStep::None;
      const bool on_a = in.prologue_operand == 0;
      r.kernels[i].binary = simd_binary_fn<T>(k.binary, in.epilogue, on_a ? in.prologue : none,
                                              on_a ? none : in.prologue);
      (on_a ? r.kernels[i].pa : r.kernels[i].pb) = static_cast<T>(in.prologue_value);
    } else {
      r.kernels[i].unary = simd_unary_fn<T>(k.unary, k.a, in.epilogue);
      r.kernels[i].a = static_cast<T>(k.a);
      r.kernels[i].b = static_cast<T>(k.b);
    }
    r.kernels[i].e = static_cast<T>(in.epilogue_value);
    // merge_scalar_steps merges steps only into kinds that have vectorised kernels: the block
    // kernels (run_block's fallback) run the instruction alone.
    ADJOINT_CHECK((in.prologue == ScalarStep::None && in.epilogue == ScalarStep::None) ||
                      r.kernels[i].unary || r.kernels[i].binary,
                  Internal, "fused pointwise", "no kernel for an instruction with a merged step");
  }
  return r;
}

/// How the program's ending reduction folds values into a double, as eager code does (Note
/// [Sums that end a fused loop]): a sum adds chunks of kSumChunk elements, a max or min takes
/// each element in order (max_step, min_step).
struct Fold {
  Reduce kind;
  double init() const {
    if (kind == Reduce::Sum) return 0.0;
    const double inf = std::numeric_limits<double>::infinity();
    return kind == Reduce::Max ? -inf : inf;
  }
  /// acc folded with v[0, n) (n a whole number of chunks, or the last, short one).
  template <class T>
  double add(double acc, const T* v, int64_t n) const {
    if (kind == Reduce::Sum) return add_chunk_sums(acc, v, n);
    for (int64_t k = 0; k < n; ++k)
      acc = kind == Reduce::Max ? max_step(acc, v[k]) : min_step(acc, v[k]);
    return acc;
  }
  /// One chunk's value, and the chunks' values combined in order: the same as folding them all.
  template <class T>
  double chunk(const T* v, int64_t n) const {
    return kind == Reduce::Sum ? chunk_sum(v, n) : add(init(), v, n);
  }
  double combine(double acc, double chunk_value) const {
    if (kind == Reduce::Sum) return acc + chunk_value;
    return kind == Reduce::Max ? max_step(acc, chunk_value) : min_step(acc, chunk_value);
  }
};

template <class T>
void run_program(const FusedProgram& p, const Prepared<T>& prepared, std::span<const Tensor> inputs,
                 std::vector<Tensor>& outs) {
  const int64_t numel = p.shape.numel();
  const Fold fold{p.reduce_kind};
  outs.clear();
  for (std::size_t k = 0; k < p.output_register.size(); ++k)
    outs.push_back(make_empty(p.shape, p.output_dtype[k]));
  T* reduced_out = nullptr;  // the ending reduction's output, after the written ones
  if (p.reduced_register >= 0) {
    outs.push_back(make_empty(p.reduced_shape, p.dtype));
    reduced_out = static_cast<T*>(outs.back().impl()->data());
  }
  if (numel == 0) {  // an empty sum is 0 (its rows or columns may be empty, not its outputs)
    if (reduced_out != nullptr) std::fill(reduced_out, reduced_out + p.reduced_shape.numel(), T(0));
    return;
  }
  std::vector<InputReader> readers;
  for (const Tensor& x : inputs) readers.push_back(reader_for<T>(x, p.shape));
  std::vector<char*> out_data;
  for (std::size_t k = 0; k < p.output_register.size(); ++k)
    out_data.push_back(static_cast<char*>(outs[k].impl()->data()));
  const int64_t block = std::min(p.reduce_inner > 0 ? p.reduce_inner : numel, block_elements<T>(p));
  const int64_t blocks = (numel + block - 1) / block;
  // The register of an output of the registers' dtype is that output's memory; a 16-bit output
  // is converted from its register once the block's code has run.
  std::vector<int> output_of(static_cast<std::size_t>(p.num_registers), -1);
  std::vector<std::size_t> narrowed;
  for (std::size_t k = 0; k < p.output_register.size(); ++k) {
    if (p.output_dtype[k] == p.dtype) {
      output_of[static_cast<std::size_t>(p.output_register[k])] = static_cast<int>(k);
    } else {
      narrowed.push_back(k);
    }
  }
  // A broadcast scalar input (the cotangent of a sum, expanded) is the same in every block, and
  // no instruction writes an input's register (make_fused never reuses them): its register is
  // filled once per thread and run, not once per block (a per-block fill was 3.5% of
  // pointwise-chain's compiled step).
  std::vector<char> constant_input(readers.size(), 0);
  for (std::size_t k = 0; k < readers.size(); ++k)
    constant_input[k] = readers[k].kind == InputReader::Kind::Scalar;
  // Registers one cache line more than a block apart: at a multiple of 4 KiB apart, a load
  // from one register and a store to another at the same offset look dependent to the CPU
  // (4K aliasing), which slowed 1024-element blocks.
  constexpr std::size_t kLine = 64 / sizeof(T);
  const std::size_t register_stride = static_cast<std::size_t>(block) + kLine;
  // Runs the program over elements [start, start + n) (n <= block) with `reg` pointed into
  // `scratch` and the outputs; returns the summed register's block when there is one.
  auto run_block = [&](int64_t start, int64_t n, std::vector<T*>& reg, T* scratch) -> const T* {
    for (int r = 0; r < p.num_registers; ++r) {
      const int o = output_of[static_cast<std::size_t>(r)];
      reg[static_cast<std::size_t>(r)] =
          o >= 0 ? reinterpret_cast<T*>(out_data[static_cast<std::size_t>(o)]) + start
                 : scratch + static_cast<std::size_t>(r) * register_stride;
    }
    for (std::size_t k = 0; k < readers.size(); ++k) {
      if (constant_input[k]) continue;  // filled by thread_registers
      T* slot = reg[static_cast<std::size_t>(p.input_register[k])];
      reg[static_cast<std::size_t>(p.input_register[k])] =
          const_cast<T*>(read_input<T>(readers[k], p.input_dtype[k], start, n, slot));
    }
    for (std::size_t i = 0; i < p.code.size(); ++i) {
      const FusedInstr& in = p.code[i];
      const InstrKernel<T>& fn = prepared.kernels[i];
      T* dst = reg[static_cast<std::size_t>(in.dst)];
      if (in.kernel.is_cast) {
        const T* x = reg[static_cast<std::size_t>(in.src0)];
        if constexpr (std::is_same_v<T, float>) {
          if (is_reduced_float(in.result)) {  // the rounding is the whole cast
            round_block(x, dst, n, in.result);
            continue;
          }
        }
        if (x != dst) std::copy(x, x + n, dst);  // (a register is reused after its last read)
      } else if (in.kernel.is_where) {           // as where: a selection, no arithmetic
        const T* c = reg[static_cast<std::size_t>(in.src0)];
        const T* x = reg[static_cast<std::size_t>(in.src1)];
        const T* y = reg[static_cast<std::size_t>(in.src2)];
        for (int64_t j = 0; j < n; ++j) dst[j] = c[j] != T(0) ? x[j] : y[j];
      } else if (in.kernel.is_binary) {
        const T* x = reg[static_cast<std::size_t>(in.src0)];
        const T* y = reg[static_cast<std::size_t>(in.src1)];
        if (fn.binary) {
          fn.binary(x, y, dst, static_cast<std::size_t>(n), fn.pa, fn.pb, fn.e);
        } else {
          binary_block<T>(in.kernel.binary, x, y, dst, n);
        }
      } else {
        const T* x = reg[static_cast<std::size_t>(in.src0)];
        if (fn.unary) {
          fn.unary(x, dst, static_cast<std::size_t>(n), fn.a, fn.b, fn.e);
        } else {
          unary_block<T>(in.kernel.unary, x, dst, n, in.kernel.a, in.kernel.b);
        }
      }
      if constexpr (std::is_same_v<T, float>)
        if (is_reduced_float(in.result)) round_block(dst, dst, n, in.result);
    }
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t k : narrowed)
        dispatch_reduced_floating(p.output_dtype[k], "fused pointwise", [&]<class H>() {
          detail::convert(reg[static_cast<std::size_t>(p.output_register[k])],
                          reinterpret_cast<H*>(out_data[k]) + start, n);
        });
    }
    return p.reduced_register >= 0 ? reg[static_cast<std::size_t>(p.reduced_register)] : nullptr;
  };
  // Each thread's registers, one block each, from a cache line's start: the kernels' vector
  // loads and stores then never straddle two lines. (Left to malloc's 16-byte alignment, the
  // pointwise-chain step ran at 7.0 or 9.0 ms from one process to the next, as the heap's
  // layout happened to fall.)
  auto thread_registers = [&](std::vector<T*>& reg) {
    thread_local std::vector<T> scratch;
    const std::size_t need = static_cast<std::size_t>(p.num_registers) * register_stride + kLine;
    if (scratch.size() < need) scratch.resize(need);
    reg.resize(static_cast<std::size_t>(p.num_registers));
    const auto address = reinterpret_cast<std::uintptr_t>(scratch.data());
    T* aligned = scratch.data() + (kLine - address / sizeof(T) % kLine) % kLine;
    for (std::size_t k = 0; k < readers.size(); ++k)
      if (constant_input[k])
        read_input<T>(readers[k], p.input_dtype[k], 0, block,
                      aligned + static_cast<std::size_t>(p.input_register[k]) * register_stride);
    return aligned;
  };

  if (p.reduce_columns > 0) {
    // A reduction over leading dims. A sum adds as the eager reduction does (run_leading_sum in
    // reduce.cpp): each column into one double per chunk of kSumChunkRows rows, in row order,
    // then the chunks' sums in order. A max or min folds the same chunks, which gives the bits
    // of eager code's single pass down each column (Fold::combine). Blocks hold as many whole
    // rows as fit, or a piece of one row.
    const int64_t columns = p.reduce_columns, rows = numel / columns;
    const int64_t chunks = (rows + kSumChunkRows - 1) / kSumChunkRows;
    // Folds rows [r0, r1) of columns [c0, c0 + n) (n <= block) into acc[0, n).
    auto add_rows = [&](int64_t r0, int64_t r1, int64_t c0, int64_t n, double* acc,
                        std::vector<T*>& reg, T* scratch) {
      const int64_t per_block = n == columns ? std::max<int64_t>(1, block / columns) : 1;
      for (int64_t r = r0; r < r1; r += per_block) {
        const int64_t m = std::min(per_block, r1 - r);
        const T* v = run_block(r * columns + c0, m * n, reg, scratch);
        for (int64_t i = 0; i < m; ++i) {
          if (fold.kind == Reduce::Sum) {
            for (int64_t k = 0; k < n; ++k) acc[k] += v[i * n + k];
          } else {
            for (int64_t k = 0; k < n; ++k) acc[k] = fold.combine(acc[k], v[i * n + k]);
          }
        }
      }
    };
    if (chunks <= 1) {
      // One chunk (few rows): stripes of columns over threads, each run down all the rows.
      const int64_t threads = std::max(1, get_num_threads());
      const int64_t stripe =
          std::min(block, std::max(kMinBlock, (columns + threads - 1) / threads));
      const int64_t stripes = (columns + stripe - 1) / stripe;
      const int64_t grain =
          std::max<int64_t>(1, kParallelElements / std::max<int64_t>(rows * stripe, 1));
      parallel_for(stripes, grain, [&](int64_t s0, int64_t s1) {
        std::vector<T*> reg;
        T* scratch = thread_registers(reg);
        std::vector<double> acc(static_cast<std::size_t>(stripe));
        for (int64_t s = s0; s < s1; ++s) {
          const int64_t c0 = s * stripe, n = std::min(stripe, columns - c0);
          std::fill(acc.begin(), acc.end(), fold.init());
          add_rows(0, rows, c0, n, acc.data(), reg, scratch);
          for (int64_t k = 0; k < n; ++k)
            reduced_out[c0 + k] = static_cast<T>(acc[static_cast<std::size_t>(k)]);
        }
      });
      return;
    }
    std::vector<double> partial(static_cast<std::size_t>(chunks * columns));
    parallel_for(chunks, std::max<int64_t>(1, kParallelElements / kSumChunkRows / columns),
                 [&](int64_t k0, int64_t k1) {
                   std::vector<T*> reg;
                   T* scratch = thread_registers(reg);
                   for (int64_t k = k0; k < k1; ++k) {
                     double* acc = partial.data() + k * columns;
                     std::fill(acc, acc + columns, fold.init());
                     const int64_t r0 = k * kSumChunkRows, r1 = std::min(rows, r0 + kSumChunkRows);
                     for (int64_t c0 = 0; c0 < columns; c0 += block)
                       add_rows(r0, r1, c0, std::min(block, columns - c0), acc + c0, reg, scratch);
                   }
                 });
    std::vector<double> total(static_cast<std::size_t>(columns), fold.init());
    for (int64_t k = 0; k < chunks; ++k)  // in chunk order (a sum: reduce.cpp's add_chunk_rows)
      for (int64_t j = 0; j < columns; ++j)
        total[static_cast<std::size_t>(j)] =
            fold.combine(total[static_cast<std::size_t>(j)], partial[k * columns + j]);
    for (int64_t j = 0; j < columns; ++j)
      reduced_out[j] = static_cast<T>(total[static_cast<std::size_t>(j)]);
    return;
  }
  if (p.reduce_inner > 0) {
    // A reduction over trailing dims: one output per row of `reduce_inner` elements, each row run
    // by one thread in blocks that never cross a row; a sum adds in the eager reduction's chunks
    // (Note [Floating sums in chunks] in reduce.cpp; blocks start on chunk boundaries), a max or
    // min folds element by element: the same bits.
    const int64_t inner = p.reduce_inner, rows = numel / inner;
    T* out = reduced_out;
    parallel_for(rows, std::max<int64_t>(1, kParallelElements / inner),
                 [&](int64_t r0, int64_t r1) {
                   std::vector<T*> reg;
                   T* scratch = thread_registers(reg);
                   for (int64_t r = r0; r < r1; ++r) {
                     double acc = fold.init();
                     for (int64_t c = 0; c < inner; c += block) {
                       const int64_t n = std::min(block, inner - c);
                       acc = fold.add(acc, run_block(r * inner + c, n, reg, scratch), n);
                     }
                     out[r] = static_cast<T>(acc);
                   }
                 });
    return;
  }
  // A full reduction's chunks' values, combined in order at the end as the eager reduction
  // combines them (Note [Sums that end a fused loop]).
  std::vector<double> partial(
      p.reduced_register >= 0 ? static_cast<std::size_t>((numel + kSumChunk - 1) / kSumChunk) : 0);
  auto run_blocks = [&](int64_t first, int64_t last) {
    std::vector<T*> reg;
    T* scratch = thread_registers(reg);
    for (int64_t b = first; b < last; ++b) {
      const int64_t start = b * block, n = std::min(block, numel - start);
      const T* v = run_block(start, n, reg, scratch);
      if (p.reduced_register >= 0)  // (a block is whole chunks, or the last, short one)
        for (int64_t c = 0; c < n; c += kSumChunk)
          partial[static_cast<std::size_t>((start + c) / kSumChunk)] =
              fold.chunk(v + c, std::min(kSumChunk, n - c));
    }
  };
  const int64_t grain = std::max<int64_t>(1, kParallelElements / block);
  parallel_for(blocks, grain, run_blocks);
  if (p.reduced_register >= 0) {  // in chunk order: the same for any threads
    double total = fold.init();
    for (double v : partial) total = fold.combine(total, v);
    *reduced_out = static_cast<T>(total);
  }
}

// Note [Sums that end a fused loop]
// A sum of one of the group's values ends the loop (fusion.cpp's summed_by), so the summed
// value is read from registers, not written and read again; it is still written when something
// else reads it (a softmax's exp, divided and summed; a layer's gradient, which the products
// read and its bias's gradient sums). Every sum adds in eager code's order, so compiled sums
// equal eager ones bit for bit, on any number of threads:
// - over every dim: the blocks' chunks of 512 (16 interleaved double sums each, vectorised),
//   then the chunks in order (Note [Floating sums in chunks] in reduce.cpp);
// - over trailing dims, rows of 128 elements or more: each row by one thread, in blocks that
//   never cross it, summed in the same chunks;
// - over leading dims keeping 128 columns or more (a bias gradient; `sum_to`'s too): each
//   column into one double per chunk of 256 rows, row by row, then the chunks' sums in order,
//   as the eager reduction (run_leading_sum). The chunks run on all threads, in blocks of
//   whole rows; a single chunk runs in stripes of columns over threads instead.
// Shorter rows or fewer columns would make blocks too short for the interpreter; such sums, and
// sums over other dims, stay on their own.

/// The kernels of a program of either dtype (the one of its dtype is filled).
struct CpuPreparedProgram final : PreparedFusedProgram {
  CpuPreparedProgram() : PreparedFusedProgram(DeviceType::CPU) {}
  Prepared<float> f32;
  Prepared<double> f64;
};

}  // namespace

std::shared_ptr<const PreparedFusedProgram> cpu::prepare_fused_program(
    Device, const FusedProgram& program) {
  auto r = std::make_shared<CpuPreparedProgram>();
  if (program.dtype == DType::Float32) {
    r->f32 = prepare<float>(program);
  } else {
    r->f64 = prepare<double>(program);
  }
  return r;
}

std::vector<Tensor> cpu::run_fused_program(const FusedProgram& program,
                                           const PreparedFusedProgram* prepared,
                                           std::span<const Tensor> inputs) {
  check_fused_inputs(program, inputs);
  const auto* mine = prepared != nullptr && prepared->device == DeviceType::CPU
                         ? static_cast<const CpuPreparedProgram*>(prepared)
                         : nullptr;
  std::vector<Tensor> outs;
  // The kernels kept, or fetched again for this run (none kept, or a test has pinned another
  // instruction set since they were fetched).
  auto run = [&]<class T>(const Prepared<T>* kept) {
    if (kept != nullptr && kept->generation == simd_target_generation()) {
      run_program<T>(program, *kept, inputs, outs);
    } else {
      run_program<T>(program, prepare<T>(program), inputs, outs);
    }
  };
  if (program.dtype == DType::Float32) {
    run(mine != nullptr ? &mine->f32 : nullptr);
  } else {
    run(mine != nullptr ? &mine->f64 : nullptr);
  }
  return outs;
}

}  // namespace adjoint::kernels
