// export_function (include/adjoint/export.h): a traced graph written to a safetensors file
// (Note [The export file] in format.cpp).
#include "adjoint/export.h"

#include <bit>

#include "adjoint/error.h"
#include "adjoint/generator.h"
#include "adjoint/io/safetensors.h"
#include "autograd/apply.h"
#include "compile/dynamic_family.h"
#include "compile/graph.h"
#include "export/format.h"

namespace adjoint {
namespace detail {
namespace {

using nlohmann::json;

std::vector<int64_t> to_vector(const Shape& s) { return {s.begin(), s.end()}; }

json graph_to_json(const TracedSignature& t) {
  const Graph& g = t.graph;
  // Each generator a draw reads: the default one (the importing process's default draws
  // then), or another, written with its state now (the imported function's own continues it).
  json generators = json::array();
  for (const Generator* gen : g.generators) {
    const Generator::State st = gen->state();
    generators.push_back({{"default", gen == &default_generator()},
                          {"state",
                           {st.s0, st.s1, st.seed, std::bit_cast<uint64_t>(st.cached_normal),
                            static_cast<uint64_t>(st.has_cached)}}});
  }
  json values = json::array();
  for (const Value& v : g.values)
    values.push_back({static_cast<int>(v.kind), v.index, v.node, to_vector(v.shape),
                      std::string(to_string(v.dtype)), v.alias_of});
  json nodes = json::array();
  for (const GraphNode& n : g.nodes) {
    const char* key = n.op->export_key();
    ADJOINT_CHECK(key != nullptr, Value, kExportOp, "the graph holds '", n.op->name(),
                  "', which cannot be written to a file (a custom autograd function, or an op "
                  "that holds a tensor); see docs/compile.md, \"Export\"");
    json fields = json::array();
    for (const Field& f : n.op->export_fields()) fields.push_back(field_to_json(f));
    int generator = -1;
    for (std::size_t k = 0; k < g.generators.size(); ++k)
      if (n.op->generator() == g.generators[k]) generator = static_cast<int>(k);
    nodes.push_back({{"op", key},
                     {"fields", fields},
                     {"in", n.inputs},
                     {"out", n.outputs},
                     {"backward", n.backward},
                     {"random", n.random},
                     {"generator", generator}});
  }
  json strides = json::array();
  for (const Shape& s : t.input_strides) strides.push_back(to_vector(s));
  json captures = json::array();
  for (const Tensor& c : g.captures) captures.push_back(c.requires_grad());
  return {{"values", values},
          {"nodes", nodes},
          {"inputs", g.inputs},
          {"outputs", g.outputs},
          {"output_detached", g.output_detached},
          {"cotangents", g.cotangents},
          {"grad_leaves", g.grad_leaves},
          {"grads", g.grads},
          {"input_strides", strides},
          {"grad_enabled", t.grad_enabled},
          {"captures", captures},
          {"generators", generators},
          {"constants", g.constants.size()}};
}

json formula_to_json(const SizeFormula& f) {
  json c = json::array();
  for (int64_t x : f.ints) c.push_back(field_to_json(x));
  for (double x : f.reals) c.push_back(field_to_json(x));
  return json::array({static_cast<int>(f.kind), c});
}

json field_formulas_to_json(const std::vector<std::vector<FieldFormula>>& by_item) {
  json out = json::array();
  for (std::size_t i = 0; i < by_item.size(); ++i)
    for (const FieldFormula& h : by_item[i])
      out.push_back({i, h.field, h.element, formula_to_json(h.formula)});
  return out;
}

// The formulas of a fitted family (Note [The export file]): the importer builds the graph of
// new sizes from them, as compile does.
json dynamic_to_json(const FittedFamily& family) {
  const DynamicTemplate& t = *family.fitted;
  json dims = json::array();
  for (const DynamicDim& d : family.dims) dims.push_back({d.input, d.dim, d.symbol});
  json value_dims = json::array();
  for (const DimFormula& d : t.dim_formulas())
    value_dims.push_back({d.value, d.dim, formula_to_json(d.formula)});
  json recipes = json::array();
  const Graph& g = t.base();
  for (std::size_t i = 0; i < t.constant_formulas().size(); ++i) {
    if (t.constant_formulas()[i].empty()) continue;
    json fields = json::array();
    for (const Field& f : g.constant_recipes[i].fields) fields.push_back(field_to_json(f));
    recipes.push_back({i, g.constant_recipes[i].key, fields});
  }
  return {{"symbols", t.symbols()},
          {"dims", dims},
          {"value_dims", value_dims},
          {"ops", field_formulas_to_json(t.node_formulas())},
          {"constants", field_formulas_to_json(t.constant_formulas())},
          {"recipes", recipes}};
}

}  // namespace
}  // namespace detail

void export_function(const CompiledFunction& f, const std::string& path) {
  // A signature whose dynamic sizes' formulas are fitted is written as its family: the graph
  // of the family's first call, and the formulas that make the graphs of other sizes.
  const std::shared_ptr<const detail::FittedFamily> family = detail::last_fitted_family(f);
  const std::shared_ptr<const detail::TracedSignature> t =
      family ? family->first : detail::last_traced_signature(f);
  ADJOINT_CHECK(t != nullptr, Value, detail::kExportOp,
                "the function has no traced signature to write: call it first (a call that fell "
                "back to eager code, a graph break, has none)");
  ADJOINT_CHECK(!t->graph.has_effects(), NotImplemented, detail::kExportOp,
                "the function steps an optimizer, an effect of C++ code that a file cannot "
                "hold; export the model's function without the step");
  ADJOINT_CHECK(
      t->graph.writes.empty(), NotImplemented, detail::kExportOp,
      "the function writes in place to ", t->graph.writes.size(),
      " of its arguments or captured tensors (or their .grad); a file holds no writes (not "
      "supported yet)");
  nlohmann::json graph = detail::graph_to_json(*t);
  if (family) graph["dynamic"] = detail::dynamic_to_json(*family);
  // A file holds tensors by value, contiguous; ops traced on a strided view (a reshape that
  // viewed it, a restride) decided by its layout, so such a tensor would come back wrong.
  auto saved = [](const Tensor& x, const char* what, std::size_t i) {
    ADJOINT_CHECK(x.is_contiguous(), Value, detail::kExportOp, "the function reads ", what, " ", i,
                  " of shape ", x.shape(), " as a strided view (strides ", x.strides(),
                  "), and a file holds contiguous tensors: make it contiguous before the "
                  "function reads it");
    return detail::detach_alias(x);
  };
  io::NamedTensors tensors;
  for (std::size_t i = 0; i < t->graph.captures.size(); ++i)
    tensors.emplace_back("capture." + std::to_string(i),
                         saved(t->graph.captures[i], "captured tensor", i));
  for (std::size_t i = 0; i < t->graph.constants.size(); ++i)
    tensors.emplace_back("constant." + std::to_string(i),
                         saved(t->graph.constants[i], "constant", i));
  io::save_safetensors(
      path, tensors,
      {{detail::kFormatKey, detail::kFormatVersion}, {detail::kGraphKey, graph.dump()}});
}

}  // namespace adjoint
