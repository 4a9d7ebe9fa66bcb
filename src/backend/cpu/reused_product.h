// A float32 or float64 product C = A B (+ C) on the calling thread whose right operand B and
// shape stay the same over many calls: the recurrent products of an LSTM sequence's steps,
// where B is a piece of W_hh and A is each step's state (Note [Reused right operands]).
#pragma once

#include <cstdint>
#include <memory>

namespace adjoint::kernels {

template <class T>
class ReusedProduct {
 public:
  /// C[m, n] (+)= A[m, k] B[k, n], row-major: A's rows lda apart; B's element (p, j) at
  /// b[p * ldb + j], or at b[j * ldb + p] when trans_b; C's rows ldc apart. B must stay valid
  /// and unchanged while the product is used (it may be read again at each call).
  ReusedProduct(int64_t m, int64_t n, int64_t k, const T* b, int64_t ldb, bool trans_b, int64_t lda,
                int64_t ldc, bool accumulate);
  ~ReusedProduct();
  ReusedProduct(ReusedProduct&&) noexcept;
  ReusedProduct& operator=(ReusedProduct&&) noexcept;

  void run(const T* a, T* c) const;

  /// For tests and reports: whether B was packed once into oneDNN's layout.
  bool packed() const { return packed_ != nullptr; }

 private:
  struct Packed;
  int64_t m_, n_, k_, ldb_, lda_, ldc_;
  const T* b_;
  bool trans_b_, accumulate_;
  std::unique_ptr<Packed> packed_;
};

extern template class ReusedProduct<float>;
extern template class ReusedProduct<double>;

}  // namespace adjoint::kernels
