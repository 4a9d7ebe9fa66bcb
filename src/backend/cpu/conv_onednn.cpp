// The convolutions of conv_kernels.h on oneDNN's convolution primitives (Debian's libdnnl 2.6):
// forward, backward-data and backward-weights, float32 and bfloat16 (float32 accumulation),
// one primitive per problem, cached per thread. The reference loops are conv_reference.cpp's.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/conv_paths.h"
#include "backend/kernels.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

#ifdef ADJOINT_HAVE_ONEDNN
#include "backend/cpu/onednn_cpu.h"

namespace adjoint::kernels::conv {
namespace {

// Note [Convolution memory format]
// Activations (src, dst and their gradients) stay in the layout the caller's tensor has: plain
// NCHW for a contiguous tensor, NHWC for a dense channels-last one (C innermost, as PyTorch's
// channels_last), and the output takes the input's layout, as PyTorch's memory-format
// propagation does; any other strides are copied to NCHW first. oneDNN's primitives read and
// write these plain layouts directly, so no reorder is paid on activations. The weights are
// small (a 3x3 conv of 64 channels is 147 KB), so they are handed to the primitive in whatever
// layout oneDNN prefers (format `any`, in practice a blocked OIhw16i16o-like one) and reordered
// from the plain OIHW tensor at every call, and the weight gradient is reordered back. A blocked
// activation layout (nChw16c) was measured too and lost: the reorders in and out of every
// convolution cost more than the blocked kernels saved at these sizes (docs/vision.md has the
// table). Threading follows Note [Gemm threading]: the batch is cut into one fixed piece per
// pool thread and each piece runs a primitive on one OpenMP thread, so results do not depend
// on timing; the weight gradient sums the pieces' partial gradients in piece order.

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dt onednn_type(DType d) { return d == DType::BFloat16 ? dt::bf16 : dt::f32; }

bool isa_has_bf16() {
  const dnnl::cpu_isa isa = onednn_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

int64_t volume(const std::array<int64_t, 3>& a) { return a[0] * a[1] * a[2]; }

// Whether t [N, C, *sp] is dense with C innermost (channels-last); a single channel is plain.
bool is_channels_last(const Tensor& t) {
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  if (s.size() < 3 || s[1] <= 1 || t.is_contiguous()) return false;
  if (st[1] != 1) return false;
  int64_t expect = s[1];
  for (std::size_t d = s.size() - 1; d >= 2; --d) {
    if (s[d] != 1 && st[d] != expect) return false;
    expect *= s[d];
  }
  return s[0] == 1 || st[0] == expect;
}

// Element strides of a dense [N, C, *sp] tensor in the plain (NCHW) or channels-last layout.
Shape layout_strides(const Shape& shape, bool channels_last) {
  if (!channels_last) return contiguous_strides(shape);
  Shape st(shape.size());
  int64_t s = shape[1];
  st[1] = 1;
  for (std::size_t d = shape.size() - 1; d >= 2; --d) {
    st[d] = s;
    s *= shape[d];
  }
  st[0] = s;
  return st;
}

// A fresh tensor of `shape` laid out as asked (not a view: its own storage).
Tensor empty_in_layout(const Shape& shape, DType dtype, bool channels_last) {
  Tensor t = make_empty(shape, dtype);
  if (channels_last) {
    t.impl()->strides = layout_strides(shape, true);
    t.impl()->refresh();
  }
  return t;
}

// t dense in the layout: itself when it is, else a copy.
Tensor in_layout(const Tensor& t, bool channels_last) {
  if (channels_last ? is_channels_last(t) : t.is_contiguous()) return t;
  Tensor out = empty_in_layout(t.shape(), t.dtype(), channels_last);
  copy_into(out, t);
  return out;
}

// Memory descriptors of one piece of the batch (n samples).
struct Descs {
  dnnl::memory::desc src, dst, wei_any, wei_plain, bias;
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

Descs make_descs(const Problem& p, int64_t n, dt type, dt wei_type, bool cl, bool bias) {
  Descs d;
  d.src = activation_md(p, n, p.c, p.in, type, cl);
  d.dst = activation_md(p, n, p.o, p.out, type, cl);
  dims wd;
  if (p.groups > 1) wd.push_back(p.groups);
  wd.push_back(p.o / p.groups);
  wd.push_back(p.c / p.groups);
  for (int64_t k : spatial_of(p, p.k)) wd.push_back(k);
  Shape wshape(std::vector<int64_t>(wd.begin(), wd.end()));
  const Shape wst = contiguous_strides(wshape);
  d.wei_plain = dnnl::memory::desc(wd, wei_type, dims(wst.begin(), wst.end()));
  d.wei_any = dnnl::memory::desc(wd, wei_type, dnnl::memory::format_tag::any);
  if (bias) d.bias = dnnl::memory::desc({p.o}, dt::f32, dnnl::memory::format_tag::a);
  d.strides = spatial_of(p, p.stride);
  d.dilates = spatial_of(p, p.dilation, 1);  // oneDNN counts the gaps: dilation - 1
  d.pad_l = spatial_of(p, p.pad_l);
  d.pad_r = spatial_of(p, p.pad_r);
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d) {
  const dnnl::convolution_forward::desc desc =
      d.bias.is_zero()
          ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, d.src, d.wei_any,
                                            d.dst, d.strides, d.dilates, d.pad_l, d.pad_r)
          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, d.src, d.wei_any,
                                            d.bias, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, onednn_engine());
}

// A cached primitive with the layout it wants its weights (or weight gradient) in, and the
// reorder between that and the plain OIHW tensor when they differ.
struct Entry {
  dnnl::primitive prim;
  dnnl::memory::desc wei;
  std::optional<dnnl::reorder> reorder;
};

enum Kind : int64_t { kForward, kBackwardData, kBackwardWeight };

std::vector<int64_t> key_of(Kind kind, const Problem& p, int64_t n, dt type, bool cl, bool bias) {
  std::vector<int64_t> key{kind, static_cast<int64_t>(type), n, p.c, p.o, p.groups, p.spatial, cl,
                           bias};
  for (const auto* a : {&p.in, &p.k, &p.stride, &p.pad_l, &p.pad_r, &p.dilation})
    key.insert(key.end(), a->begin(), a->end());
  return key;
}

Entry make_entry(Kind kind, const Problem& p, int64_t n, dt type, bool cl, bool bias) {
  const dnnl::engine& eng = onednn_engine();
  if (kind == kBackwardWeight) {
    Descs d = make_descs(p, n, type, dt::f32, cl, false);  // float32 weight gradient
    const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                        d.wei_any, d.dst, d.strides, d.dilates,
                                                        d.pad_l, d.pad_r);
    Descs h = make_descs(p, n, type, type, cl, false);
    const auto hint = forward_pd(h);
    const dnnl::convolution_backward_weights::primitive_desc pd(desc, eng, hint);
    Entry e{dnnl::convolution_backward_weights(pd), pd.diff_weights_desc(), std::nullopt};
    if (e.wei != d.wei_plain)
      e.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e.wei, eng, d.wei_plain));
    return e;
  }
  const Descs d = make_descs(p, n, type, type, cl, bias);
  const auto fwd = forward_pd(d);
  if (kind == kForward) {
    Entry e{dnnl::convolution_forward(fwd), fwd.weights_desc(), std::nullopt};
    if (e.wei != d.wei_plain)
      e.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, d.wei_plain, eng, e.wei));
    return e;
  }
  const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                   d.wei_any, d.dst, d.strides, d.dilates, d.pad_l,
                                                   d.pad_r);
  const dnnl::convolution_backward_data::primitive_desc pd(desc, eng, fwd);
  Entry e{dnnl::convolution_backward_data(pd), pd.weights_desc(), std::nullopt};
  if (e.wei != d.wei_plain)
    e.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, d.wei_plain, eng, e.wei));
  return e;
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

// The batch cut into pieces (one per pool thread, at least ~1 MFLOP each): piece i is
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
      stream.wait();  // the piece's reordered weights live only in f
    }
  });
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.impl()->data()); }
void* at_sample(const Tensor& t, int64_t n0) {
  return bytes(t) + n0 * t.strides()[0] * static_cast<int64_t>(itemsize(t.dtype()));
}

// The weights in the layout `e` wants: the plain tensor's memory, or a reordered copy.
dnnl::memory weights_for(Entry& e, const dnnl::memory::desc& plain, const Tensor& w,
                         dnnl::stream& stream) {
  dnnl::memory user(plain, onednn_engine(), bytes(w));
  if (!e.reorder) return user;
  dnnl::memory blocked(e.wei, onednn_engine());
  e.reorder->execute(stream, user, blocked);
  return blocked;
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
    Entry& e = entry(kForward, p, n, type, cl, b.defined());
    const Descs d = make_descs(p, n, type, type, cl, b.defined());
    const dnnl::engine& eng = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(d.src, eng, at_sample(x, n0))},
        {DNNL_ARG_WEIGHTS, weights_for(e, d.wei_plain, w, stream)},
        {DNNL_ARG_DST, dnnl::memory(d.dst, eng, at_sample(y, n0))}};
    if (b.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(d.bias, eng, bytes(b)));
    e.prim.execute(stream, args);
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
    Entry& e = entry(kBackwardData, p, n, type, cl, false);
    const Descs d = make_descs(p, n, type, type, cl, false);
    const dnnl::engine& eng = onednn_engine();
    e.prim.execute(stream, {{DNNL_ARG_DIFF_DST, dnnl::memory(d.dst, eng, at_sample(gy, n0))},
                            {DNNL_ARG_WEIGHTS, weights_for(e, d.wei_plain, w, stream)},
                            {DNNL_ARG_DIFF_SRC, dnnl::memory(d.src, eng, at_sample(gx, n0))}});
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
  for_each_piece(pieces, [&](int i, int64_t n0, int64_t n, dnnl::stream& stream) {
    Entry& e = entry(kBackwardWeight, p, n, type, cl, false);
    const Descs d = make_descs(p, n, type, dt::f32, cl, false);
    const dnnl::engine& eng = onednn_engine();
    dnnl::memory plain(d.wei_plain, eng, partial.data_ptr<float>() + i * wn);
    dnnl::memory gw = e.reorder ? dnnl::memory(e.wei, eng) : plain;
    e.prim.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(d.src, eng, at_sample(x, n0))},
                            {DNNL_ARG_DIFF_DST, dnnl::memory(d.dst, eng, at_sample(gy, n0))},
                            {DNNL_ARG_DIFF_WEIGHTS, gw}});
    if (e.reorder) e.reorder->execute(stream, gw, plain);
  });
  float* acc = partial.data_ptr<float>();
  for (int i = 1; i < pieces.count; ++i)
    for (int64_t j = 0; j < wn; ++j) acc[j] += acc[i * wn + j];
  Tensor first = make_view(partial, w_shape, contiguous_strides(w_shape), 0);
  return cast(first, x_in.dtype());
}

}  // namespace adjoint::kernels::conv
#endif
