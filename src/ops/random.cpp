// Random draws: rand, randn and randint, as op structs with no inputs that pass the dispatch
// stack like every op. See Note [Random draws in the stack]. Their results are leaves
// (options.requires_grad marks them); dropout and attention's dropout draw through rand.
#include "adjoint/error.h"
#include "adjoint/generator.h"
#include "core/tensor_factory.h"
#include "ops/no_derivative.h"
#include "vmap/batched.h"

namespace adjoint {
namespace {

// Note [Random draws in the stack]
// A draw is an op whose struct names the generator it advances (`generator()`). The layers that
// care ask for it, and nothing else has to:
// - Batching: under an open vmap a draw has no batched input to send it to a rule; the layer
//   sends it to `vmap_draw()`, which draws one value per example or one for all, as each
//   level's randomness option says (detail::draw_random), the physical draw coming back
//   through the stack with vmap off.
// - Trace: `compile` records the draw as a node that draws again from the generator at each
//   replay (the generator's state is restored after the trace, so the first call draws what
//   eager code would); under an open vmap it lets the Batching layer go first and records the
//   physical draw. A draw from a generator made inside the function is a constant of the
//   graph.
// - Export writes its kind and attributes, the generator apart (Note [The export file]); import
//   and compile's dynamic sizes hand the rebuilt op its generator (set_generator).
// - Observe: profiles and memory timelines see each draw.
// Two draws are never the same value: compile's common-subexpression elimination never merges
// them, and dead-code elimination keeps them (the generator advances).
enum class Draw : int64_t { Rand, Randn, Randint };

template <Draw K>
struct RandomDraw : detail::NoDerivative<0> {
  static constexpr const char* name = K == Draw::Rand    ? "rand"
                                      : K == Draw::Randn ? "randn"
                                                         : "randint";
  auto fields() { return std::tie(shape, dtype, requires_grad, low, high); }
  Shape shape;
  DType dtype = kDefaultFloat;
  bool requires_grad = false;
  int64_t low = 0, high = 0;  // randint's range [low, high)
  Device device = kCPU;       // where it draws; a file's draw runs where it is imported
  Generator* gen = nullptr;   // never null once made (the default generator when none given)

  Tensor forward() const {
    Tensor t = make_empty(shape, dtype, device);
    if constexpr (K == Draw::Rand) {
      kernels::uniform(t, 0, 1, *gen);
    } else if constexpr (K == Draw::Randn) {
      kernels::normal(t, 0, 1, *gen);
    } else {
      kernels::randint(t, low, high, *gen);
    }
    if (requires_grad) t.requires_grad_(true);
    return t;
  }
  Generator* generator() const { return gen; }
  void set_generator(Generator* g) { gen = g; }
  // Under an open vmap: the same draw with each level's batch in front, or without it (Same).
  Tensor vmap_draw() const {
    return detail::draw_random(shape, name, [this](const Shape& s) {
      RandomDraw d = *this;
      d.shape = s;
      return apply(d);
    });
  }
  // The result's shape is the draw's own (import checked its size) before it allocates.
  detail::OutputSpec infer(std::span<const detail::ValueSpec>) const {
    for (int64_t d : shape) ADJOINT_CHECK(d >= 0, Value, name, "a draw of shape ", shape);
    if constexpr (K == Draw::Randint)
      ADJOINT_CHECK(low < high, Value, name, "expected low < high, got [", low, ", ", high, ")");
    return {shape, dtype};
  }
};

Generator* gen_or_default(Generator* g) { return g ? g : &default_generator(); }

void check_floating_draw(DType dtype, const char* op) {
  ADJOINT_CHECK(is_floating(dtype), DType, op, "draws floating values; got dtype ", dtype);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  check_floating_draw(o.dtype(), "rand");
  return apply(RandomDraw<Draw::Rand>{
      {}, shape, o.dtype(), o.requires_grad(), 0, 0, o.device(), gen_or_default(gen)});
}

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  check_floating_draw(o.dtype(), "randn");
  return apply(RandomDraw<Draw::Randn>{
      {}, shape, o.dtype(), o.requires_grad(), 0, 0, o.device(), gen_or_default(gen)});
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  ADJOINT_CHECK(low < high, Value, "randint", "expected low < high, got [", low, ", ", high, ")");
  return apply(RandomDraw<Draw::Randint>{
      {}, shape, DType::Int64, false, low, high, default_device(), gen_or_default(gen)});
}

}  // namespace adjoint

ADJOINT_OPS_FILE(random)
