// Fused scaled-dot-product attention on the CPU: Note [Blocked attention] for the algorithm,
// Note [Attention work split] for the threads, Note [Attention dropout] for the random mask.
// The block products run on the library's single-threaded float32 gemm (sgemm.h: OpenBLAS or
// oneDNN), on OpenBLAS's dgemm for float64, or for bfloat16 on oneDNN's bfloat16 products where
// bfloat16 matmuls run there (Note [bfloat16 attention blocks]); the row passes (max, the shifted
// exp, the rescaling) on the SIMD helpers of simd_math.h. Other 16-bit inputs are widened to
// float32 at entry (Note [Reduced-precision kernels]). Every sum is a float32 one, and the
// results are rounded once on the way out.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/half.h"
#include "adjoint/threading.h"
#include "backend/attention_kernels.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/row_math.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/single_threaded_blas.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/half_convert.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Note [Blocked attention]
// The forward runs over blocks of kQueryBlock query rows. For each block of kKeyBlock keys it
// forms the scores S = scale Q Kᵀ + bias (one gemm; masked entries -inf), and folds them into
// running row statistics, FlashAttention's online softmax: the row maximum m, the sum
// l = Σ exp(s - m) and the unnormalised output acc = Σ exp(s - m) v, all rescaled by
// exp(m_old - m_new) when the maximum grows. The output is acc / l and the one number kept per
// row is lse = m + log l. Key blocks wholly above a causal diagonal are never formed.
// The backward recomputes a block's probabilities from the scores and lse (P = exp(S - lse)),
// and with D = rowsum(dO ∘ O) (which equals rowsum(P ∘ dP), so no row of P is summed):
//   dV += Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - D) scale,  dK += dSᵀ Q,  dQ += dS K.
// A row whose every key is masked has m = -inf and l = 0; it gives 0 with lse = 0 (so that the
// backward's P is exp(-inf) = 0 there), as PyTorch's kernels and its math path's _safe_softmax
// do since 2.5. A NaN score makes m NaN and the whole row NaN, as in the math path.
//
// Note [Attention block products]
// The block products run on sgemm_block: oneDNN's sgemm on AVX-512 CPUs (where the sgemm path
// is by size), OpenBLAS's elsewhere. On Zen 5 (2 cores, float32, causal, B 2, H 4, L 1024,
// E 64, one thread, 64 x 64 blocks) oneDNN took the forward from 24 to 16 ms and the backward
// from 47 to 29 ms against OpenBLAS's Haswell kernels, which the by-size rule keeps for products
// this small (under 2^20 multiply-adds). With oneDNN, 64 query rows by 128 keys beat 64 x 64
// (forward about 0.8x, backward 0.9x at L 1024, the same at L 128); 128 x 128 was as fast at L 1024
// and slower at L 128, where the diagonal blocks of a causal mask waste more.
constexpr int64_t kQueryBlock = 64, kKeyBlock = 128;

// Note [bfloat16 attention blocks]
// Where bfloat16 matmuls run on oneDNN (gemm16_path: a CPU that multiplies bfloat16, Note
// [bfloat16 matmul]), bfloat16 attention keeps q, k, v and dO in bfloat16 and runs every block
// product there too, with float32 accumulation: the scores S = Q Kᵀ and dP = dO Vᵀ from the
// inputs as they are, and the products with P (P V, Pᵀ dO) and with dS (dS K, dSᵀ Q) from P
// and dS rounded to bfloat16 once per block, as FlashAttention does on GPUs and as the math path
// does under bfloat16 (its softmax output and the scores' gradient are bfloat16 tensors). The
// online softmax, lse, D and the accumulators stay float32. Elsewhere (and for float16) the
// inputs are widened at entry and the blocks multiply in float32. Measured in docs/attention.md
// ("bfloat16 block products").
// Whether bfloat16 attention runs on bfloat16 block products now (ADJOINT_GEMM16 and
// set_gemm16_path move it with the matmuls).
bool bf16_blocks() { return gemm16_path(DType::BFloat16) == Gemm16Path::OneDnn; }

// C = op(A) op(B) + beta C on the calling thread, row-major (as sgemm in sgemm.h); C is of the
// accumulation type A (float for bfloat16 operands).
template <class T, class A>
void block_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const T* b, int64_t ldb, A beta, A* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == A(0))
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, A(0));
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16_onednn(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else if constexpr (std::is_same_v<A, float>) {
    sgemm_block(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0, a, lda, b, ldb, beta, c, ldc);
  }
}

// The running maximum; a NaN wins (and then poisons the row).
template <class A>
inline A max_nan(A a, A v) {
  return (v > a || v != v) ? v : a;
}

// The matrices [rows, cols] of an operand [*b, H, rows, cols] in the operand type T (the
// accumulation type, or bfloat16 as it is: Note [bfloat16 attention blocks]), with unit column
// stride and a row stride BLAS accepts (a copy where the input has neither), and the offset of
// each matrix n * H + h.
template <class T>
struct Matrices {
  Tensor keep;  // what `data` points into
  const T* data = nullptr;
  int64_t ld = 1;
  std::vector<int64_t> offsets;
  const T* operator[](int64_t i) const { return data + offsets[i]; }
};

// Offsets of each matrix of `shape` (all dims but the last two) through `strides`.
std::vector<int64_t> matrix_offsets(const Shape& shape, const Shape& strides) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t count = 1;
  for (int64_t d = 0; d + 2 < nd; ++d) count *= shape[d];
  std::vector<int64_t> out(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t off = 0, rem = i;
    for (int64_t d = nd - 3; d >= 0; --d) {
      off += (rem % shape[d]) * strides[d];
      rem /= shape[d];
    }
    out[static_cast<std::size_t>(i)] = off;
  }
  return out;
}

template <class T>
Matrices<T> matrices(const Tensor& t) {
  Tensor x = std::is_same_v<T, BFloat16> ? t : widen(t);
  const int64_t nd = x.dim();
  const int64_t rows = x.shape()[nd - 2], cols = x.shape()[nd - 1];
  const bool unit_cols = cols <= 1 || x.strides()[nd - 1] == 1;
  const bool rows_apart = rows <= 1 || x.strides()[nd - 2] >= std::max<int64_t>(cols, 1);
  if (!unit_cols || !rows_apart) x = cast(x, x.dtype());
  Matrices<T> m;
  m.keep = x;
  if (x.numel() > 0) m.data = x.data_ptr<T>();
  m.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : x.strides()[nd - 2];
  m.offsets = matrix_offsets(x.shape(), x.strides());
  return m;
}

// The mask's rows as the scores [*b, Hq, L, S] see them, through its broadcast strides.
enum class MaskKind { None, Bool, Additive };
template <class A>
struct MaskRows {
  MaskKind kind = MaskKind::None;
  Tensor keep;
  const bool* b = nullptr;
  const A* f = nullptr;
  int64_t rs = 0, cs = 0;        // strides along L and S (0 where broadcast)
  std::vector<int64_t> offsets;  // of each [L, S] matrix n * Hq + h
};

template <class A>
MaskRows<A> mask_rows(const Tensor& mask, const Shape& scores) {
  MaskRows<A> m;
  if (!mask.defined()) return m;
  const Tensor x = mask.dtype() == DType::Bool ? mask : widen(mask);
  const std::size_t nd = scores.size(), md = x.shape().size();
  Shape strides(nd, 0);
  for (std::size_t i = 0; i < md; ++i)
    strides[nd - md + i] = x.shape()[i] == 1 ? 0 : x.strides()[i];
  m.keep = x;
  m.rs = strides[nd - 2];
  m.cs = strides[nd - 1];
  m.offsets = matrix_offsets(scores, strides);
  if (x.dtype() == DType::Bool) {
    m.kind = MaskKind::Bool;
    if (x.numel() > 0) m.b = x.data_ptr<bool>();
  } else {
    m.kind = MaskKind::Additive;
    if (x.numel() > 0) m.f = x.data_ptr<A>();
  }
  return m;
}

// Note [Attention dropout]
// Dropout inside the kernels cannot draw from the generator as it goes: the backward must drop
// what the forward dropped, without storing a mask of L × S. So the ops layer draws a key from
// the generator with randint (through the dispatch stack: a checkpointed recomputation restores
// the generator and draws the same key, a compiled replay draws again as eager code would) and
// every element's draw is a function of that key and the element's position alone
// (counter-based, as Philox in PyTorch's CUDA kernels): for score (n, h, i, j) of the flattened
// batch n, query head h, query i and key j,
//   row = mix(seed ^ mix(offset + φ (((n mod R) Hq + h) L + i + 1))),
//   bits = mix(row + φ (j + 1)),
// where (seed, offset) is row n / R of the key tensor [P, 2] (R = prod(*b) / P), mix is
// SplitMix64's finaliser and φ the golden-ratio increment. The element is kept (and scaled by
// 1 / (1 - p)) when the top 32 bits of `bits` are at least ceil(p 2^32). The forward, both
// backward passes and attention_dropout_scale compute the same bits, whatever the blocking or
// the thread count. vmap with per-example randomness hands P = B keys, one per example, and
// the counters restart in each example (n mod R), so an example draws what it would alone.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct DropoutDraws {
  bool on = false;
  uint64_t threshold = 0;
  const int64_t* seeds = nullptr;
  int64_t per_seed = 1, heads = 1, rows = 1;
  double keep_scale = 1;
  Tensor keep;

  uint64_t row_key(int64_t n, int64_t h, int64_t i) const {
    const int64_t g = n / per_seed, local = n % per_seed;
    const auto seed = static_cast<uint64_t>(seeds[2 * g]);
    const auto offset = static_cast<uint64_t>(seeds[2 * g + 1]);
    const auto row =
        (static_cast<uint64_t>(local) * static_cast<uint64_t>(heads) + static_cast<uint64_t>(h)) *
            static_cast<uint64_t>(rows) +
        static_cast<uint64_t>(i);
    return mix64(seed ^ mix64(offset + kGolden * (row + 1)));
  }
  // z[c] for keys j0 + c, c < len, of the row with `key`: keep or 0.
  template <class A>
  void row(uint64_t key, int64_t j0, int64_t len, A keep_value, A* z) const {
    for (int64_t c = 0; c < len; ++c) {
      const uint64_t bits = mix64(key + kGolden * static_cast<uint64_t>(j0 + c + 1));
      z[c] = (bits >> 32) >= threshold ? keep_value : A(0);
    }
  }
};

DropoutDraws dropout_draws(const Tensor& seed, double p, int64_t batch, int64_t heads,
                           int64_t rows) {
  DropoutDraws d;
  if (!seed.defined() || p == 0) return d;
  ADJOINT_CHECK(p > 0 && p <= 1, Value, kOp, "dropout probability must be in [0, 1], got ", p);
  ADJOINT_CHECK(seed.dtype() == DType::Int64 && seed.dim() == 2 && seed.size(1) == 2 &&
                    seed.size(0) >= 1 && batch % seed.size(0) == 0,
                Shape, kOp, "the dropout key must be int64 [P, 2] with P dividing the batch ",
                batch, ", got ", describe(seed));
  d.keep = seed.is_contiguous() ? seed : cast(seed, DType::Int64);
  d.on = true;
  d.seeds = d.keep.data_ptr<int64_t>();
  d.per_seed = batch / seed.size(0);
  d.heads = heads;
  d.rows = rows;
  d.threshold = p >= 1 ? (uint64_t{1} << 32) : static_cast<uint64_t>(std::ceil(p * 4294967296.0));
  d.keep_scale = p < 1 ? 1 / (1 - p) : 0;
  return d;
}

// T: the operands' type in the block products; A: the accumulation type.
template <class T, class A>
struct Problem {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, group = 1, L = 0, S = 0, E = 0, Ev = 0;
  Matrices<T> q, k, v;
  MaskRows<A> mask;
  DropoutDraws drop;
  A scale = 1, keep = 1;
  bool causal = false;

  int64_t kv_of(int64_t nh) const { return (nh / heads_q) * heads_kv + (nh % heads_q) / group; }
  // Keys [0, end) that the query rows [i0, i0 + rows) see.
  int64_t key_end(int64_t i0, int64_t rows) const { return causal ? std::min(S, i0 + rows) : S; }
  // The first query block with a row that sees key j0.
  int64_t first_query_block(int64_t j0) const { return causal ? j0 / kQueryBlock : 0; }
};

// The checks every entry shares (the ops layer makes these shapes; an imported graph may not).
void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  ADJOINT_CHECK(
      q.dim() >= 3 && k.dim() == q.dim() && v.dim() == q.dim(), Shape, kOp,
      "expected q [*b, Hq, L, E], k [*b, Hkv, S, E], v [*b, Hkv, S, Ev] of one rank, got ",
      describe(q), ", ", describe(k), ", ", describe(v));
  ADJOINT_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), DType,
                kOp, "q, k and v must share a floating dtype, got ", describe(q), ", ", describe(k),
                ", ", describe(v));
  const int64_t nd = q.dim();
  bool ok = k.size(nd - 1) == q.size(nd - 1) && v.size(nd - 2) == k.size(nd - 2) &&
            k.size(nd - 3) == v.size(nd - 3) && k.size(nd - 3) > 0 &&
            q.size(nd - 3) % k.size(nd - 3) == 0;
  for (int64_t d = 0; ok && d + 3 < nd; ++d) ok = k.size(d) == q.size(d) && v.size(d) == q.size(d);
  ADJOINT_CHECK(ok, Shape, kOp, "q ", describe(q), ", k ", describe(k), " and v ", describe(v),
                " do not fit q [*b, Hq, L, E], k [*b, Hkv, S, E], v [*b, Hkv, S, Ev] with Hq a "
                "multiple of Hkv");
  if (!mask.defined()) return;
  Shape scores = q.shape();
  scores[nd - 1] = k.size(nd - 2);
  ADJOINT_CHECK((mask.dtype() == DType::Bool || mask.dtype() == q.dtype()) && mask.dim() <= nd &&
                    broadcast_shapes(scores, mask.shape(), kOp) == scores,
                Shape, kOp, "the mask ", describe(mask), " must be bool or of q's dtype ",
                q.dtype(), " and broadcast to the scores ", scores);
}

template <class T, class A>
Problem<T, A> make_problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           const Tensor& seed, const AttentionSpec& spec) {
  Problem<T, A> p;
  const int64_t nd = q.dim();
  p.batch = 1;
  for (int64_t d = 0; d + 3 < nd; ++d) p.batch *= q.size(d);
  p.heads_q = q.size(nd - 3);
  p.heads_kv = k.size(nd - 3);
  p.group = p.heads_q / p.heads_kv;
  p.L = q.size(nd - 2);
  p.S = k.size(nd - 2);
  p.E = q.size(nd - 1);
  p.Ev = v.size(nd - 1);
  p.q = matrices<T>(q);
  p.k = matrices<T>(k);
  p.v = matrices<T>(v);
  Shape scores = q.shape();
  scores[nd - 1] = p.S;
  p.mask = mask_rows<A>(mask, scores);
  p.drop = dropout_draws(seed, spec.dropout_p, p.batch, p.heads_q, p.L);
  p.scale = static_cast<A>(spec.scale);
  p.keep = static_cast<A>(p.drop.keep_scale);
  p.causal = spec.causal;
  return p;
}

// s[r * bk + c] = scale q_(i0 + r) · k_(j0 + c) + bias for r < bq, c < bk, -inf where masked.
template <class T, class A>
void scores(const Problem<T, A>& p, int64_t nh, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
            A* s) {
  block_gemm(false, true, bq, bk, p.E, p.q[nh] + i0 * p.q.ld, p.q.ld,
             p.k[p.kv_of(nh)] + j0 * p.k.ld, p.k.ld, A(0), s, bk);
  const A neg_inf = -std::numeric_limits<A>::infinity();
  const A scale = p.scale;
  const MaskRows<A>& m = p.mask;
  for (int64_t r = 0; r < bq; ++r) {
    A* row = s + r * bk;
    for (int64_t c = 0; c < bk; ++c) row[c] *= scale;
    const int64_t at = m.offsets.empty() ? 0 : m.offsets[nh] + (i0 + r) * m.rs + j0 * m.cs;
    if (m.kind == MaskKind::Bool) {
      const bool* mr = m.b + at;
      for (int64_t c = 0; c < bk; ++c)
        if (!mr[c * m.cs]) row[c] = neg_inf;
    } else if (m.kind == MaskKind::Additive) {
      const A* mr = m.f + at;
      for (int64_t c = 0; c < bk; ++c) row[c] += mr[c * m.cs];
    }
    if (p.causal)
      for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < bk; ++c) row[c] = neg_inf;
  }
}

// Note [Attention work split]
// Both directions split over (batch, head, block): the forward and the backward's dQ pass over
// query blocks, the backward's dK/dV pass over key blocks (of a key/value head, reading every
// query head of its group), so each output row is written by one task and summed in one fixed
// order: no atomics, and the bits do not depend on the thread count. Under a causal mask a
// block's work grows with its index (query blocks) or shrinks with it (key blocks), so block b
// and block count-1-b form one task: every task costs about the same, and the pool's fixed
// contiguous chunks stay balanced. PyTorch's CPU kernel splits its backward over batch and heads
// only, which leaves cores idle when B·H is small (gpt-long: 8 heads of 1024 rows); here that
// case has B·H·(L / 64) tasks. With at least two key/value heads per thread the backward runs
// one pass per key/value head instead (Note [Attention backward passes]).
template <class MakeScratch, class F>
void for_blocks(int64_t matrices, int64_t blocks, bool balanced, MakeScratch make, F fn) {
  if (matrices == 0 || blocks == 0) return;
  const int64_t per = balanced ? (blocks + 1) / 2 : blocks;
  parallel_for(matrices * per, 1, [&](int64_t t0, int64_t t1) {
    auto scratch = make();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m = t / per, b = t % per;
      fn(scratch, m, b);
      if (balanced && blocks - 1 - b != b) fn(scratch, m, blocks - 1 - b);
    }
  });
}

int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

// A block of A as the block products' operand type T: the block itself when T is A, else
// rounded into `buf` (Note [bfloat16 attention blocks]).
template <class T, class A>
const T* as_operand(const A* block, int64_t n, std::vector<T>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    (void)n, (void)buf;
    return block;
  } else {
    detail::convert(block, buf.data(), n);
    return buf.data();
  }
}
// The size of a rounding buffer for blocks of n elements: none when T is A.
template <class T, class A>
std::size_t operand_buffer(int64_t n) {
  return std::is_same_v<T, A> ? 0 : static_cast<std::size_t>(n);
}

template <class T, class A>
struct ForwardScratch {
  std::vector<A> s, acc, m, l, z;
  std::vector<T> st;  // s rounded to T (Note [bfloat16 attention blocks])
  explicit ForwardScratch(const Problem<T, A>& p)
      : s(kQueryBlock * kKeyBlock),
        acc(kQueryBlock * std::max<int64_t>(p.Ev, 1)),
        m(kQueryBlock),
        l(kQueryBlock),
        z(kKeyBlock),
        st(operand_buffer<T, A>(kQueryBlock * kKeyBlock)) {}
};

// Query block qb of matrix nh: its rows of the output (at out, row stride ldo) and lse.
template <class T, class A>
void forward_block(const Problem<T, A>& p, int64_t nh, int64_t qb, ForwardScratch<T, A>& w, A* out,
                   int64_t ldo, A* lse) {
  const int64_t i0 = qb * kQueryBlock, bq = std::min(kQueryBlock, p.L - i0);
  const int64_t Ev = p.Ev, n = nh / p.heads_q, h = nh % p.heads_q;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  A* acc = w.acc.data();
  A* m = w.m.data();
  A* l = w.l.data();
  std::fill(acc, acc + bq * Ev, A(0));
  std::fill(m, m + bq, neg_inf);
  std::fill(l, l + bq, A(0));
  const int64_t end = p.key_end(i0, bq);
  const T* vm = p.v[p.kv_of(nh)];
  for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
    const int64_t bk = std::min(kKeyBlock, end - j0);
    A* s = w.s.data();
    scores(p, nh, i0, bq, j0, bk, s);
    for (int64_t r = 0; r < bq; ++r) {
      A* row = s + r * bk;
      const A top = max_nan(m[r], simd_max(row, bk));
      const A base = top == neg_inf ? A(0) : top;  // a row masked so far: exp(-inf) = 0
      simd_exp_shifted(row, base, row, bk);
      const A alpha = std::exp(m[r] - base);
      l[r] = l[r] * alpha + static_cast<A>(sum_double(row, bk));
      if (alpha != A(1)) {
        A* a = acc + r * Ev;
        for (int64_t e = 0; e < Ev; ++e) a[e] *= alpha;
      }
      m[r] = top;
      if (p.drop.on) {
        A* z = w.z.data();
        p.drop.row(p.drop.row_key(n, h, i0 + r), j0, bk, p.keep, z);
        for (int64_t c = 0; c < bk; ++c) row[c] *= z[c];
      }
    }
    block_gemm(false, false, bq, Ev, bk, as_operand<T>(s, bq * bk, w.st), bk, vm + j0 * p.v.ld,
               p.v.ld, A(1), acc, Ev);
  }
  for (int64_t r = 0; r < bq; ++r) {
    // A row with every key masked (m = -inf, l = 0) gives 0 with lse 0 (Note [Blocked attention]).
    const bool none = m[r] == neg_inf;
    const A sum = none ? A(1) : l[r];
    const A inv = A(1) / sum;
    const A* a = acc + r * Ev;
    A* o = out + (i0 + r) * ldo;
    for (int64_t e = 0; e < Ev; ++e) o[e] = a[e] * inv;
    lse[i0 + r] = (none ? A(0) : m[r]) + std::log(sum);
  }
}

// Note [Attention output layout]
// The output [*b, Hq, L, Ev] is written into storage laid out as [*b, L, Hq, Ev] and returned
// as that storage's transposed view, as PyTorch's flash kernels do: attention is followed by
// merging the heads, out.transpose(-3, -2).reshape(*b, L, Hq Ev), which is then a view rather
// than a copy. So a block's output projection saves the very storage this op saves as its
// output, and the graph keeps it once (gpt-long: 2 MiB per layer less, and one copy less in
// the forward). 16-bit results are rounded into a new contiguous tensor, as before. The meta
// kernel (meta_layers.cpp) gives the same layouts.
template <class T, class A>
AttentionForward forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const Tensor& seed, const AttentionSpec& spec) {
  Problem<T, A> p = make_problem<T, A>(q, k, v, mask, seed, spec);
  const std::size_t nd = q.shape().size();
  Shape rows_first = q.shape(), lse_shape = q.shape();
  rows_first[nd - 3] = p.L;
  rows_first[nd - 2] = p.heads_q;
  rows_first[nd - 1] = p.Ev;
  lse_shape.resize(nd - 1);
  Tensor out = make_empty(rows_first, dtype_of_v<A>);
  Tensor lse = make_empty(lse_shape, dtype_of_v<A>);
  A* op = out.numel() ? out.data_ptr<A>() : nullptr;
  A* lp = lse.numel() ? lse.data_ptr<A>() : nullptr;
  const int64_t ldo = p.heads_q * p.Ev;
  SingleThreadedBlas one;
  for_blocks(
      p.batch * p.heads_q, blocks_of(p.L, kQueryBlock), p.causal,
      [&] { return ForwardScratch<T, A>(p); },
      [&](ForwardScratch<T, A>& w, int64_t nh, int64_t qb) {
        const int64_t n = nh / p.heads_q, h = nh % p.heads_q;
        forward_block(p, nh, qb, w, op + n * p.L * ldo + h * p.Ev, ldo, lp + nh * p.L);
      });
  const Tensor heads_first =
      out.transpose(static_cast<int64_t>(nd) - 3, static_cast<int64_t>(nd) - 2);
  return {narrow_to(heads_first, q.dtype()), lse};
}

template <class T, class A>
struct BackwardScratch {
  std::vector<A> s, pd, ds, z, dk, dv, dq;
  std::vector<T> pt, dst;         // P ∘ Z and dS scale as T (Note [bfloat16 attention blocks])
  const T* p_operand = nullptr;   // P ∘ Z as the products take it
  const T* ds_operand = nullptr;  // dS scale likewise
  explicit BackwardScratch(const Problem<T, A>& p)
      : s(kQueryBlock * kKeyBlock),
        pd(kQueryBlock * kKeyBlock),
        ds(kQueryBlock * kKeyBlock),
        z(kKeyBlock),
        dk(kKeyBlock * std::max<int64_t>(p.E, 1)),
        dv(kKeyBlock * std::max<int64_t>(p.Ev, 1)),
        dq(kQueryBlock * std::max<int64_t>(p.E, 1)),
        pt(operand_buffer<T, A>(kQueryBlock * kKeyBlock)),
        dst(operand_buffer<T, A>(kQueryBlock * kKeyBlock)) {}
};

// The tensors of the backward besides the problem: dO's matrices, lse and D = rowsum(dO ∘ O).
template <class T, class A>
struct Cotangent {
  Matrices<T> dout;
  const A* lse = nullptr;
  std::vector<A> delta;
};

// rowsum(a ∘ b) of one row in double, bfloat16 read as float.
template <class T>
double row_dot(const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j)
      s += static_cast<double>(static_cast<float>(a[j])) * static_cast<float>(b[j]);
    return s;
  } else {
    return dot_double(a, b, n);
  }
}

// One block's probabilities and score gradients: w.s = P, w.pd = P ∘ Z (dropout's multipliers;
// P itself without dropout) and w.ds = dS scale, for query rows [i0, i0 + bq) and keys
// [j0, j0 + bk) of matrix nh, and w.p_operand and w.ds_operand pointing at P ∘ Z and dS scale as
// the products take them.
template <class T, class A>
void block_gradients(const Problem<T, A>& p, const Cotangent<T, A>& g, int64_t nh, int64_t i0,
                     int64_t bq, int64_t j0, int64_t bk, BackwardScratch<T, A>& w) {
  A* s = w.s.data();
  A* ds = w.ds.data();
  scores(p, nh, i0, bq, j0, bk, s);
  block_gemm(false, true, bq, bk, p.Ev, g.dout[nh] + i0 * g.dout.ld, g.dout.ld,
             p.v[p.kv_of(nh)] + j0 * p.v.ld, p.v.ld, A(0), ds, bk);
  const A* lse = g.lse + nh * p.L;
  const A* delta = g.delta.data() + nh * p.L;
  const int64_t n = nh / p.heads_q, h = nh % p.heads_q;
  const A scale = p.scale;
  for (int64_t r = 0; r < bq; ++r) {
    A* pr = s + r * bk;
    A* dr = ds + r * bk;
    simd_exp_shifted(pr, lse[i0 + r], pr, bk);
    const A d = delta[i0 + r];
    if (p.drop.on) {
      A* z = w.z.data();
      A* pdr = w.pd.data() + r * bk;
      p.drop.row(p.drop.row_key(n, h, i0 + r), j0, bk, p.keep, z);
      for (int64_t c = 0; c < bk; ++c) {
        pdr[c] = pr[c] * z[c];
        dr[c] = pr[c] * (dr[c] * z[c] - d) * scale;
      }
    } else {
      for (int64_t c = 0; c < bk; ++c) dr[c] = pr[c] * (dr[c] - d) * scale;
    }
  }
  w.p_operand = as_operand<T>(p.drop.on ? w.pd.data() : s, bq * bk, w.pt);
  w.ds_operand = as_operand<T>(ds, bq * bk, w.dst);
}

// dV += (P Z)ᵀ dO and dK += dSᵀ Q for one block (w as block_gradients left it).
template <class T, class A>
void add_key_gradients(const Problem<T, A>& p, const Cotangent<T, A>& g, int64_t nh, int64_t i0,
                       int64_t bq, int64_t bk, BackwardScratch<T, A>& w, A* dk, A* dv) {
  block_gemm(true, false, bk, p.Ev, bq, w.p_operand, bk, g.dout[nh] + i0 * g.dout.ld, g.dout.ld,
             A(1), dv, p.Ev);
  block_gemm(true, false, bk, p.E, bq, w.ds_operand, bk, p.q[nh] + i0 * p.q.ld, p.q.ld, A(1), dk,
             p.E);
}

// Note [Attention backward passes]
// With enough key/value heads for every thread (N Hkv >= 2 threads) one pass per head does it
// all: for each key block, the blocks of every query head of its group give dK and dV, and add
// dS K into dQ, which that task owns whole. With fewer, dK and dV come from a pass over key
// blocks and dQ from a second pass over query blocks (Note [Attention work split]), which forms
// each block's P and dS twice. Both passes use the same key blocks and add into each gradient
// row in the same order (dQ over key blocks ascending, dK and dV over query heads, then query
// blocks ascending), with products of the same shapes, so either way gives the same bits.
template <class T, class A>
Tensor backward_impl(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& out, const Tensor& lse, const Tensor& mask, const Tensor& seed,
                     const AttentionSpec& spec) {
  Problem<T, A> p = make_problem<T, A>(q, k, v, mask, seed, spec);
  const int64_t nq = q.numel(), nk = k.numel(), nv = v.numel();
  Tensor packed = make_empty({nq + nk + nv}, dtype_of_v<A>);
  if (packed.numel() == 0) return narrow_to(packed, q.dtype());
  A* dq = packed.data_ptr<A>();
  A* dk = dq + nq;
  A* dv = dk + nk;
  const int64_t heads = p.batch * p.heads_q, kv_heads = p.batch * p.heads_kv;
  Cotangent<T, A> g;
  g.dout = matrices<T>(dout);
  const Tensor lse_c = lse.is_contiguous() ? lse : cast(lse, lse.dtype());
  ADJOINT_CHECK(lse_c.dtype() == dtype_of_v<A> && lse_c.numel() == heads * p.L, Shape, kOp,
                "the saved log-sum-exp ", describe(lse), " does not fit q ", describe(q));
  g.lse = lse_c.numel() ? lse_c.data_ptr<A>() : nullptr;
  // D = rowsum(dO ∘ O), one per query row.
  g.delta.resize(static_cast<std::size_t>(heads * p.L));
  {
    const Matrices<T> o = matrices<T>(out);
    parallel_for(heads * p.L, std::max<int64_t>(1, 4096 / std::max<int64_t>(p.Ev, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     const int64_t nh = r / p.L, i = r % p.L;
                     g.delta[r] = static_cast<A>(
                         row_dot(g.dout[nh] + i * g.dout.ld, o[nh] + i * o.ld, p.Ev));
                   }
                 });
  }
  SingleThreadedBlas one;
  const int64_t key_blocks = blocks_of(p.S, kKeyBlock), query_blocks = blocks_of(p.L, kQueryBlock);
  // Key block kb of key/value head nkv: its dK and dV rows, and (with `dq_out`) dS K added into
  // dQ's rows of every query head of its group.
  auto key_block = [&](BackwardScratch<T, A>& w, int64_t nkv, int64_t kb, A* dq_out) {
    const int64_t j0 = kb * kKeyBlock, bk = std::min(kKeyBlock, p.S - j0);
    A* dk_acc = w.dk.data();
    A* dv_acc = w.dv.data();
    std::fill(dk_acc, dk_acc + bk * p.E, A(0));
    std::fill(dv_acc, dv_acc + bk * p.Ev, A(0));
    const int64_t n = nkv / p.heads_kv, kvh = nkv % p.heads_kv;
    const T* km = p.k[nkv] + j0 * p.k.ld;
    for (int64_t hh = 0; hh < p.group; ++hh) {
      const int64_t nh = n * p.heads_q + kvh * p.group + hh;
      for (int64_t i0 = p.first_query_block(j0) * kQueryBlock; i0 < p.L; i0 += kQueryBlock) {
        const int64_t bq = std::min(kQueryBlock, p.L - i0);
        block_gradients(p, g, nh, i0, bq, j0, bk, w);
        add_key_gradients(p, g, nh, i0, bq, bk, w, dk_acc, dv_acc);
        if (dq_out)
          block_gemm(false, false, bq, p.E, bk, w.ds_operand, bk, km, p.k.ld, A(1),
                     dq_out + (nh * p.L + i0) * p.E, p.E);
      }
    }
    std::memcpy(dk + (nkv * p.S + j0) * p.E, dk_acc, sizeof(A) * bk * p.E);
    std::memcpy(dv + (nkv * p.S + j0) * p.Ev, dv_acc, sizeof(A) * bk * p.Ev);
  };
  if (kv_heads >= 2 * static_cast<int64_t>(get_num_threads())) {
    std::fill(dq, dq + nq, A(0));
    parallel_for(kv_heads, 1, [&](int64_t t0, int64_t t1) {
      BackwardScratch<T, A> w(p);
      for (int64_t nkv = t0; nkv < t1; ++nkv)
        for (int64_t kb = 0; kb < key_blocks; ++kb) key_block(w, nkv, kb, dq);
    });
    return narrow_to(packed, q.dtype());
  }
  // dK and dV by key blocks of each key/value head, over the query heads of its group.
  for_blocks(
      kv_heads, key_blocks, p.causal, [&] { return BackwardScratch<T, A>(p); },
      [&](BackwardScratch<T, A>& w, int64_t nkv, int64_t kb) { key_block(w, nkv, kb, nullptr); });
  // dQ by query blocks, over the same key blocks as above.
  for_blocks(
      heads, query_blocks, p.causal, [&] { return BackwardScratch<T, A>(p); },
      [&](BackwardScratch<T, A>& w, int64_t nh, int64_t qb) {
        const int64_t i0 = qb * kQueryBlock, bq = std::min(kQueryBlock, p.L - i0);
        A* dq_acc = w.dq.data();
        std::fill(dq_acc, dq_acc + bq * p.E, A(0));
        const int64_t end = p.key_end(i0, bq);
        const T* km = p.k[p.kv_of(nh)];
        for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
          const int64_t bk = std::min(kKeyBlock, p.S - j0);
          block_gradients(p, g, nh, i0, bq, j0, bk, w);
          block_gemm(false, false, bq, p.E, bk, w.ds_operand, bk, km + j0 * p.k.ld, p.k.ld, A(1),
                     dq_acc, p.E);
        }
        std::memcpy(dq + (nh * p.L + i0) * p.E, dq_acc, sizeof(A) * bq * p.E);
      });
  return narrow_to(packed, q.dtype());
}

}  // namespace

AttentionForward cpu::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& mask, const Tensor& seed,
                                        const AttentionSpec& spec) {
  check_shapes(q, k, v, mask);
  if (q.dtype() == DType::Float64) return forward_impl<double, double>(q, k, v, mask, seed, spec);
  if (q.dtype() == DType::BFloat16 && bf16_blocks())
    return forward_impl<BFloat16, float>(q, k, v, mask, seed, spec);
  return forward_impl<float, float>(q, k, v, mask, seed, spec);  // float32, and 16-bit widened
}

Tensor cpu::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& mask, const Tensor& seed, const AttentionSpec& spec) {
  check_shapes(q, k, v, mask);
  Shape out_shape = q.shape();
  out_shape[out_shape.size() - 1] = v.size(-1);
  ADJOINT_CHECK(dout.shape() == out_shape && out.shape() == out_shape, Shape, kOp,
                "the output's gradient ", describe(dout), " and the output ", describe(out),
                " must have the output's shape ", out_shape);
  const Tensor g = dout.dtype() == q.dtype() ? dout : cast(dout, q.dtype());
  const Tensor o = out.dtype() == q.dtype() ? out : cast(out, q.dtype());
  if (q.dtype() == DType::Float64)
    return backward_impl<double, double>(g, q, k, v, o, lse, mask, seed, spec);
  if (q.dtype() == DType::BFloat16 && bf16_blocks())
    return backward_impl<BFloat16, float>(g, q, k, v, o, lse, mask, seed, spec);
  return backward_impl<float, float>(g, q, k, v, o, lse, mask, seed, spec);
}

Tensor cpu::attention_dropout_scale(const Tensor& seed, const Shape& scores, double p,
                                    DType dtype) {
  ADJOINT_CHECK(scores.size() >= 3 && is_floating(dtype), Shape, kOp,
                "dropout multipliers need scores [*b, H, L, S] of a floating dtype, got ", scores,
                " (", dtype, ")");
  const std::size_t nd = scores.size();
  int64_t batch = 1;
  for (std::size_t d = 0; d + 3 < nd; ++d) batch *= scores[d];
  const int64_t heads = scores[nd - 3], L = scores[nd - 2], S = scores[nd - 1];
  const bool wide = dtype == DType::Float64;
  Tensor out = make_empty(scores, wide ? DType::Float64 : DType::Float32);
  if (out.numel() == 0) return narrow_to(out, dtype);
  const DropoutDraws d = dropout_draws(seed, p, batch, heads, L);
  auto fill_rows = [&]<class A>(A* o) {
    parallel_for(batch * heads * L, std::max<int64_t>(1, 8192 / std::max<int64_t>(S, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     A* row = o + r * S;
                     if (!d.on) {
                       std::fill(row, row + S, A(1));
                       continue;
                     }
                     const int64_t i = r % L, h = (r / L) % heads, n = r / (L * heads);
                     d.row(d.row_key(n, h, i), 0, S, static_cast<A>(d.keep_scale), row);
                   }
                 });
  };
  if (wide)
    fill_rows(out.data_ptr<double>());
  else
    fill_rows(out.data_ptr<float>());
  return narrow_to(out, dtype);
}

}  // namespace adjoint::kernels
