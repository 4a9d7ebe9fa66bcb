// The linear-algebra kernels of linalg_kernels.h on LAPACK's Fortran interface, as OpenBLAS
// ships it (Debian's libopenblas has the LAPACK symbols but not LAPACKE; see docs/linalg.md).
// LAPACK works on column-major matrices, so each batch element is copied into a column-major
// buffer, factored in place, and copied back row-major: O(n^2) copies beside O(n^3) work.
#include <climits>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "adjoint/error.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "backend/linalg_kernels.h"
#include "core/dispatch.h"
#include "core/tensor_factory.h"

// LAPACK's Fortran entry points. Character arguments are followed by their hidden lengths
// (gfortran passes them by value at the end); OpenBLAS's C replacements ignore them.
extern "C" {
void sgesv_(const int* n, const int* nrhs, float* a, const int* lda, int* ipiv, float* b,
            const int* ldb, int* info);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b,
            const int* ldb, int* info);
void strtrs_(const char* uplo, const char* trans, const char* diag, const int* n, const int* nrhs,
             const float* a, const int* lda, float* b, const int* ldb, int* info, std::size_t,
             std::size_t, std::size_t);
void dtrtrs_(const char* uplo, const char* trans, const char* diag, const int* n, const int* nrhs,
             const double* a, const int* lda, double* b, const int* ldb, int* info, std::size_t,
             std::size_t, std::size_t);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, std::size_t);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w,
             float* work, const int* lwork, int* iwork, const int* liwork, int* info, std::size_t,
             std::size_t);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
             double* work, const int* lwork, int* iwork, const int* liwork, int* info, std::size_t,
             std::size_t);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau,
             float* work, const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau,
             double* work, const int* lwork, int* info);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s,
             float* u, const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork,
             int* iwork, int* info, std::size_t);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s,
             double* u, const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork,
             int* iwork, int* info, std::size_t);
}

namespace adjoint::kernels {
namespace {

// One name per routine for both precisions, so the kernels below are templates.
void gesv(int n, int k, float* a, int* ipiv, float* b, int& info) {
  sgesv_(&n, &k, a, &n, ipiv, b, &n, &info);
}
void gesv(int n, int k, double* a, int* ipiv, double* b, int& info) {
  dgesv_(&n, &k, a, &n, ipiv, b, &n, &info);
}
void trtrs(char uplo, char diag, int n, int k, const float* a, float* b, int& info) {
  strtrs_(&uplo, "N", &diag, &n, &k, a, &n, b, &n, &info, 1, 1, 1);
}
void trtrs(char uplo, char diag, int n, int k, const double* a, double* b, int& info) {
  dtrtrs_(&uplo, "N", &diag, &n, &k, a, &n, b, &n, &info, 1, 1, 1);
}
void potrf(int n, float* a, int& info) { spotrf_("L", &n, a, &n, &info, 1); }
void potrf(int n, double* a, int& info) { dpotrf_("L", &n, a, &n, &info, 1); }
void getrf(int n, float* a, int* ipiv, int& info) { sgetrf_(&n, &n, a, &n, ipiv, &info); }
void getrf(int n, double* a, int* ipiv, int& info) { dgetrf_(&n, &n, a, &n, ipiv, &info); }
void syevd(char jobz, int n, float* a, float* w, float* work, int lwork, int* iwork, int liwork,
           int& info) {
  ssyevd_(&jobz, "L", &n, a, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1);
}
void syevd(char jobz, int n, double* a, double* w, double* work, int lwork, int* iwork, int liwork,
           int& info) {
  dsyevd_(&jobz, "L", &n, a, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1);
}
void geqrf(int m, int n, float* a, float* tau, float* work, int lwork, int& info) {
  sgeqrf_(&m, &n, a, &m, tau, work, &lwork, &info);
}
void geqrf(int m, int n, double* a, double* tau, double* work, int lwork, int& info) {
  dgeqrf_(&m, &n, a, &m, tau, work, &lwork, &info);
}
void orgqr(int m, int k, float* a, const float* tau, float* work, int lwork, int& info) {
  sorgqr_(&m, &k, &k, a, &m, tau, work, &lwork, &info);
}
void orgqr(int m, int k, double* a, const double* tau, double* work, int lwork, int& info) {
  dorgqr_(&m, &k, &k, a, &m, tau, work, &lwork, &info);
}
void gesdd(char jobz, int m, int n, float* a, float* s, float* u, int ldu, float* vt, int ldvt,
           float* work, int lwork, int* iwork, int& info) {
  sgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &info, 1);
}
void gesdd(char jobz, int m, int n, double* a, double* s, double* u, int ldu, double* vt, int ldvt,
           double* work, int lwork, int* iwork, int& info) {
  dgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &info, 1);
}

/// A workspace size LAPACK reported (as a float) after a query with lwork = -1.
int workspace_size(double reported) { return std::max(1, static_cast<int>(reported)); }

/// The leading dims of a [..., m, n] tensor.
Shape batch_shape(const Tensor& a) {
  Shape s = a.shape();
  s.resize(s.size() - 2);
  return s;
}

/// "" for an unbatched matrix, else " batch [1, 0] of [2, 3]," (the failing element).
std::string batch_at(const Shape& batch, int64_t flat) {
  if (batch.empty()) return "";
  Shape index(batch.size());
  for (std::size_t d = batch.size(); d-- > 0;) {
    index[d] = flat % batch[d];
    flat /= batch[d];
  }
  return detail::str(" batch ", index, " of ", batch, ",");
}

/// v as LAPACK's int, or a Value error: this LAPACK takes 32-bit sizes.
int lapack_int(int64_t v, const Tensor& a, const char* op) {
  ADJOINT_CHECK(v <= INT_MAX, Value, op, "matrix dims up to ", INT_MAX,
                " are supported (LAPACK's 32-bit sizes), got ", describe(a));
  return static_cast<int>(v);
}

/// Copies the row-major rows x cols matrix at src into column-major dst (leading dim rows).
template <class T>
void to_column_major(const T* src, int64_t rows, int64_t cols, T* dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i + j * rows] = src[i * cols + j];
}

/// Copies the column-major matrix at src (leading dim ld) into row-major rows x cols dst.
template <class T>
void to_row_major(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = src[i + j * ld];
}

Tensor contiguous_copy(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

/// Shape of a [..., m, n] tensor with its last two dims replaced by `tail`.
Shape with_tail(const Tensor& a, std::initializer_list<int64_t> tail) {
  Shape s = batch_shape(a);
  for (int64_t d : tail) s.push_back(d);
  return s;
}

/// Throws unless the column-major matrix has only finite entries. The iterative eigen and
/// singular-value solvers are not defined on NaN or inf (gesdd rejects NaN as a bad argument
/// and can loop forever on inf), so they are refused first, as torch.linalg refuses them.
template <class T>
void check_finite(const std::vector<T>& m, const Tensor& a, int64_t flat, const char* op) {
  for (const T v : m)
    ADJOINT_CHECK(std::isfinite(v), Value, op, "A has a non-finite entry (", v,
                  "):", batch_at(batch_shape(a), flat), " the decomposition is not defined, A ",
                  describe(a));
}

void check_info_argument(int info, const char* routine) {
  ADJOINT_ASSERT(info >= 0, "LAPACK ", routine, " rejected argument ", -info);
}

[[noreturn]] void throw_singular(const char* op, const Tensor& a, int64_t flat, int info,
                                 const char* routine) {
  throw Error(ErrorKind::Value, op,
              detail::str("the matrix is singular:", batch_at(batch_shape(a), flat), " U[",
                          info - 1, ", ", info - 1, "] is exactly zero (LAPACK ", routine,
                          " info = ", info, "), A ", describe(a)));
}

template <class T>
Tensor lu_solve_impl(const Tensor& a, const Tensor& b, const char* op) {
  const int64_t n = a.size(-1), k = b.size(-1);
  Tensor x = make_empty(b.shape(), a.dtype());
  if (x.numel() == 0) return x;
  const int ni = lapack_int(n, a, op), ki = lapack_int(k, b, op);
  const Tensor ac = contiguous_copy(a), bc = contiguous_copy(b);
  const T* ap = ac.data_ptr<T>();
  const T* bp = bc.data_ptr<T>();
  T* xp = x.data_ptr<T>();
  std::vector<T> am(n * n), bm(n * k);
  std::vector<int> ipiv(n);
  const int64_t batch = x.numel() / (n * k);
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(ap + i * n * n, n, n, am.data());
    to_column_major(bp + i * n * k, n, k, bm.data());
    int info = 0;
    gesv(ni, ki, am.data(), ipiv.data(), bm.data(), info);
    check_info_argument(info, "gesv");
    if (info > 0) throw_singular(op, a, i, info, "getrf");
    to_row_major(bm.data(), n, n, k, xp + i * n * k);
  }
  return x;
}

template <class T>
Tensor triangular_solve_impl(const Tensor& a, const Tensor& b, bool upper, bool unit,
                             const char* op) {
  const int64_t n = a.size(-1), k = b.size(-1);
  Tensor x = make_empty(b.shape(), a.dtype());
  if (x.numel() == 0) return x;
  const int ni = lapack_int(n, a, op), ki = lapack_int(k, b, op);
  const Tensor ac = contiguous_copy(a), bc = contiguous_copy(b);
  const T* ap = ac.data_ptr<T>();
  const T* bp = bc.data_ptr<T>();
  T* xp = x.data_ptr<T>();
  std::vector<T> am(n * n), bm(n * k);
  const int64_t batch = x.numel() / (n * k);
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(ap + i * n * n, n, n, am.data());
    to_column_major(bp + i * n * k, n, k, bm.data());
    int info = 0;
    trtrs(upper ? 'U' : 'L', unit ? 'U' : 'N', ni, ki, am.data(), bm.data(), info);
    check_info_argument(info, "trtrs");
    if (info > 0)
      throw Error(
          ErrorKind::Value, op,
          detail::str("the triangular matrix is singular:", batch_at(batch_shape(a), i),
                      " diagonal element [", info - 1, ", ", info - 1,
                      "] is exactly zero (LAPACK trtrs info = ", info, "), A ", describe(a)));
    to_row_major(bm.data(), n, n, k, xp + i * n * k);
  }
  return x;
}

template <class T>
Tensor cholesky_impl(const Tensor& a, const char* op) {
  const int64_t n = a.size(-1);
  Tensor l = make_empty(a.shape(), a.dtype());
  if (l.numel() == 0) return l;
  const int ni = lapack_int(n, a, op);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  T* lp = l.data_ptr<T>();
  std::vector<T> am(n * n);
  const int64_t batch = l.numel() / (n * n);
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(ap + i * n * n, n, n, am.data());
    int info = 0;
    potrf(ni, am.data(), info);
    check_info_argument(info, "potrf");
    if (info > 0)
      throw Error(
          ErrorKind::Value, op,
          detail::str("the matrix is not positive definite:", batch_at(batch_shape(a), i),
                      " the leading minor of order ", info,
                      " is not positive (LAPACK potrf info = ", info, "), A ", describe(a)));
    // potrf leaves the strictly upper triangle as it found it: L has zeros there.
    for (int64_t c = 1; c < n; ++c)
      for (int64_t r = 0; r < c; ++r) am[r + c * n] = T(0);
    to_row_major(am.data(), n, n, n, lp + i * n * n);
  }
  return l;
}

template <class T>
LuDet lu_det_impl(const Tensor& a, const char* op) {
  const int64_t n = a.size(-1);
  const Shape out_shape = batch_shape(a);
  LuDet r{make_empty(out_shape, a.dtype()), make_empty(out_shape, a.dtype()),
          make_empty(out_shape, a.dtype())};
  const int64_t batch = r.det.numel();
  if (batch == 0) return r;
  const int ni = lapack_int(n, a, op);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  T* dp = r.det.data_ptr<T>();
  T* sp = r.sign.data_ptr<T>();
  T* lp = r.logabsdet.data_ptr<T>();
  std::vector<T> am(n * n);
  std::vector<int> ipiv(n);
  for (int64_t i = 0; i < batch; ++i) {
    // det = (-1)^(row swaps) prod_j U[j, j]; info > 0 means some U[j, j] is exactly zero.
    T permutation = 1, diagonal = 1, logabs = 0;
    int info = 0;
    if (n > 0) {
      to_column_major(ap + i * n * n, n, n, am.data());
      getrf(ni, am.data(), ipiv.data(), info);
      check_info_argument(info, "getrf");
    }
    for (int64_t j = 0; j < n; ++j) {
      const T u = am[j + j * n];
      if (ipiv[j] != j + 1) permutation = -permutation;
      diagonal *= u;
      logabs += std::log(std::abs(u));
    }
    dp[i] = permutation * diagonal;
    sp[i] = info > 0 ? T(0) : diagonal < 0 ? -permutation : permutation;
    lp[i] = logabs;  // -inf when singular: log(0)
  }
  return r;
}

template <class T>
Eigh eigh_impl(const Tensor& a, bool vectors, const char* op) {
  const int64_t n = a.size(-1);
  Eigh r;
  r.values = make_empty(with_tail(a, {n}), a.dtype());
  if (vectors) r.vectors = make_empty(a.shape(), a.dtype());
  if (r.values.numel() == 0) return r;
  const int ni = lapack_int(n, a, op);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  T* wp = r.values.data_ptr<T>();
  T* vp = vectors ? r.vectors.data_ptr<T>() : nullptr;
  const char jobz = vectors ? 'V' : 'N';
  std::vector<T> am(n * n);
  T work_query = 0;
  int iwork_query = 0, info = 0;
  syevd(jobz, ni, am.data(), wp, &work_query, -1, &iwork_query, -1, info);
  check_info_argument(info, "syevd");
  std::vector<T> work(workspace_size(work_query));
  std::vector<int> iwork(std::max(1, iwork_query));
  const int64_t batch = r.values.numel() / n;
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(ap + i * n * n, n, n, am.data());
    check_finite(am, a, i, op);
    syevd(jobz, ni, am.data(), wp + i * n, work.data(), static_cast<int>(work.size()), iwork.data(),
          static_cast<int>(iwork.size()), info);
    check_info_argument(info, "syevd");
    ADJOINT_CHECK(info == 0, Value, op,
                  "the eigensolver did not converge:", batch_at(batch_shape(a), i),
                  " (LAPACK syevd info = ", info, "), A ", describe(a));
    if (vectors) to_row_major(am.data(), n, n, n, vp + i * n * n);
  }
  return r;
}

template <class T>
Qr qr_impl(const Tensor& a, const char* op) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  Qr r{make_empty(with_tail(a, {m, k}), a.dtype()), make_empty(with_tail(a, {k, n}), a.dtype())};
  if (r.q.numel() == 0) return r;  // no matrices, or k = 0: Q and R hold no elements
  const int64_t batch = r.q.numel() / (m * k);
  const int mi = lapack_int(m, a, op), ni = lapack_int(n, a, op), ki = static_cast<int>(k);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  T* qp = r.q.data_ptr<T>();
  T* rp = r.r.data_ptr<T>();
  std::vector<T> am(m * n), tau(k);
  T query_qr = 0, query_q = 0;
  int info = 0;
  geqrf(mi, ni, am.data(), tau.data(), &query_qr, -1, info);
  check_info_argument(info, "geqrf");
  orgqr(mi, ki, am.data(), tau.data(), &query_q, -1, info);
  check_info_argument(info, "orgqr");
  std::vector<T> work(std::max(workspace_size(query_qr), workspace_size(query_q)));
  const int lwork = static_cast<int>(work.size());
  for (int64_t b = 0; b < batch; ++b) {
    to_column_major(ap + b * m * n, m, n, am.data());
    geqrf(mi, ni, am.data(), tau.data(), work.data(), lwork, info);
    check_info_argument(info, "geqrf");
    T* rb = rp + b * k * n;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) rb[i * n + j] = j >= i ? am[i + j * m] : T(0);
    orgqr(mi, ki, am.data(), tau.data(), work.data(), lwork, info);
    check_info_argument(info, "orgqr");
    to_row_major(am.data(), m, m, k, qp + b * m * k);
  }
  return r;
}

template <class T>
Svd svd_impl(const Tensor& a, bool vectors, const char* op) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  Svd r;
  r.s = make_empty(with_tail(a, {k}), a.dtype());
  if (vectors) {
    r.u = make_empty(with_tail(a, {m, k}), a.dtype());
    r.vh = make_empty(with_tail(a, {k, n}), a.dtype());
  }
  if (r.s.numel() == 0) return r;
  const int mi = lapack_int(m, a, op), ni = lapack_int(n, a, op), ki = static_cast<int>(k);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  const char jobz = vectors ? 'S' : 'N';
  std::vector<T> am(m * n), s(k), u(vectors ? m * k : 1), vt(vectors ? k * n : 1);
  const int ldu = vectors ? mi : 1, ldvt = vectors ? ki : 1;
  std::vector<int> iwork(8 * k);
  T query = 0;
  int info = 0;
  gesdd(jobz, mi, ni, am.data(), s.data(), u.data(), ldu, vt.data(), ldvt, &query, -1, iwork.data(),
        info);
  check_info_argument(info, "gesdd");
  std::vector<T> work(workspace_size(query));
  const int64_t batch = r.s.numel() / k;
  for (int64_t b = 0; b < batch; ++b) {
    to_column_major(ap + b * m * n, m, n, am.data());
    check_finite(am, a, b, op);
    gesdd(jobz, mi, ni, am.data(), r.s.data_ptr<T>() + b * k, u.data(), ldu, vt.data(), ldvt,
          work.data(), static_cast<int>(work.size()), iwork.data(), info);
    check_info_argument(info, "gesdd");
    ADJOINT_CHECK(info == 0, Value, op, "the SVD did not converge:", batch_at(batch_shape(a), b),
                  " (LAPACK gesdd info = ", info, "), A ", describe(a));
    if (vectors) {
      to_row_major(u.data(), m, m, k, r.u.data_ptr<T>() + b * m * k);
      to_row_major(vt.data(), k, k, n, r.vh.data_ptr<T>() + b * k * n);
    }
  }
  return r;
}

/// (-1)^(row swaps) prod_j U[j, j] of a column-major LU factorisation (getrf, gesv).
template <class T>
T lu_determinant(const std::vector<T>& lu, const std::vector<int>& ipiv, int64_t n) {
  T d = 1;
  for (int64_t j = 0; j < n; ++j) d *= ipiv[j] != j + 1 ? -lu[j + j * n] : lu[j + j * n];
  return d;
}

// Note [det's cofactors, matrix by matrix]
// adj(A)ᵀ, what det's derivative multiplies by, as the composite in src/ops/linalg_det.cpp
// computes it (Note [det at singular matrices] there), but choosing for each matrix which of
// its two branches to compute: det(A) A⁻ᵀ from one LU where |det A| > tol · prod_i |row_i|,
// the SVD's cofactors det(U) det(Vh) U diag(π) Vh (π_i = prod_{j != i} s_j) elsewhere. The
// composite runs both for every matrix (a trace cannot follow a choice); a kernel may choose,
// so a batch of regular matrices pays one LU each instead of an LU, an inverse and an SVD.
template <class T>
Tensor det_cofactors_impl(const Tensor& a, double tol, const char* op) {
  const int64_t n = a.size(-1);
  Tensor out = make_empty(a.shape(), a.dtype());
  if (out.numel() == 0) return out;
  const int ni = lapack_int(n, a, op);
  const Tensor ac = contiguous_copy(a);
  const T* ap = ac.data_ptr<T>();
  T* cp = out.data_ptr<T>();
  std::vector<T> am(n * n), inv(n * n), s(n), u(n * n), vt(n * n), orient(n * n);
  std::vector<int> ipiv(n), iwork(8 * n);
  std::vector<T> work;
  const int64_t batch = out.numel() / (n * n);
  for (int64_t b = 0; b < batch; ++b) {
    const T* m = ap + b * n * n;
    T* c = cp + b * n * n;
    T bound = 1;  // Hadamard's: |det A| <= prod_i |row_i|
    for (int64_t i = 0; i < n; ++i) {
      T row = 0;
      for (int64_t j = 0; j < n; ++j) row += m[i * n + j] * m[i * n + j];
      bound *= std::sqrt(row);
    }
    // A⁻¹ by one gesv against the identity; the LU it leaves gives det(A). A⁻¹'s column-major
    // buffer read row-major is A⁻ᵀ.
    to_column_major(m, n, n, am.data());
    std::fill(inv.begin(), inv.end(), T(0));
    for (int64_t i = 0; i < n; ++i) inv[i + i * n] = 1;
    int info = 0;
    gesv(ni, ni, am.data(), ipiv.data(), inv.data(), info);
    check_info_argument(info, "gesv");
    const T det = lu_determinant(am, ipiv, n);
    if (info == 0 && std::abs(det) > bound * static_cast<T>(tol)) {  // NaN: the SVD's branch
      for (int64_t k = 0; k < n * n; ++k) c[k] = det * inv[k];
      continue;
    }
    to_column_major(m, n, n, am.data());
    check_finite(am, a, b, op);
    if (work.empty()) {
      T query = 0;
      gesdd('A', ni, ni, am.data(), s.data(), u.data(), ni, vt.data(), ni, &query, -1, iwork.data(),
            info);
      check_info_argument(info, "gesdd");
      work.resize(workspace_size(query));
    }
    gesdd('A', ni, ni, am.data(), s.data(), u.data(), ni, vt.data(), ni, work.data(),
          static_cast<int>(work.size()), iwork.data(), info);
    check_info_argument(info, "gesdd");
    ADJOINT_CHECK(info == 0, Value, op, "the SVD did not converge:", batch_at(batch_shape(a), b),
                  " (LAPACK gesdd info = ", info, "), A ", describe(a));
    // det(U) det(Vh) = ±1, each from an LU of a copy.
    T orientation = 1;
    for (const std::vector<T>* q : {&u, &vt}) {
      orient = *q;
      getrf(ni, orient.data(), ipiv.data(), info);
      check_info_argument(info, "getrf");
      orientation *= lu_determinant(orient, ipiv, n) < 0 ? T(-1) : T(1);
    }
    for (int64_t k = 0; k < n; ++k) {  // π_k, kept in am (no longer needed)
      T p = 1;
      for (int64_t j = 0; j < n; ++j)
        if (j != k) p *= s[j];
      am[k] = p;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t k = 0; k < n; ++k) sum += u[i + k * n] * am[k] * vt[k + j * n];
        c[i * n + j] = orientation * sum;
      }
  }
  return out;
}

}  // namespace

Tensor cpu::det_cofactors(const Tensor& a, double tol, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op,
                                  [&]<class T>() { return det_cofactors_impl<T>(a, tol, op); });
}

Tensor cpu::lu_solve(const Tensor& a, const Tensor& b, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op,
                                  [&]<class T>() { return lu_solve_impl<T>(a, b, op); });
}

Tensor cpu::triangular_solve(const Tensor& a, const Tensor& b, bool upper, bool unit_diagonal,
                             const char* op) {
  return dispatch_opmath_floating(a.dtype(), op, [&]<class T>() {
    return triangular_solve_impl<T>(a, b, upper, unit_diagonal, op);
  });
}

Tensor cpu::cholesky(const Tensor& a, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op,
                                  [&]<class T>() { return cholesky_impl<T>(a, op); });
}

LuDet cpu::lu_det(const Tensor& a, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op, [&]<class T>() { return lu_det_impl<T>(a, op); });
}

Eigh cpu::eigh(const Tensor& a, bool vectors, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op,
                                  [&]<class T>() { return eigh_impl<T>(a, vectors, op); });
}

Qr cpu::qr(const Tensor& a, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op, [&]<class T>() { return qr_impl<T>(a, op); });
}

Svd cpu::svd(const Tensor& a, bool vectors, const char* op) {
  return dispatch_opmath_floating(a.dtype(), op,
                                  [&]<class T>() { return svd_impl<T>(a, vectors, op); });
}

}  // namespace adjoint::kernels
