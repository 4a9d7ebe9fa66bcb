// Function transforms in the style of JAX and torch.func: grad, value_and_grad, vjp, jvp,
// linearize, jacrev, jacfwd, hessian and hvp. Each takes a callable over tensors and traces it
// by running it, so loops, branches and recursion work. They compose to any depth
// (grad(grad(f)), jvp of grad, jacfwd(jacrev(f))) and never touch the .grad() of the caller's
// tensors. The work happens in src/transforms; this header adapts the caller's function.
//
// Calling conventions. A transformed function is called like the original: with tensors one by
// one, f(x, y), or with one list, f(std::vector<Tensor>{...}). `argnums` picks the
// differentiated arguments (positions, or positions in the list); the default is argument 0
// for tensor-by-tensor functions and every element for list functions. One argnum gives one
// result; a list of argnums (or a list function by default) gives one per argnum.
#pragma once

#include <functional>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// What a transform does about a differentiated input the outputs do not depend on.
enum class Unused {
  Zero,  ///< its derivative is zero (JAX's behaviour)
  Error  ///< throw an error naming the argument
};

/// How hvp computes the Hessian-vector product.
enum class HvpMode {
  ForwardOverReverse,  ///< jvp of grad: one forward and one backward pass, both with tangents
  ReverseOverReverse   ///< grad of <grad, v>: double backward, as torch.autograd.functional
};

namespace detail {

/// The form every transform works on: a list of tensors in, a list out.
using ListFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
/// jacobian[o][a]: derivative of output o with respect to differentiated argument a, shaped
/// output's shape + argument's shape.
using Jacobian = std::vector<std::vector<Tensor>>;

struct ValueAndGrads {
  Tensor value;
  std::vector<Tensor> grads;
};
struct VjpLists {
  std::vector<Tensor> outputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> pullback;
};

ValueAndGrads value_and_grad_lists(const ListFn& f, const std::vector<Tensor>& primals,
                                   const std::vector<int>& argnums, Unused unused, const char* op);
VjpLists vjp_lists(const ListFn& f, const std::vector<Tensor>& primals, const char* op);
std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp_lists(const ListFn& f,
                                                              const std::vector<Tensor>& primals,
                                                              const std::vector<Tensor>& tangents,
                                                              const char* op);
Jacobian jacrev_lists(const ListFn& f, const std::vector<Tensor>& primals,
                      const std::vector<int>& argnums, Unused unused);
Jacobian jacfwd_lists(const ListFn& f, const std::vector<Tensor>& primals,
                      const std::vector<int>& argnums);
Jacobian hessian_lists(const ListFn& f, const std::vector<Tensor>& primals,
                       const std::vector<int>& argnums);
/// jacrev and jacfwd one row (column) at a time instead of one vmap over all of them: the
/// oracle of the vectorized ones in the tests, and the baseline of bench's `jacobian`.
Jacobian jacrev_loop_lists(const ListFn& f, const std::vector<Tensor>& primals,
                           const std::vector<int>& argnums, Unused unused);
Jacobian jacfwd_loop_lists(const ListFn& f, const std::vector<Tensor>& primals,
                           const std::vector<int>& argnums);
std::vector<Tensor> hvp_lists(const ListFn& f, const std::vector<Tensor>& primals,
                              const std::vector<Tensor>& tangents, HvpMode mode);
/// Checks argnums against the number of arguments (`all`: every argument).
std::vector<int> resolve_argnums(const std::vector<int>& given, bool all, std::size_t n,
                                 const char* op);

template <class T>
struct is_tensor_list : std::false_type {};
template <class A>
struct is_tensor_list<std::vector<Tensor, A>> : std::true_type {};

/// Whether the arguments are one list of tensors (else tensors one by one).
template <class... A>
constexpr bool list_call = sizeof...(A) == 1 && (is_tensor_list<std::decay_t<A>>::value && ...);

template <class... A>
std::vector<Tensor> pack_primals(const A&... args) {
  if constexpr (list_call<A...>) {
    return std::vector<Tensor>(args...);
  } else {
    static_assert((std::is_same_v<A, Tensor> && ...),
                  "a transformed function takes tensors one by one, or one std::vector<Tensor>");
    return std::vector<Tensor>{args...};
  }
}

template <class R>
std::vector<Tensor> as_list(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {std::forward<R>(r)};
  } else {
    static_assert(is_tensor_list<T>::value,
                  "a transformed function must return a Tensor or a std::vector<Tensor>");
    return std::vector<Tensor>(r.begin(), r.end());
  }
}

/// f as a ListFn, called the way the transformed function was called (list or one by one).
/// Holds f by reference: use it only while f lives.
template <bool ListIn, std::size_t N, class F>
ListFn list_fn(const F& f) {
  return [&f](const std::vector<Tensor>& xs) -> std::vector<Tensor> {
    if constexpr (ListIn) {
      return as_list(f(xs));
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return as_list(f(xs[I]...)); }
      (std::make_index_sequence<N>{});
    }
  };
}

/// How argnums were given: not at all, as one int, or as a list.
enum class ArgMode { Default, Single, List };

template <ArgMode M, bool ListIn>
constexpr bool single_arg = M == ArgMode::Single || (M == ArgMode::Default && !ListIn);

template <ArgMode M, bool ListIn>
std::vector<int> argnums_for(const std::vector<int>& given, std::size_t n, const char* op) {
  return resolve_argnums(M == ArgMode::Default && !ListIn ? std::vector<int>{0} : given,
                         M == ArgMode::Default && ListIn, n, op);
}

/// A Jacobian in the caller's shape: a Tensor when both the output and the argument are
/// single, a list over whichever is a list, a list of lists [output][argument] when both are.
template <bool OutSingle, bool ArgSingle>
auto shape_jacobian(Jacobian j) {
  if constexpr (OutSingle && ArgSingle) {
    return std::move(j[0][0]);
  } else if constexpr (OutSingle) {
    return std::move(j[0]);
  } else if constexpr (ArgSingle) {
    std::vector<Tensor> per_output;
    for (auto& row : j) per_output.push_back(std::move(row[0]));
    return per_output;
  } else {
    return j;
  }
}

template <class F, ArgMode M, bool WithValue>
class GradTransform {
 public:
  GradTransform(F f, std::vector<int> argnums, Unused unused)
      : f_(std::move(f)), argnums_(std::move(argnums)), unused_(unused) {}

  template <class... A>
  auto operator()(const A&... args) const {
    constexpr bool list_in = list_call<A...>;
    static_assert(std::is_same_v<std::decay_t<decltype(f_(args...))>, Tensor>,
                  "grad needs a function returning one (scalar) Tensor; use jacrev or vjp for "
                  "functions with several outputs");
    const char* op = WithValue ? "value_and_grad" : "grad";
    const std::vector<Tensor> primals = pack_primals(args...);
    auto r =
        value_and_grad_lists(list_fn<list_in, sizeof...(A)>(f_), primals,
                             argnums_for<M, list_in>(argnums_, primals.size(), op), unused_, op);
    auto grads = [&] {
      if constexpr (single_arg<M, list_in>) {
        return std::move(r.grads[0]);
      } else {
        return std::move(r.grads);
      }
    }();
    if constexpr (WithValue) {
      return std::make_pair(std::move(r.value), std::move(grads));
    } else {
      return grads;
    }
  }

 private:
  F f_;
  std::vector<int> argnums_;
  Unused unused_;
};

template <class F, ArgMode M, bool Forward>
class JacobianTransform {
 public:
  JacobianTransform(F f, std::vector<int> argnums, Unused unused)
      : f_(std::move(f)), argnums_(std::move(argnums)), unused_(unused) {}

  template <class... A>
  auto operator()(const A&... args) const {
    constexpr bool list_in = list_call<A...>;
    using Out = std::decay_t<decltype(f_(args...))>;
    const char* op = Forward ? "jacfwd" : "jacrev";
    const std::vector<Tensor> primals = pack_primals(args...);
    const ListFn fn = list_fn<list_in, sizeof...(A)>(f_);
    const std::vector<int> idx = argnums_for<M, list_in>(argnums_, primals.size(), op);
    Jacobian j = Forward ? jacfwd_lists(fn, primals, idx) : jacrev_lists(fn, primals, idx, unused_);
    return shape_jacobian<std::is_same_v<Out, Tensor>, single_arg<M, list_in>>(std::move(j));
  }

 private:
  F f_;
  std::vector<int> argnums_;
  Unused unused_;
};

template <class F, ArgMode M>
class HessianTransform {
 public:
  HessianTransform(F f, std::vector<int> argnums)
      : f_(std::move(f)), argnums_(std::move(argnums)) {}

  template <class... A>
  auto operator()(const A&... args) const {
    constexpr bool list_in = list_call<A...>;
    static_assert(std::is_same_v<std::decay_t<decltype(f_(args...))>, Tensor>,
                  "hessian needs a function returning one (scalar) Tensor");
    const std::vector<Tensor> primals = pack_primals(args...);
    Jacobian h = hessian_lists(list_fn<list_in, sizeof...(A)>(f_), primals,
                               argnums_for<M, list_in>(argnums_, primals.size(), "hessian"));
    if constexpr (single_arg<M, list_in>) {
      return std::move(h[0][0]);
    } else {
      return h;
    }
  }

 private:
  F f_;
  std::vector<int> argnums_;
};

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------------------------

/// The gradient of a scalar function: grad(f)(x) is df/dx, shaped like x. With one argnum
/// the result is a Tensor; with a list of argnums (or a list function called without
/// argnums) one Tensor per argnum. Unused::Error makes an input the output ignores an error.
///   auto df = grad([](const Tensor& x) { return (x * x).sum(); });
///   Tensor g = df(x);                               // 2x
///   auto ddf = grad([&](const Tensor& x) { return df(x).sum(); });   // composes
template <class F>
auto grad(F f) {
  return detail::GradTransform<F, detail::ArgMode::Default, false>(std::move(f), {}, Unused::Zero);
}
template <class F>
auto grad(F f, int argnum, Unused unused = Unused::Zero) {
  return detail::GradTransform<F, detail::ArgMode::Single, false>(std::move(f), {argnum}, unused);
}
template <class F>
auto grad(F f, std::vector<int> argnums, Unused unused = Unused::Zero) {
  return detail::GradTransform<F, detail::ArgMode::List, false>(std::move(f), std::move(argnums),
                                                                unused);
}
template <class F>
auto grad(F f, std::initializer_list<int> argnums, Unused unused = Unused::Zero) {
  return grad(std::move(f), std::vector<int>(argnums), unused);
}

/// value_and_grad(f)(x) is the pair (f(x), grad(f)(x)) from one forward and one backward.
template <class F>
auto value_and_grad(F f) {
  return detail::GradTransform<F, detail::ArgMode::Default, true>(std::move(f), {}, Unused::Zero);
}
template <class F>
auto value_and_grad(F f, int argnum, Unused unused = Unused::Zero) {
  return detail::GradTransform<F, detail::ArgMode::Single, true>(std::move(f), {argnum}, unused);
}
template <class F>
auto value_and_grad(F f, std::vector<int> argnums, Unused unused = Unused::Zero) {
  return detail::GradTransform<F, detail::ArgMode::List, true>(std::move(f), std::move(argnums),
                                                               unused);
}
template <class F>
auto value_and_grad(F f, std::initializer_list<int> argnums, Unused unused = Unused::Zero) {
  return value_and_grad(std::move(f), std::vector<int>(argnums), unused);
}

// ---------------------------------------------------------------------------------------------
// Vector-Jacobian and Jacobian-vector products
// ---------------------------------------------------------------------------------------------

/// The outputs of f and its pullback: pullback(cotangents) = cotangentsᵀ · J, one gradient
/// per primal. The pullback may be called any number of times; it keeps f's graph alive.
template <class Out, class In>
struct VjpResult {
  Out outputs;
  std::function<In(const Out&)> pullback;
};

/// vjp(f, x, y, ...) or vjp(f, std::vector<Tensor>{...}): every primal is differentiated.
/// Cotangents must match the outputs in shape and dtype.
template <class F, class... A>
auto vjp(const F& f, const A&... primals) {
  using Out = std::decay_t<decltype(f(primals...))>;
  constexpr bool list_in = detail::list_call<A...>;
  constexpr bool single_in = sizeof...(A) == 1 && !list_in;
  using In = std::conditional_t<single_in, Tensor, std::vector<Tensor>>;
  detail::VjpLists r = detail::vjp_lists(detail::list_fn<list_in, sizeof...(A)>(f),
                                         detail::pack_primals(primals...), "vjp");
  VjpResult<Out, In> result;
  if constexpr (std::is_same_v<Out, Tensor>) {
    result.outputs = r.outputs[0];
  } else {
    result.outputs = r.outputs;
  }
  result.pullback = [pull = std::move(r.pullback)](const Out& cotangents) -> In {
    std::vector<Tensor> g = pull(detail::as_list(cotangents));
    if constexpr (single_in) {
      return g[0];
    } else {
      return g;
    }
  };
  return result;
}

/// f's outputs and their tangents J · tangent, by forward mode (one pass).
template <class Out>
struct JvpResult {
  Out outputs;
  Out tangents;
};

/// jvp(f, x, t) for a function of one tensor.
template <class F>
auto jvp(const F& f, const Tensor& primal, const Tensor& tangent) {
  using Out = std::decay_t<decltype(f(primal))>;
  auto [outs, tans] = detail::jvp_lists(detail::list_fn<false, 1>(f), {primal}, {tangent}, "jvp");
  if constexpr (std::is_same_v<Out, Tensor>) {
    return JvpResult<Out>{outs[0], tans[0]};
  } else {
    return JvpResult<Out>{outs, tans};
  }
}
/// jvp(f, {x, y}, {tx, ty}) for a function of one std::vector<Tensor>.
template <class F>
auto jvp(const F& f, const std::vector<Tensor>& primals, const std::vector<Tensor>& tangents) {
  using Out = std::decay_t<decltype(f(primals))>;
  auto [outs, tans] = detail::jvp_lists(detail::list_fn<true, 1>(f), primals, tangents, "jvp");
  if constexpr (std::is_same_v<Out, Tensor>) {
    return JvpResult<Out>{outs[0], tans[0]};
  } else {
    return JvpResult<Out>{outs, tans};
  }
}

/// f's outputs at x and a function t -> J(x) · t. Unlike JAX's linearize, which stores the
/// linearised graph, each call of the returned function runs f forward again with a tangent.
template <class Out>
struct LinearizeResult {
  Out outputs;
  std::function<Out(const Tensor&)> jvp;
};
template <class F>
auto linearize(F f, const Tensor& primal) {
  using Out = std::decay_t<decltype(f(primal))>;
  Out outputs;
  {
    auto outs = detail::as_list(f(primal));
    if constexpr (std::is_same_v<Out, Tensor>) {
      outputs = outs[0];
    } else {
      outputs = outs;
    }
  }
  return LinearizeResult<Out>{
      outputs, [f = std::move(f), primal](const Tensor& t) { return jvp(f, primal, t).tangents; }};
}

// ---------------------------------------------------------------------------------------------
// Jacobians and Hessians
// ---------------------------------------------------------------------------------------------

/// The full Jacobian by reverse mode, one backward pass per output element (best when
/// outputs are few). Shaped output's shape + argument's shape; a Tensor when f returns one
/// Tensor and one argnum is asked for, else lists (see shape_jacobian).
template <class F>
auto jacrev(F f) {
  return detail::JacobianTransform<F, detail::ArgMode::Default, false>(std::move(f), {},
                                                                       Unused::Zero);
}
template <class F>
auto jacrev(F f, int argnum, Unused unused = Unused::Zero) {
  return detail::JacobianTransform<F, detail::ArgMode::Single, false>(std::move(f), {argnum},
                                                                      unused);
}
template <class F>
auto jacrev(F f, std::vector<int> argnums, Unused unused = Unused::Zero) {
  return detail::JacobianTransform<F, detail::ArgMode::List, false>(std::move(f),
                                                                    std::move(argnums), unused);
}
template <class F>
auto jacrev(F f, std::initializer_list<int> argnums, Unused unused = Unused::Zero) {
  return jacrev(std::move(f), std::vector<int>(argnums), unused);
}

/// The full Jacobian by forward mode, one forward pass per input element (best when inputs
/// are few). Same shapes as jacrev.
template <class F>
auto jacfwd(F f) {
  return detail::JacobianTransform<F, detail::ArgMode::Default, true>(std::move(f), {},
                                                                      Unused::Zero);
}
template <class F>
auto jacfwd(F f, int argnum) {
  return detail::JacobianTransform<F, detail::ArgMode::Single, true>(std::move(f), {argnum},
                                                                     Unused::Zero);
}
template <class F>
auto jacfwd(F f, std::vector<int> argnums) {
  return detail::JacobianTransform<F, detail::ArgMode::List, true>(std::move(f), std::move(argnums),
                                                                   Unused::Zero);
}
template <class F>
auto jacfwd(F f, std::initializer_list<int> argnums) {
  return jacfwd(std::move(f), std::vector<int>(argnums));
}

/// The Hessian of a scalar function, forward over reverse (jacfwd of grad): x.shape + x.shape
/// for one argnum, blocks [i][j] = d²f / dx_i dx_j for a list.
template <class F>
auto hessian(F f) {
  return detail::HessianTransform<F, detail::ArgMode::Default>(std::move(f), {});
}
template <class F>
auto hessian(F f, int argnum) {
  return detail::HessianTransform<F, detail::ArgMode::Single>(std::move(f), {argnum});
}
template <class F>
auto hessian(F f, std::vector<int> argnums) {
  return detail::HessianTransform<F, detail::ArgMode::List>(std::move(f), std::move(argnums));
}
template <class F>
auto hessian(F f, std::initializer_list<int> argnums) {
  return hessian(std::move(f), std::vector<int>(argnums));
}

/// H(x) · v for a scalar function without forming H: forward over reverse by default (one
/// gradient's worth of passes, with tangents), or reverse over reverse.
template <class F>
Tensor hvp(const F& f, const Tensor& primal, const Tensor& tangent,
           HvpMode mode = HvpMode::ForwardOverReverse) {
  return detail::hvp_lists(detail::list_fn<false, 1>(f), {primal}, {tangent}, mode)[0];
}
/// hvp for a function of one std::vector<Tensor>: one product per element.
template <class F>
std::vector<Tensor> hvp(const F& f, const std::vector<Tensor>& primals,
                        const std::vector<Tensor>& tangents,
                        HvpMode mode = HvpMode::ForwardOverReverse) {
  return detail::hvp_lists(detail::list_fn<true, 1>(f), primals, tangents, mode);
}

}  // namespace adjoint
