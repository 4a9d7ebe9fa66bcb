// Samples that make constants inside their function, named "factories/<op>/<case>": the
// factories pass the dispatch stack (Note [Factories in the stack] in src/ops/factories.cpp),
// so the registry-wide tests see each of them as compile sees a constant, vmap an unbatched
// tensor, meta a shape and the 16-bit tests a value of the input's dtype.
#include <array>

#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

}  // namespace

ADJOINT_REGISTER_SAMPLES(factories) {
  // Weights that rise along the last dim, made at the input's size and dtype.
  sink.add("factories/linspace/weights",
           [](const Inputs& x) { return x[0] * linspace(0.5, 2.0, x[0].size(-1), x[0].dtype()); },
           {randn64({2, 4})});
  // An empty tensor joined to the input: no values of it are read.
  sink.add("factories/empty/joined",
           [](const Inputs& x) {
             return cat({x[0], empty({0}, x[0].dtype())}, 0);
           },
           {randn64({3})});
  // Caller-owned memory wrapped without a copy (it lives as long as the program), on the CPU
  // whatever the default device, then moved to where the input is.
  sink.add("factories/from_blob/weights",
           [](const Inputs& x) {
             static std::array<double, 3> w{0.5, -1.0, 2.0};
             return x[0] *
                    from_blob(w.data(), {3}, DType::Float64).to(x[0].device()).to(x[0].dtype());
           },
           {randn64({2, 3})});
}
