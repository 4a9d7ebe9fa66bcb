// Calls a templated lambda with the C++ storage type of a runtime dtype:
//   dispatch_all(t.dtype(), "sum", [&]<class T>() { ... T ... });
// The cases come from the dtype table (Note [The dtype table]); each helper keeps the rows its
// predicate accepts and throws a DType error naming the op for the rest.
#pragma once

#include <cstdint>
#include <type_traits>

#include "adjoint/dtype.h"
#include "adjoint/error.h"

namespace adjoint {

/// The dtype kernels compute in, as a C++ type: float for Half and BFloat16, int64_t for the
/// narrower integers, T otherwise (the dtype table's opmath column).
template <class T>
struct opmath {
  using type = T;
};
template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         sizeof(T) < sizeof(int64_t)) struct opmath<T> {
  using type = int64_t;
};
template <>
struct opmath<Half> {
  using type = float;
};
template <>
struct opmath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename opmath<T>::type;

/// Whether T is stored narrower than kernels compute it (the 16-bit floats, the narrow ints).
template <class T>
inline constexpr bool is_storage_only_v = !std::is_same_v<opmath_t<T>, T>;
/// Whether T is a storage-only float (float16, bfloat16).
template <class T>
inline constexpr bool is_reduced_float_v = is_storage_only_v<T> && !std::is_integral_v<T>;

namespace detail {

// Calls f<T>() for the table row of d if Keep<T> holds; else throws "[op] expected <what>".
template <template <class> class Keep, class F>
decltype(auto) dispatch_if(DType d, const char* op, const char* what, F&& f) {
  switch (d) {
#define ADJOINT_DISPATCH_CASE(E, T, ...) \
  case DType::E:                         \
    if constexpr (Keep<T>::value) {      \
      return f.template operator()<T>(); \
    } else {                             \
      break;                             \
    }
    ADJOINT_FORALL_DTYPES(ADJOINT_DISPATCH_CASE)
#undef ADJOINT_DISPATCH_CASE
  }
  ADJOINT_CHECK(false, DType, op, "expected ", what, ", got ", d);
}

template <class T>
struct keep_all : std::true_type {};
template <class T>
struct keep_numeric : std::bool_constant<!std::is_same_v<T, bool>> {};
template <class T>
struct keep_floating : std::bool_constant<dtype_info(dtype_of_v<T>).kind == DTypeKind::Floating> {};
template <class T>
struct keep_opmath_floating
    : std::bool_constant<keep_floating<T>::value && !is_reduced_float_v<T>> {};
template <class T>
struct keep_opmath_all : std::bool_constant<!is_storage_only_v<T>> {};
template <class T>
struct keep_reduced_float : std::bool_constant<is_reduced_float_v<T>> {};
template <class T>
struct keep_opmath_numeric : std::bool_constant<keep_numeric<T>::value && !is_storage_only_v<T>> {};

}  // namespace detail

/// Every dtype of the table.
template <class F>
decltype(auto) dispatch_all(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_all>(d, op, "a known dtype", f);
}

/// Every dtype with arithmetic (all but bool).
template <class F>
decltype(auto) dispatch_numeric(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_numeric>(d, op, "a numeric dtype", f);
}

/// The floating dtypes, the 16-bit storage ones included.
template <class F>
decltype(auto) dispatch_floating(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_floating>(d, op, "a floating dtype", f);
}

/// The dtypes kernels compute in, with bool: bool, int64, float32, float64.
template <class F>
decltype(auto) dispatch_opmath_all(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_opmath_all>(d, op, "bool, int64, float32 or float64", f);
}

/// The dtypes kernels compute in: int64, float32, float64. Kernels that compute use this one;
/// their entry points widen float16/bfloat16 first (backend/cpu/opmath.h).
template <class F>
decltype(auto) dispatch_opmath_numeric(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_opmath_numeric>(d, op, "int64, float32 or float64", f);
}

/// The 16-bit storage floats (float16, bfloat16), for kernels that convert them in blocks.
template <class F>
decltype(auto) dispatch_reduced_floating(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_reduced_float>(d, op, "float16 or bfloat16", f);
}

/// float32 and float64: the floating dtypes kernels compute in (and LAPACK takes).
template <class F>
decltype(auto) dispatch_opmath_floating(DType d, const char* op, F&& f) {
  return detail::dispatch_if<detail::keep_opmath_floating>(d, op, "float32 or float64", f);
}

}  // namespace adjoint
