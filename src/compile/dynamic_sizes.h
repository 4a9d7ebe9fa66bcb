// A traced graph whose sizes are formulas in one symbolic size, fitted from three traces
// (Note [Dynamic sizes] in dynamic_sizes.cpp): CompileOptions::dynamic.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "compile/graph.h"

namespace adjoint::detail {

/// An integer or double of the graph (a dim of a value's shape, an entry of an op's
/// attributes) as a function of the dynamic size s.
struct SizeFormula {
  enum class Kind : uint8_t {
    Affine,     ///< a + b s (b = 0: the same at every size)
    Reciprocal  ///< 1 / (a + b s) with integers a and b, a double (a mean's 1 / count)
  };
  Kind kind = Kind::Affine;
  double a = 0, b = 0;  ///< integers (held exactly) for an integer entry or a reciprocal
  double at(int64_t s) const;
};

class DynamicTemplate {
 public:
  /// Fits the graph from three traces of one function at three sizes; the graphs must be the
  /// same but for entries that fit one formula at all three. Else returns why not.
  static std::variant<DynamicTemplate, std::string> fit(std::array<const Graph*, 3> graphs,
                                                        std::array<int64_t, 3> sizes);
  /// The graph at size s, as a trace at s would have recorded it.
  Graph at(int64_t s) const;

 private:
  /// An entry of an op's attributes that depends on s: field `field`, element `element` of an
  /// integer list (-1 for a single number).
  struct FieldHole {
    std::size_t field;
    std::ptrdiff_t element;
    SizeFormula formula;
  };
  struct NodeFormulas {
    std::vector<FieldHole> holes;  ///< empty: the traced op serves every size
  };
  struct DimHole {
    std::size_t value, dim;
    SizeFormula formula;
  };

  Graph base_;  ///< the first trace
  std::vector<NodeFormulas> nodes_;
  std::vector<DimHole> dims_;
};

}  // namespace adjoint::detail
