// Thread count for kernels: elementwise and reductions split work over a small pool with a
// fixed partition (so results do not depend on timing), and BLAS gets the same count.
#pragma once

namespace adjoint {

/// Sets the number of threads for adjoint's kernels and for OpenBLAS; n < 1 (or more threads
/// than the pool can address) is a Value error.
void set_num_threads(int n);
int get_num_threads();

}  // namespace adjoint
