// OpenBLAS at one thread for a scope: for products that run on a pool thread owning their
// block (Note [Gemm threading] in gemm.cpp), so that OpenBLAS does not start threads of its own.
#pragma once

extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace adjoint::kernels {

/// Sets OpenBLAS to one thread for its lifetime (cheap: OpenBLAS only stores the number).
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : prev_(openblas_get_num_threads()) {
    if (prev_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (prev_ != 1) openblas_set_num_threads(prev_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int prev_;
};

}  // namespace adjoint::kernels
