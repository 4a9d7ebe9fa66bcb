#include "backend/cpu/reused_product.h"

#include <cblas.h>

#include "adjoint/error.h"
#include "backend/cpu/onednn_cpu.h"
#include "backend/cpu/sgemm.h"

namespace adjoint::kernels {

// Note [Reused right operands]
// A step of an LSTM sequence multiplies the state [B, H] by a piece of W_hh, 64 times in a row
// with the same piece. OpenBLAS (and dnnl_sgemm) packs B anew at every call, which for the
// lstm benchmark's shapes (B 32, k 512, n 1024 or 2048) is a large part of the call:
// single-threaded on a Sapphire Rapids class Xeon they ran at 60-85 GFLOP/s, where a oneDNN
// matmul primitive made once per sequence, with B reordered once into the layout it chooses
// (format `any`), ran at 112-134. So float32 products take that primitive wherever float32
// products may run on oneDNN at all (sgemm_path() is not OpenBlas, as for sgemm_block: AVX-512
// CPUs and CPUs whose OpenBLAS core is too old); elsewhere, and for float64, each call is a
// plain BLAS product on B as it is. One primitive runs on one thread (onednn_one_thread_here),
// and its result depends only on the shape, never on timing.

#ifdef ADJOINT_HAVE_ONEDNN
template <class T>
struct ReusedProduct<T>::Packed {
  dnnl::matmul primitive;
  dnnl::memory weights;
  mutable dnnl::memory a, c;
};
#else
template <class T>
struct ReusedProduct<T>::Packed {};
#endif

template <class T>
ReusedProduct<T>::ReusedProduct(int64_t m, int64_t n, int64_t k, const T* b, int64_t ldb,
                                bool trans_b, int64_t lda, int64_t ldc, bool accumulate)
    : m_(m),
      n_(n),
      k_(k),
      ldb_(ldb),
      lda_(lda),
      ldc_(ldc),
      b_(b),
      trans_b_(trans_b),
      accumulate_(accumulate) {
#ifdef ADJOINT_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_path() == SgemmPath::OpenBlas || m <= 0 || n <= 0 || k <= 0) return;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    onednn_isa();  // the ISA cap before oneDNN's first JIT
    onednn_one_thread_here();
    dnnl::engine& eng = onednn_engine();
    const dnnl::memory::desc a_md(dims{m, k}, dt::f32, dims{lda, 1});
    const dnnl::memory::desc b_user(dims{k, n}, dt::f32, trans_b ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc b_any(dims{k, n}, dt::f32, dnnl::memory::format_tag::any);
    const dnnl::memory::desc c_md(dims{m, n}, dt::f32, dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), attr, eng);
    auto p = std::make_unique<Packed>(Packed{dnnl::matmul(pd), dnnl::memory(pd.weights_desc(), eng),
                                             dnnl::memory(a_md, eng, DNNL_MEMORY_NONE),
                                             dnnl::memory(c_md, eng, DNNL_MEMORY_NONE)});
    dnnl::memory user(b_user, eng, const_cast<float*>(b));
    dnnl::stream stream(eng);
    dnnl::reorder(user, p->weights).execute(stream, user, p->weights);
    stream.wait();
    packed_ = std::move(p);
  }
#endif
}

template <class T>
ReusedProduct<T>::~ReusedProduct() = default;
template <class T>
ReusedProduct<T>::ReusedProduct(ReusedProduct&&) noexcept = default;
template <class T>
ReusedProduct<T>& ReusedProduct<T>::operator=(ReusedProduct&&) noexcept = default;

template <class T>
void ReusedProduct<T>::run(const T* a, T* c) const {
  if (m_ <= 0 || n_ <= 0) return;
#ifdef ADJOINT_HAVE_ONEDNN
  if (packed_) {
    onednn_one_thread_here();
    thread_local dnnl::stream stream(onednn_engine());
    packed_->a.set_data_handle(const_cast<T*>(a));
    packed_->c.set_data_handle(c);
    packed_->primitive.execute(stream, {{DNNL_ARG_SRC, packed_->a},
                                        {DNNL_ARG_WEIGHTS, packed_->weights},
                                        {DNNL_ARG_DST, packed_->c}});
    stream.wait();
    return;
  }
#endif
  const T beta = accumulate_ ? T(1) : T(0);
  if (k_ <= 0) {
    if (!accumulate_)
      for (int64_t i = 0; i < m_; ++i)
        for (int64_t j = 0; j < n_; ++j) c[i * ldc_ + j] = T(0);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    sgemm(false, trans_b_, m_, n_, k_, a, lda_, b_, ldb_, beta, c, ldc_);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b_ ? CblasTrans : CblasNoTrans, m_, n_, k_, 1.0,
                a, lda_, b_, ldb_, beta, c, ldc_);
  }
}

template class ReusedProduct<float>;
template class ReusedProduct<double>;

}  // namespace adjoint::kernels
