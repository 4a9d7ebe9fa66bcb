// The calls of a compiled function with dynamic sizes (CompileOptions::dynamic): reading a
// call's sizes, and the probes that fit the graph's formulas (Note [Dynamic sizes] in
// dynamic_sizes.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adjoint/compile.h"
#include "compile/dynamic_sizes.h"

namespace adjoint::detail {

/// By input: the (dim, symbol) pairs that take a dynamic size.
using DynamicDims = std::vector<std::vector<std::pair<int64_t, std::size_t>>>;

/// A call's dynamic sizes: those of its active symbols (of size 2 or more; 0 and 1 are never
/// dynamic, as broadcasting and squeeze treat 1 apart), numbered in symbol order, and the dims of
/// each input that take them.
struct DynamicCall {
  SymbolSizes sizes;
  DynamicDims dims;
};

/// The call's dynamic sizes, or nullopt when it has none (no symbol of size 2 or more, or an
/// input with such a dim that is not contiguous) or when the dims of one symbol differ in size
/// (then `mismatch` says how). Throws an Error naming the option when it names an argument,
/// dim or symbol that does not exist.
std::optional<DynamicCall> dynamic_call(const std::vector<DynamicDim>& dynamic,
                                        const std::vector<Tensor>& inputs, std::string& mismatch);

/// A family whose formulas are fitted, as export writes it: the graph of its first call (the
/// template's base), the formulas, and the dynamic dims (DynamicDim::symbol: the active
/// symbol's number).
struct FittedFamily {
  std::shared_ptr<const TracedSignature> first;
  std::shared_ptr<const DynamicTemplate> fitted;
  std::vector<DynamicDim> dims;
};

/// What fitting a family's formulas gave: the template, or why not; and how many probes ran.
struct FitOutcome {
  std::shared_ptr<const DynamicTemplate> fitted;
  std::string refused;
  int64_t probes = 0;
};

/// The second call of a family (sizes `call`, graph `second`, traced on `stand_ins`) after
/// the first (sizes `first_sizes`, graph `first`): traces f at the other corners of the box
/// the two span and at checks off it, and fits the formulas.
FitOutcome fit_family(const CompiledFunction::Fn& f, const StaticArgs& statics,
                      const std::vector<Tensor>& stand_ins, const DynamicCall& call,
                      const SymbolSizes& first_sizes, const Graph& first, const Graph& second);

}  // namespace adjoint::detail
