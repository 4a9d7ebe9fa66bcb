// A traced graph whose sizes are formulas in symbolic sizes, fitted from traces at a few sizes
// (Note [Dynamic sizes] in dynamic_sizes.cpp): CompileOptions::dynamic.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "compile/graph.h"

namespace adjoint::detail {

/// The sizes of the dynamic symbols at one call, by symbol.
using SymbolSizes = std::vector<int64_t>;

/// "8x16" (sizes by symbol), and "8x16, 2x2" for several points, as errors name them.
std::string describe_sizes(const SymbolSizes& s);
std::string describe_sizes(const std::vector<SymbolSizes>& points);

/// A number of the graph (a dim of a value's shape, an entry of an op's attributes) as a
/// function of the symbols' sizes s: the multilinear polynomial
/// p(s) = sum over subsets S of the symbols of c_S prod_{i in S} s_i,
/// or its reciprocal.
struct SizeFormula {
  enum class Kind : uint8_t {
    Integer,    ///< p(s), integer coefficients: dims, a view's shape (B T)
    Real,       ///< p(s), a double
    Reciprocal  ///< 1 / p(s), integer coefficients: a mean's 1 / count, a variance's 1 / (n - 1)
  };
  Kind kind = Kind::Integer;
  std::vector<int64_t> ints;  ///< the coefficients by subset (bit i: symbol i), but for Real
  std::vector<double> reals;  ///< the coefficients of a Real formula
  /// p(s) of an Integer or Reciprocal formula; throws an Error when it overflows an int64.
  int64_t integer_at(const SymbolSizes& s) const;
  /// The number at s: p(s), or 1 / p(s).
  double at(const SymbolSizes& s) const;
  std::size_t terms() const { return kind == Kind::Real ? reals.size() : ints.size(); }
};

/// An entry of an op's attributes (or of a factory's recipe) that depends on the sizes: field
/// `field`, element `element` of an integer list (-1 for a single number).
struct FieldFormula {
  std::size_t field;
  std::ptrdiff_t element;
  SizeFormula formula;
};

/// A dim of a value's shape that depends on the sizes.
struct DimFormula {
  std::size_t value, dim;
  SizeFormula formula;
};

class DynamicTemplate {
 public:
  /// The corners of the box [lo, hi] (lo_i < hi_i): corner m has symbol i at hi_i where bit i
  /// of m is set, else at lo_i.
  static std::vector<SymbolSizes> corners(const SymbolSizes& lo, const SymbolSizes& hi);
  /// Fits the graph from traces of one function: graphs[m] at corners(lo, hi)[m], and after
  /// them at least one trace at sizes off the corners, where every formula is checked. The
  /// graphs must be the same but for numbers that one formula gives at every point; else
  /// returns why not. graphs[base] is the graph the template is made from.
  static std::variant<DynamicTemplate, std::string> fit(const std::vector<const Graph*>& graphs,
                                                        const std::vector<SymbolSizes>& sizes,
                                                        const SymbolSizes& lo,
                                                        const SymbolSizes& hi, std::size_t base);
  /// The graph at sizes s, as a trace at s would have recorded it. Throws an Error when a
  /// formula gives a negative dim there.
  Graph at(const SymbolSizes& s) const;

  /// The pieces, for the export file: the graph the template is made from (its constants'
  /// recipes included), the formulas of value dims, of op attributes (by node) and of the
  /// constants' recipes (by constant); empty lists where nothing depends on the sizes.
  const Graph& base() const { return base_; }
  std::size_t symbols() const { return symbols_; }
  const std::vector<DimFormula>& dim_formulas() const { return dims_; }
  const std::vector<std::vector<FieldFormula>>& node_formulas() const { return nodes_; }
  const std::vector<std::vector<FieldFormula>>& constant_formulas() const { return constants_; }
  /// A template from its pieces (read from a file); throws an Error naming what does not fit
  /// the graph (an index out of range, a formula of the wrong length or on a field of another
  /// type).
  static DynamicTemplate from_pieces(Graph base, std::size_t symbols, std::vector<DimFormula> dims,
                                     std::vector<std::vector<FieldFormula>> nodes,
                                     std::vector<std::vector<FieldFormula>> constants);

 private:
  Graph base_;
  std::size_t symbols_ = 0;
  std::vector<std::vector<FieldFormula>> nodes_;      ///< by node; empty: the op serves all
  std::vector<std::vector<FieldFormula>> constants_;  ///< by constant, of its recipe
  std::vector<DimFormula> dims_;
};

}  // namespace adjoint::detail
