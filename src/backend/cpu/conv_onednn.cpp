// The convolutions of conv_kernels.h on oneDNN's convolution primitives (Debian's libdnnl 2.6):
// forward, backward-data and backward-weights, float32 and bfloat16 (float32 accumulation),
// one primitive per problem, cached per thread. The reference loops are conv_reference.cpp's.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/conv_paths.h"
#include "backend/kernels.h"
#include "core/memory_format.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

#ifdef ADJOINT_HAVE_ONEDNN
#include "backend/cpu/onednn_cpu.h"

namespace adjoint::kernels::conv {
namespace {

// Note [Convolution memory format]
// adjoint's tensors are plain: NCHW when contiguous, or NHWC for a dense channels-last view
// (C innermost, PyTorch's channels_last), which a convolution's output keeps, as PyTorch's
// memory-format propagation does (other strides are copied to NCHW first). oneDNN's fast
// kernels do not read plain NCHW: given it, oneDNN 2.6 picks its gemm-based convolution
// (im2col inside), which ran 1.4-2.5x slower here than its direct jit kernels on the blocked
// layout nChw16c, with the reorders to and from it paid (docs/vision.md has the table). So
// plain NCHW activations are handed to the primitive in the layout it picks (format `any`),
// and reordered into it before every call and back after. The exception is a first layer
// (fewer than 8 input channels, as an image's 1 or 3): there the gemm kernels on NCHW ran 2.7x
// faster than the blocked ones with their reorders ([64, 1, 28, 28] to 16 channels: 6.7
// against 18.1 ms forward and backward on one thread), so NCHW stays. Channels-last activations go
// in as NHWC, which oneDNN's brgconv kernels read directly (no reorder). The weights are small (a
// 3x3 conv of 64 channels is 147 KB) and always go to the primitive's blocked layout and back (the
// weight gradient). A layout that stayed blocked from one op to the next would save the activation
// reorders too; it would need tensors that carry oneDNN layouts through every other kernel, and is
// not done. ADJOINT_CONV_LAYOUT=plain (read once) keeps NCHW for the primitive, for that
// comparison. Threading follows Note [Gemm threading]: the batch is cut into one fixed piece per
// pool thread and each piece runs a primitive on one OpenMP thread, so results do not depend on
// timing; the weight gradient sums the pieces' float32 partial gradients in piece order.

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dt onednn_type(DType d) { return d == DType::BFloat16 ? dt::bf16 : dt::f32; }

bool isa_has_bf16() {
  const dnnl::cpu_isa isa = onednn_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

int64_t volume(const std::array<int64_t, 3>& a) { return a[0] * a[1] * a[2]; }

// Element strides of a dense [N, C, *sp] tensor in the plain (NCHW) or channels-last layout.
Shape layout_strides(const Shape& shape, bool channels_last) {
  return channels_last ? channels_last_strides(shape) : contiguous_strides(shape);
}

// A fresh tensor of `shape` laid out as asked (not a view: its own storage).
Tensor empty_in_layout(const Shape& shape, DType dtype, bool channels_last) {
  return channels_last ? empty_channels_last(shape, dtype) : make_empty(shape, dtype);
}

// t dense in the layout: itself when it is, else a copy.
Tensor in_layout(const Tensor& t, bool channels_last) {
  if (channels_last ? is_channels_last(t) : t.is_contiguous()) return t;
  Tensor out = empty_in_layout(t.shape(), t.dtype(), channels_last);
  copy_into(out, t);
  return out;
}

// Memory descriptors of one piece of the batch (n samples): the tensors' own (plain) layouts,
// and what the primitive is asked for (`any` where oneDNN may choose: see Note [Convolution
// memory format]).
struct Descs {
  dnnl::memory::desc src, dst, wei, bias;        // the tensors' layouts
  dnnl::memory::desc src_any, dst_any, wei_any;  // the primitive's request
  dims strides, dilates, pad_l, pad_r;
};

dims spatial_of(const Problem& p, const std::array<int64_t, 3>& a, int64_t minus = 0) {
  dims d;
  for (int i = 3 - p.spatial; i < 3; ++i) d.push_back(a[i] - minus);
  return d;
}

dnnl::memory::desc activation_md(const Problem& p, int64_t n, int64_t channels,
                                 const std::array<int64_t, 3>& sp, dt type, bool cl) {
  Shape shape{n, channels};
  for (int64_t s : spatial_of(p, sp)) shape.push_back(s);
  const Shape st = layout_strides(shape, cl);
  return dnnl::memory::desc(dims(shape.begin(), shape.end()), type, dims(st.begin(), st.end()));
}

dnnl::memory::desc any_like(const dnnl::memory::desc& md) {
  return dnnl::memory::desc(md.dims(), md.data_type(), dnnl::memory::format_tag::any);
}

// Below this many input channels (an image's first layer: 1 or 3) plain NCHW wins: see Note
// [Convolution memory format].
constexpr int64_t kBlockedMinChannels = 8;

// ADJOINT_CONV_LAYOUT=plain: see Note [Convolution memory format].
bool plain_activations() {
  static const bool plain = [] {
    const char* v = std::getenv("ADJOINT_CONV_LAYOUT");
    return v != nullptr && std::string(v) == "plain";
  }();
  return plain;
}

Descs make_descs(const Problem& p, int64_t n, dt type, dt wei_type, bool cl, bool bias) {
  Descs d;
  const bool keep = cl || plain_activations() || p.c < kBlockedMinChannels;
  d.src = activation_md(p, n, p.c, p.in, type, cl);
  d.dst = activation_md(p, n, p.o, p.out, type, cl);
  // Channels-last activations stay as they are (oneDNN's brgconv kernels read NHWC); plain
  // NCHW ones go to the blocked layout the primitive picks.
  d.src_any = keep ? d.src : any_like(d.src);
  d.dst_any = keep ? d.dst : any_like(d.dst);
  dims wd;
  if (p.groups > 1) wd.push_back(p.groups);
  wd.push_back(p.o / p.groups);
  wd.push_back(p.c / p.groups);
  for (int64_t k : spatial_of(p, p.k)) wd.push_back(k);
  Shape wshape(std::vector<int64_t>(wd.begin(), wd.end()));
  const Shape wst = contiguous_strides(wshape);
  d.wei = dnnl::memory::desc(wd, wei_type, dims(wst.begin(), wst.end()));
  d.wei_any = any_like(d.wei);
  if (bias) d.bias = dnnl::memory::desc({p.o}, dt::f32, dnnl::memory::format_tag::a);
  d.strides = spatial_of(p, p.stride);
  d.dilates = spatial_of(p, p.dilation, 1);  // oneDNN counts the gaps: dilation - 1
  d.pad_l = spatial_of(p, p.pad_l);
  d.pad_r = spatial_of(p, p.pad_r);
  return d;
}

// Note [Convolution algorithm]
// The primitives are made with convolution_auto, which lets oneDNN pick its Winograd kernels
// (float32 3x3 stride-1 convolutions on AVX-512) where its heuristic judges them faster than
// direct ones, and direct kernels elsewhere (bfloat16 always). The weight gradient asks for
// Winograd outright, since auto never chose it there. Winograd's transforms round
// differently from a direct sum; tests/ops/conv_kernels_test.cpp holds both choices to the
// reference loops (ctest runs it once more under ADJOINT_CONV_ALGO=direct).
// ADJOINT_CONV_ALGO=direct (read once) forces direct kernels, for comparison and for tests
// that pin the path. The choice is fixed per process, so the primitive cache needs no key for
// it, and the results still do not depend on the thread count (each piece is one primitive).
dnnl::algorithm conv_algorithm() {
  static const dnnl::algorithm algo = [] {
    const char* v = std::getenv("ADJOINT_CONV_ALGO");
    return v != nullptr && std::string(v) == "direct" ? dnnl::algorithm::convolution_direct
                                                      : dnnl::algorithm::convolution_auto;
  }();
  return algo;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d) {
  const auto prop = dnnl::prop_kind::forward_training;
  const auto algo = conv_algorithm();
  const dnnl::convolution_forward::desc desc =
      d.bias.is_zero()
          ? dnnl::convolution_forward::desc(prop, algo, d.src_any, d.wei_any, d.dst_any, d.strides,
                                            d.dilates, d.pad_l, d.pad_r)
          : dnnl::convolution_forward::desc(prop, algo, d.src_any, d.wei_any, d.bias, d.dst_any,
                                            d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, onednn_engine());
}

// One argument of a cached primitive: the tensor's layout, the primitive's, and the reorder
// between them where they differ (tensor to primitive for an input, back for an output).
struct Arg {
  int id;
  dnnl::memory::desc user, prim;
  bool output;
  std::optional<dnnl::reorder> reorder;
};
Arg make_arg(int id, const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool output) {
  Arg a{id, user, prim, output, std::nullopt};
  const dnnl::engine& eng = onednn_engine();
  if (user != prim)
    a.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(eng, prim, eng, user))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(eng, user, eng, prim));
  return a;
}

// A cached primitive with its arguments in the order the callers pass their pointers.
struct Entry {
  dnnl::primitive prim;
  std::vector<Arg> args;
};

enum Kind : int64_t { kForward, kBackwardData, kBackwardWeight };

std::vector<int64_t> key_of(Kind kind, const Problem& p, int64_t n, dt type, bool cl, bool bias) {
  std::vector<int64_t> key{kind, static_cast<int64_t>(type), n, p.c, p.o, p.groups, p.spatial, cl,
                           bias};
  for (const auto* a : {&p.in, &p.k, &p.stride, &p.pad_l, &p.pad_r, &p.dilation})
    key.insert(key.end(), a->begin(), a->end());
  return key;
}

// Arguments: forward (src, weights, [bias], dst); backward-data (diff_dst, weights, diff_src);
// backward-weights (src, diff_dst, diff_weights in float32).
Entry make_entry(Kind kind, const Problem& p, int64_t n, dt type, bool cl, bool bias) {
  const dnnl::engine& eng = onednn_engine();
  if (kind == kBackwardWeight) {
    const Descs d = make_descs(p, n, type, dt::f32, cl, false);  // float32 weight gradient
    const Descs h = make_descs(p, n, type, type, cl, false);
    // convolution_auto did not take Winograd for the weight gradient in oneDNN 2.6, where it
    // has one (float32, 3x3 stride 1), though it halved that primitive's time on the cnn
    // workload's layers: ask for it first and fall back to auto where it is refused. See
    // Note [Convolution algorithm].
    auto weights_pd = [&](dnnl::algorithm algo) {
      const dnnl::convolution_backward_weights::desc desc(algo, d.src_any, d.wei_any, d.dst_any,
                                                          d.strides, d.dilates, d.pad_l, d.pad_r);
      return dnnl::convolution_backward_weights::primitive_desc(desc, eng, forward_pd(h));
    };
    std::optional<dnnl::convolution_backward_weights::primitive_desc> wino;
    if (conv_algorithm() == dnnl::algorithm::convolution_auto && type == dt::f32) {
      try {
        wino = weights_pd(dnnl::algorithm::convolution_winograd);
      } catch (const dnnl::error&) {
      }
    }
    const dnnl::convolution_backward_weights::primitive_desc pd =
        wino ? *wino : weights_pd(conv_algorithm());
    return {dnnl::convolution_backward_weights(pd),
            {make_arg(DNNL_ARG_SRC, d.src, pd.src_desc(), false),
             make_arg(DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false),
             make_arg(DNNL_ARG_DIFF_WEIGHTS, d.wei, pd.diff_weights_desc(), true)}};
  }
  const Descs d = make_descs(p, n, type, type, cl, bias);
  const auto fwd = forward_pd(d);
  if (kind == kForward) {
    Entry e{dnnl::convolution_forward(fwd),
            {make_arg(DNNL_ARG_SRC, d.src, fwd.src_desc(), false),
             make_arg(DNNL_ARG_WEIGHTS, d.wei, fwd.weights_desc(), false)}};
    if (bias) e.args.push_back(make_arg(DNNL_ARG_BIAS, d.bias, fwd.bias_desc(), false));
    e.args.push_back(make_arg(DNNL_ARG_DST, d.dst, fwd.dst_desc(), true));
    return e;
  }
  const dnnl::convolution_backward_data::desc desc(
      conv_algorithm(), d.src_any, d.wei_any, d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r);
  const dnnl::convolution_backward_data::primitive_desc pd(desc, eng, fwd);
  return {dnnl::convolution_backward_data(pd),
          {make_arg(DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false),
           make_arg(DNNL_ARG_WEIGHTS, d.wei, pd.weights_desc(), false),
           make_arg(DNNL_ARG_DIFF_SRC, d.src, pd.diff_src_desc(), true)}};
}

// This thread's primitive for the problem (made on first use; the cache is bounded).
Entry& entry(Kind kind, const Problem& p, int64_t n, dt type, bool cl, bool bias) {
  thread_local std::map<std::vector<int64_t>, Entry> cache;
  const std::vector<int64_t> key = key_of(kind, p, n, type, cl, bias);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 256) cache.clear();
    it = cache.emplace(key, make_entry(kind, p, n, type, cl, bias)).first;
  }
  return it->second;
}

// Runs e on the tensors' memory at `ptrs` (one per argument, in e.args' order): inputs
// reordered into the primitive's layouts first, outputs reordered back after.
void execute(Entry& e, const std::vector<void*>& ptrs, dnnl::stream& stream) {
  const dnnl::engine& eng = onednn_engine();
  std::unordered_map<int, dnnl::memory> args;
  std::vector<std::pair<std::size_t, dnnl::memory>> outputs;
  for (std::size_t i = 0; i < e.args.size(); ++i) {
    Arg& a = e.args[i];
    dnnl::memory user(a.user, eng, ptrs[i]);
    if (!a.reorder) {
      args.emplace(a.id, user);
      continue;
    }
    dnnl::memory mine(a.prim, eng);
    if (a.output)
      outputs.emplace_back(i, mine);
    else
      a.reorder->execute(stream, user, mine);
    args.emplace(a.id, mine);
  }
  e.prim.execute(stream, args);
  for (auto& [i, mine] : outputs) {
    dnnl::memory user(e.args[i].user, eng, ptrs[i]);
    e.args[i].reorder->execute(stream, mine, user);
  }
  stream.wait();  // the reordered buffers live only here
}

// The batch cut into pieces (one per pool thread, at least ~2 MFLOP each): piece i is
// [begin(i), begin(i + 1)).
struct Pieces {
  int count;
  int64_t n;
  int64_t begin(int i) const { return n * i / count; }
};
Pieces pieces_of(const Problem& p) {
  const int64_t flops = 2 * p.o * (p.c / p.groups) * volume(p.k) * volume(p.out);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / std::max<int64_t>(flops, 1));
  return {std::max(parallel_chunks(p.n, grain), 1), p.n};
}

template <class F>
void for_each_piece(const Pieces& pieces, F&& f) {
  parallel_for(pieces.count, 1, [&](int64_t i0, int64_t i1) {
    onednn_one_thread_here();
    thread_local dnnl::stream stream(onednn_engine());
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = pieces.begin(static_cast<int>(i)),
                    e = pieces.begin(static_cast<int>(i) + 1);
      if (e > b) f(static_cast<int>(i), b, e - b, stream);
    }
  });
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.impl()->data()); }
void* at_sample(const Tensor& t, int64_t n0) {
  return bytes(t) + n0 * t.strides()[0] * static_cast<int64_t>(itemsize(t.dtype()));
}

}  // namespace

bool onednn_fits(const Problem& p) {
  // oneDNN takes no negative right padding (a transposed convolution's output_padding beyond
  // padding + stride - 1 gives one) and no empty dims (nothing to compute, or a sum of nothing).
  for (int i = 0; i < 3; ++i)
    if (p.pad_r[i] < 0) return false;
  return p.n > 0 && p.c > 0 && p.o > 0 && volume(p.out) > 0;
}

bool onednn_supports(DType dtype) {
  if (dtype == DType::Float32) return true;
  return dtype == DType::BFloat16 && isa_has_bf16();
}

const char* onednn_name() {
  static const std::string name = std::string("onednn:") + onednn_isa_name();
  return name.c_str();
}

Tensor onednn_forward(const Problem& p, const Tensor& x_in, const Tensor& w_in,
                      const Tensor& b_in) {
  const bool cl = is_channels_last(x_in);
  Shape out_shape{p.n, p.o};
  for (int64_t s : spatial_of(p, p.out)) out_shape.push_back(s);
  Tensor y = empty_in_layout(out_shape, x_in.dtype(), cl);
  if (y.numel() == 0) return y;
  const Tensor x = in_layout(x_in, cl), w = in_layout(w_in, false);
  const Tensor b = b_in.defined() ? cast(b_in, DType::Float32) : Tensor();
  const dt type = onednn_type(x.dtype());
  for_each_piece(pieces_of(p), [&](int, int64_t n0, int64_t n, dnnl::stream& stream) {
    std::vector<void*> ptrs{at_sample(x, n0), bytes(w)};
    if (b.defined()) ptrs.push_back(bytes(b));
    ptrs.push_back(at_sample(y, n0));
    execute(entry(kForward, p, n, type, cl, b.defined()), ptrs, stream);
  });
  return y;
}

Tensor onednn_backward_data(const Problem& p, const Tensor& gy_in, const Tensor& w_in) {
  const bool cl = is_channels_last(gy_in);
  Shape in_shape{p.n, p.c};
  for (int64_t s : spatial_of(p, p.in)) in_shape.push_back(s);
  Tensor gx = empty_in_layout(in_shape, gy_in.dtype(), cl);
  if (gx.numel() == 0) return gx;
  const Tensor gy = in_layout(gy_in, cl), w = in_layout(w_in, false);
  const dt type = onednn_type(gy.dtype());
  for_each_piece(pieces_of(p), [&](int, int64_t n0, int64_t n, dnnl::stream& stream) {
    execute(entry(kBackwardData, p, n, type, cl, false),
            {at_sample(gy, n0), bytes(w), at_sample(gx, n0)}, stream);
  });
  return gx;
}

Tensor onednn_backward_weight(const Problem& p, const Tensor& x_in, const Tensor& gy_in) {
  Shape w_shape{p.o, p.c / p.groups};
  for (int64_t s : spatial_of(p, p.k)) w_shape.push_back(s);
  const bool cl = is_channels_last(x_in);
  const Tensor x = in_layout(x_in, cl), gy = in_layout(gy_in, cl);
  const dt type = onednn_type(x.dtype());
  const Pieces pieces = pieces_of(p);
  // One float32 partial gradient per piece, summed in piece order below.
  Shape partial_shape{pieces.count};
  for (int64_t s : w_shape) partial_shape.push_back(s);
  Tensor partial = make_empty(partial_shape, DType::Float32);
  const int64_t wn = w_shape.numel();
  float* acc = partial.data_ptr<float>();
  for_each_piece(pieces, [&](int i, int64_t n0, int64_t n, dnnl::stream& stream) {
    execute(entry(kBackwardWeight, p, n, type, cl, false),
            {at_sample(x, n0), at_sample(gy, n0), acc + i * wn}, stream);
  });
  for (int i = 1; i < pieces.count; ++i)
    for (int64_t j = 0; j < wn; ++j) acc[j] += acc[i * wn + j];
  return cast(make_view(partial, w_shape, contiguous_strides(w_shape), 0), x_in.dtype());
}

}  // namespace adjoint::kernels::conv
#endif
