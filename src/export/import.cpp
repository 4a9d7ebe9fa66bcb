// import_function (include/adjoint/export.h): a graph export_function wrote, read back, checked
// and planned as compile plans a trace (Note [The export file] in format.cpp).
#include <bit>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "adjoint/error.h"
#include "adjoint/export.h"
#include "adjoint/generator.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/ops.h"  // contiguous_strides
#include "autograd/apply.h"
#include "compile/dynamic_sizes.h"
#include "compile/passes.h"
#include "compile/run_plan.h"
#include "compile/trace.h"
#include "export/format.h"
#include "export/linked_ops.h"

namespace adjoint {
namespace detail {

using nlohmann::json;

struct ImportedState {
  std::shared_ptr<const Plan> plan;
  std::vector<Tensor> parameters;
  std::vector<std::unique_ptr<Generator>> own_generators;  ///< draws not from the default one
  std::vector<Shape> input_shapes, input_strides;
  std::vector<DType> input_dtypes;
  std::vector<bool> input_requires_grad;
  std::string path;
  /// A file with dynamic sizes (Note [Dynamic sizes]): the formulas, the dims that take the
  /// sizes, the sizes `plan` is for, and the plans built for other sizes.
  std::shared_ptr<const DynamicTemplate> dynamic;
  std::vector<DynamicDim> dynamic_dims;
  SymbolSizes base_sizes;
  CompileOptions options;
  mutable std::mutex mutex;
  mutable std::map<SymbolSizes, std::shared_ptr<const Plan>> plans;
};

namespace {

/// The most bytes a value of a file may hold (1 TiB): beyond what any process here can run,
/// and small enough that no product of sizes or bytes overflows.
constexpr int64_t kMaxValueBytes = int64_t{1} << 40;

/// A file's claim checked, naming the file: the file is not one export_function wrote, or it
/// was damaged.
template <class... Args>
void expect(bool ok, const std::string& path, const Args&... what) {
  if (!ok) throw Error(ErrorKind::Value, kImportOp, str(path, ": ", what...));
}

/// An integer of the graph's JSON as T, refused unless it is one and T holds it (a double such
/// as 1e23, or an id past int, would otherwise be cast without a check).
template <class T>
T integer(const json& j, const std::string& path) {
  expect(j.is_number_integer(), path, "'", j.dump(), "' where the graph has an integer");
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    expect(std::in_range<T>(u), path, "integer ", u, " out of range");
    return static_cast<T>(u);
  }
  const auto v = j.get<int64_t>();
  expect(std::in_range<T>(v), path, "integer ", v, " out of range");
  return static_cast<T>(v);
}

/// The graph's JSON holds integers, strings and bools, never a number with a fraction or an
/// exponent (doubles are written as their bits): one such anywhere is refused before any list
/// of integers is read from it. Iterative, so that a deeply nested file cannot overflow the
/// stack.
void expect_no_floats(const json& root, const std::string& path) {
  std::vector<std::pair<const json*, std::string>> todo{{&root, ""}};  // (value, its pointer)
  while (!todo.empty()) {
    const auto [j, at] = todo.back();
    todo.pop_back();
    if (j->is_number_float()) {
      // Under "nodes": name the node and its op.
      std::string node;
      if (at.rfind("/nodes/", 0) == 0 && root.contains(json::json_pointer("/nodes"))) {
        const std::string k = at.substr(7, at.find('/', 7) - 7);
        const json& n = root.at("nodes").at(std::stoul(k));
        const bool named = n.is_object() && n.contains("op") && n.at("op").is_string();
        node = str(" (node ", k, ", op '", named ? n.at("op").get<std::string>() : "?", "')");
      }
      expect(false, path, "'", j->dump(), "' at ", at, node, " where the graph has an integer");
    }
    if (j->is_array()) {
      for (std::size_t i = 0; i < j->size(); ++i) todo.push_back({&(*j)[i], str(at, "/", i)});
    } else if (j->is_object()) {
      for (auto it = j->begin(); it != j->end(); ++it)
        todo.push_back({&it.value(), str(at, "/", it.key())});
    }
  }
}

Tensor tensor_named(const io::SafetensorsFile& file, const std::string& name,
                    const std::string& path) {
  for (const auto& [n, t] : file.tensors)
    if (n == name) return t;
  expect(false, path, "tensor '", name, "' is missing");
  return {};
}

// Note [Checking an imported graph]
// A file's ops were made by the public functions, which check their arguments and hand the op
// struct only what it can run (a permutation of the input's dims, a shape the input expands
// to); a damaged file could hand it anything, and its forward trusts it. So every node is
// checked when the file is read, before any kernel runs, in this shape pass: each op's rule
// (TracedOp::infer: the op struct's `infer`, which shares the public function's checks, or a
// pointwise op's broadcasting) is given the shapes and dtypes the file records for its inputs
// and must accept them with the op's attributes and give the result the file records. An op
// without a static rule (its kernel checks its own inputs) is checked when it runs: each
// result of a replay must have its recorded shape and dtype before a later op reads it
// (check_recorded in src/compile/run_plan.cpp), and a call's arguments must have the
// signature's. By induction every op then runs on inputs of the shapes its check accepted.
void check_shapes(const Graph& g, const std::string& path) {
  std::vector<ValueSpec> specs;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const GraphNode& n = g.nodes[k];
    specs.clear();
    for (int in : n.inputs) {
      if (in < 0) {
        specs.push_back({Shape{}, kDefaultFloat, false});
        continue;
      }
      const Value& v = g.values[static_cast<std::size_t>(in)];
      specs.push_back({v.shape, v.dtype, true});
    }
    const Value& out = g.values[static_cast<std::size_t>(n.outputs[0])];
    std::optional<OutputSpec> made;
    try {
      made = n.op->infer(specs);
    } catch (const Error& e) {
      throw Error(e.kind(), kImportOp,
                  str(path, ": node ", k, " (op '", n.op->name(), "'): ", e.what()));
    }
    if (!made) continue;
    const bool same = made->shape == out.shape && (!made->dtype || *made->dtype == out.dtype);
    if (!same)
      throw Error(ErrorKind::Shape, kImportOp,
                  str(path, ": node ", k, " (op '", n.op->name(), "') makes a ",
                      made->dtype ? to_string(*made->dtype) : std::string_view("tensor"),
                      " of shape ", made->shape, " from its inputs, the file records a ", out.dtype,
                      " value of shape ", out.shape, " (value ", n.outputs[0], ")"));
  }
}

Graph graph_from_json(const json& j, const io::SafetensorsFile& file, const std::string& path,
                      ImportedState& state) {
  Graph g;
  for (const json& gen : j.at("generators")) {
    if (gen.at("default").get<bool>()) {
      g.generators.push_back(&default_generator());
      continue;
    }
    const std::vector<uint64_t> st = gen.at("state").get<std::vector<uint64_t>>();
    expect(st.size() == 5, path, "a generator's state has ", st.size(), " numbers, not 5");
    auto own = std::make_unique<Generator>();
    own->set_state({st[0], st[1], st[2], std::bit_cast<double>(st[3]), st[4] != 0});
    g.generators.push_back(own.get());
    state.own_generators.push_back(std::move(own));
  }
  for (const json& v : j.at("values")) {
    const int kind = integer<int>(v.at(0), path);
    expect(kind >= 0 && kind <= static_cast<int>(ValueKind::Result), path, "unknown value kind ",
           kind);
    const std::vector<int64_t> shape = v.at(3).get<std::vector<int64_t>>();
    const DType dtype = dtype_named(v.at(4).get<std::string>());
    // Sizes no process could hold are refused here, before an op's rule or the allocator sees
    // them (a negative size, a product past int64).
    const auto max_numel = static_cast<int64_t>(kMaxValueBytes / itemsize(dtype));
    int64_t numel = 1;
    for (int64_t d : shape) {
      expect(d >= 0 && (d == 0 || numel <= max_numel / d), path, "value ", g.values.size(),
             "'s shape ", v.at(3).dump(), " (", to_string(dtype),
             ") is not a tensor's, or is larger than 2^40 bytes");
      numel *= d;
    }
    g.values.push_back({static_cast<ValueKind>(kind), integer<int>(v.at(1), path),
                        integer<int>(v.at(2), path), Shape(shape), dtype,
                        integer<int>(v.at(5), path)});
  }
  const int n_values = static_cast<int>(g.values.size());
  auto value_id = [&](int id, bool optional) {
    expect((optional && id == -1) || (id >= 0 && id < n_values), path, "value id ", id,
           " out of range");
    return id;
  };
  auto ids = [&](const json& list, bool optional) {
    std::vector<int> out;
    for (const json& id : list) out.push_back(value_id(integer<int>(id, path), optional));
    return out;
  };
  std::vector<bool> produced(g.values.size(), false);
  for (const json& n : j.at("nodes")) {
    const std::string key = n.at("op").get<std::string>();
    FieldList fields;
    OpImportContext context;
    GraphNode node;
    try {
      const int generator = integer<int>(n.at("generator"), path);
      expect(generator >= -1 && generator < static_cast<int>(g.generators.size()), path,
             "generator ", generator, " out of range");
      if (generator >= 0) context.generator = g.generators[static_cast<std::size_t>(generator)];
      for (const json& f : n.at("fields")) fields.push_back(field_from_json(f));
      node.op = exported_op_factory(key)(fields, context);
    } catch (const Error& e) {
      throw Error(e.kind(), kImportOp,
                  str(path, ": node ", g.nodes.size(), " (op '", key, "'): ", e.what()));
    }
    node.inputs = ids(n.at("in"), true);
    node.outputs = ids(n.at("out"), false);
    node.backward = n.at("backward").get<bool>();
    node.random = n.at("random").get<bool>();
    // run_kernel copies the inputs into an array of the op's arity.
    expect(
        node.op->arity() < 0 || node.op->arity() == static_cast<std::ptrdiff_t>(node.inputs.size()),
        path, "op '", key, "' takes ", node.op->arity(), " inputs, not ", node.inputs.size());
    expect(!node.outputs.empty(), path, "op '", key, "' has no result");
    expect(node.random == (node.op->generator() != nullptr), path, "op '", key,
           "' is a random draw without its generator, or the other way round");
    for (int out : node.outputs) {
      expect(g.values[static_cast<std::size_t>(out)].kind == ValueKind::Result &&
                 !produced[static_cast<std::size_t>(out)],
             path, "value ", out, " is not one op's result");
      produced[static_cast<std::size_t>(out)] = true;
    }
    g.nodes.push_back(std::move(node));
  }
  g.inputs = ids(j.at("inputs"), true);
  g.outputs = ids(j.at("outputs"), false);
  if (j.contains("output_detached")) {  // (files written before it have none)
    expect(j.at("output_detached").is_array(), path, "'output_detached' is not a list");
    g.output_detached = j.at("output_detached").get<std::vector<bool>>();
    expect(g.output_detached.size() == g.outputs.size(), path,
           "'output_detached' and 'outputs' disagree in length");
  }
  g.cotangents = ids(j.at("cotangents"), true);
  g.grad_leaves = ids(j.at("grad_leaves"), false);
  g.grads = ids(j.at("grads"), true);
  expect(g.grads.size() == g.grad_leaves.size() && g.cotangents.size() == g.outputs.size(), path,
         "the backward's lists disagree in length");
  const std::vector<bool> capture_grad = j.at("captures").get<std::vector<bool>>();
  for (std::size_t i = 0; i < capture_grad.size(); ++i) {
    Tensor c = tensor_named(file, "capture." + std::to_string(i), path).detach();
    g.captures.push_back(capture_grad[i] ? c.requires_grad_(true) : c);
  }
  const std::size_t n_constants = integer<std::size_t>(j.at("constants"), path);
  for (std::size_t i = 0; i < n_constants; ++i)
    g.constants.push_back(tensor_named(file, "constant." + std::to_string(i), path));
  // Every value is what it says: an argument, a tensor of the file (in its dtype: safetensors
  // widens 16-bit floats on load), a cotangent, or one op's result, in order.
  for (Value& v : g.values) {
    switch (v.kind) {
      case ValueKind::Input:
        expect(v.index >= 0 && static_cast<std::size_t>(v.index) < g.inputs.size(), path, "input ",
               v.index, " out of range");
        break;
      case ValueKind::Capture:
      case ValueKind::Constant: {
        std::vector<Tensor>& list = v.kind == ValueKind::Capture ? g.captures : g.constants;
        expect(v.index >= 0 && static_cast<std::size_t>(v.index) < list.size(), path, "tensor ",
               v.index, " out of range");
        Tensor& t = list[static_cast<std::size_t>(v.index)];
        expect(t.shape() == v.shape, path, "a saved tensor's shape ", t.shape(), " is not ",
               v.shape);
        expect(t.dtype() == v.dtype || (t.dtype() == DType::Float32 && is_reduced_float(v.dtype)),
               path, "a saved ", t.dtype(), " tensor stands for a ", v.dtype, " value");
        if (t.dtype() != v.dtype) {
          const bool grad = t.requires_grad();
          t = detail::detach_alias(t).to(v.dtype);
          if (grad) t.requires_grad_(true);
        }
        break;
      }
      case ValueKind::Cotangent:
        expect(v.index >= 0 && static_cast<std::size_t>(v.index) < g.outputs.size(), path,
               "cotangent ", v.index, " out of range");
        break;
      case ValueKind::Result:
        break;
    }
  }
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    expect(v.kind != ValueKind::Result || produced[id], path, "value ", id, " is no op's result");
    // A view's base is made before it (so that following views to their base ends).
    expect(v.alias_of >= -1 && v.alias_of < static_cast<int>(id), path, "value ", id,
           " is a view of value ", v.alias_of, ", not of one made before it");
  }
  // Each argument, captured tensor, constant and cotangent is one value, which the replay
  // binds: a second value for one, or one for none, would be read unbound.
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const int id = g.inputs[i];
    expect(id < 0 || (g.values[static_cast<std::size_t>(id)].kind == ValueKind::Input &&
                      g.values[static_cast<std::size_t>(id)].index == static_cast<int>(i)),
           path, "input ", i, " is not an input value");
  }
  std::vector<int> per_capture(g.captures.size(), 0), per_constant(g.constants.size(), 0);
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    const auto index = static_cast<std::size_t>(v.index);
    if (v.kind == ValueKind::Input)
      expect(g.inputs[index] == static_cast<int>(id), path, "value ", id, " is a second input ",
             v.index);
    if (v.kind == ValueKind::Cotangent)
      expect(g.cotangents[index] == static_cast<int>(id), path, "value ", id,
             " is a second cotangent ", v.index);
    if (v.kind == ValueKind::Capture) ++per_capture[index];
    if (v.kind == ValueKind::Constant) ++per_constant[index];
  }
  for (int n : per_capture) expect(n == 1, path, "a captured tensor has ", n, " values, not 1");
  for (int n : per_constant) expect(n == 1, path, "a constant has ", n, " values, not 1");
  g.index_results();
  // Values are used only after they are made, and the forward reads no backward value: the
  // arguments, captured tensors and constants first, then each forward node's results; the
  // cotangents and the backward nodes' results only in the backward.
  std::vector<bool> forward_ready(g.values.size(), false), ready(g.values.size(), false);
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const ValueKind kind = g.values[id].kind;
    forward_ready[id] = kind != ValueKind::Result && kind != ValueKind::Cotangent;
    ready[id] = kind != ValueKind::Result;
  }
  for (const GraphNode& n : g.nodes) {
    for (int in : n.inputs)
      expect(in < 0 || (n.backward ? ready : forward_ready)[static_cast<std::size_t>(in)], path,
             "op '", n.op->name(), "' reads value ", in, " before it is made");
    for (int out : n.outputs) {
      ready[static_cast<std::size_t>(out)] = true;
      if (!n.backward) forward_ready[static_cast<std::size_t>(out)] = true;
    }
  }
  for (int id : g.outputs)
    expect(forward_ready[static_cast<std::size_t>(id)], path, "output value ", id,
           " is not made by the forward");
  for (std::size_t k = 0; k < g.cotangents.size(); ++k) {
    const int id = g.cotangents[k];
    expect(id < 0 || (g.values[static_cast<std::size_t>(id)].kind == ValueKind::Cotangent &&
                      g.values[static_cast<std::size_t>(id)].index == static_cast<int>(k)),
           path, "cotangent ", k, " is not a cotangent value");
  }
  for (int id : g.grad_leaves) {
    const ValueKind kind = g.values[static_cast<std::size_t>(id)].kind;
    expect(kind == ValueKind::Input || kind == ValueKind::Capture, path, "value ", id,
           " is differentiated but is neither an argument nor a captured tensor");
  }
  check_shapes(g, path);
  return g;
}

SizeFormula formula_from_json(const json& j, const std::string& path) {
  const int kind = integer<int>(j.at(0), path);
  expect(kind >= 0 && kind <= static_cast<int>(SizeFormula::Kind::Reciprocal), path,
         "unknown kind of formula ", kind);
  SizeFormula f{static_cast<SizeFormula::Kind>(kind), {}, {}};
  for (const json& c : j.at(1)) {
    const Field x = field_from_json(c);
    if (f.kind == SizeFormula::Kind::Real) {
      expect(std::holds_alternative<double>(x), path,
             "a real formula's coefficient is not a double");
      f.reals.push_back(std::get<double>(x));
    } else {
      expect(std::holds_alternative<int64_t>(x), path,
             "an integer formula's coefficient is not an integer");
      f.ints.push_back(std::get<int64_t>(x));
    }
  }
  return f;
}

std::vector<std::vector<FieldFormula>> field_formulas_from_json(const json& list, std::size_t n,
                                                                const std::string& path) {
  std::vector<std::vector<FieldFormula>> out(n);
  for (const json& h : list) {
    const auto item = integer<std::size_t>(h.at(0), path);
    expect(item < n, path, "a formula for item ", item, " of ", n);
    out[item].push_back({integer<std::size_t>(h.at(1), path),
                         integer<std::ptrdiff_t>(h.at(2), path), formula_from_json(h.at(3), path)});
  }
  return out;
}

/// The "dynamic" section (export.cpp): the formulas over the graph `g` (its constants' recipes
/// are read into it), and the dims that take the sizes.
void dynamic_from_json(const json& j, Graph g, const std::string& path, ImportedState& state) {
  const auto symbols = integer<std::size_t>(j.at("symbols"), path);
  for (const json& d : j.at("dims")) {
    const DynamicDim dim{integer<int>(d.at(0), path), integer<int64_t>(d.at(1), path),
                         integer<int>(d.at(2), path)};
    expect(dim.input >= 0 && static_cast<std::size_t>(dim.input) < state.input_shapes.size() &&
               dim.dim >= 0 &&
               static_cast<std::size_t>(dim.dim) <
                   state.input_shapes[static_cast<std::size_t>(dim.input)].size() &&
               dim.symbol >= 0 && static_cast<std::size_t>(dim.symbol) < symbols,
           path, "dynamic dim ", d.dump(), " out of range");
    state.dynamic_dims.push_back(dim);
  }
  state.base_sizes.assign(symbols, -1);
  for (const DynamicDim& d : state.dynamic_dims)
    state.base_sizes[static_cast<std::size_t>(d.symbol)] =
        state.input_shapes[static_cast<std::size_t>(d.input)][d.dim];
  for (int64_t n : state.base_sizes) expect(n >= 2, path, "a dynamic size of ", n);
  g.constant_recipes.assign(g.constants.size(), {});
  for (const json& r : j.at("recipes")) {
    const auto i = integer<std::size_t>(r.at(0), path);
    expect(i < g.constants.size(), path, "a recipe for constant ", i, " of ", g.constants.size());
    FieldList fields;
    for (const json& f : r.at(2)) fields.push_back(field_from_json(f));
    g.constant_recipes[i] = {intern_field_string(r.at(1).get<std::string>()), std::move(fields)};
  }
  std::vector<DimFormula> dims;
  for (const json& d : j.at("value_dims"))
    dims.push_back({integer<std::size_t>(d.at(0), path), integer<std::size_t>(d.at(1), path),
                    formula_from_json(d.at(2), path)});
  const std::size_t nodes = g.nodes.size(), constants = g.constants.size();
  state.dynamic = std::make_shared<const DynamicTemplate>(DynamicTemplate::from_pieces(
      std::move(g), symbols, std::move(dims), field_formulas_from_json(j.at("ops"), nodes, path),
      field_formulas_from_json(j.at("constants"), constants, path)));
}

}  // namespace
}  // namespace detail

ImportedFunction import_function(const std::string& path, const CompileOptions& options) {
  detail::link_every_ops_file();
  const io::SafetensorsFile file = io::load_safetensors(path);
  const auto format = file.metadata.find(detail::kFormatKey);
  detail::expect(format != file.metadata.end() && file.metadata.count(detail::kGraphKey) == 1, path,
                 "not a file export_function wrote (no '", detail::kFormatKey, "' metadata)");
  detail::expect(format->second == detail::kFormatVersion, path, "export format version '",
                 format->second, "', this build of adjoint reads '", detail::kFormatVersion, "'");
  auto state = std::make_shared<detail::ImportedState>();
  state->path = path;
  detail::Graph g;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(file.metadata.at(detail::kGraphKey));
    detail::expect_no_floats(j, path);
    g = detail::graph_from_json(j, file, path, *state);
    for (const nlohmann::json& s : j.at("input_strides"))
      state->input_strides.push_back(Shape(s.get<std::vector<int64_t>>()));
    detail::expect(state->input_strides.size() == g.inputs.size(), path, "input strides for ",
                   state->input_strides.size(), " of ", g.inputs.size(), " inputs");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // nlohmann::json's, or any other a damaged file raises
    detail::expect(false, path, "malformed graph: ", e.what());
  }
  for (int id : g.inputs) {
    const bool defined = id >= 0;
    state->input_shapes.push_back(defined ? g.values[static_cast<std::size_t>(id)].shape : Shape{});
    state->input_dtypes.push_back(defined ? g.values[static_cast<std::size_t>(id)].dtype
                                          : kDefaultFloat);
    bool grad = false;
    for (int leaf : g.grad_leaves) grad = grad || (defined && leaf == id);
    state->input_requires_grad.push_back(grad);
  }
  try {
    if (j.contains("dynamic")) detail::dynamic_from_json(j.at("dynamic"), g, path, *state);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::expect(false, path, "malformed dynamic sizes: ", e.what());
  }
  state->options = options;
  state->parameters = g.captures;
  state->plan = std::make_shared<const detail::Plan>(detail::make_plan(std::move(g), options));
  ImportedFunction f;
  f.state_ = std::move(state);
  return f;
}

namespace detail {
namespace {

/// The sizes of a file's dynamic symbols in this call, and the shapes the inputs must have at
/// them; throws naming the file when the dims of one symbol disagree or a size is below 2.
SymbolSizes call_sizes(const ImportedState& s, const std::vector<Tensor>& inputs,
                       std::vector<Shape>& shapes) {
  SymbolSizes sizes(s.base_sizes.size(), -1);
  for (const DynamicDim& d : s.dynamic_dims) {
    const Tensor& x = inputs[static_cast<std::size_t>(d.input)];
    if (!x.defined() ||
        x.dim() != static_cast<int64_t>(shapes[static_cast<std::size_t>(d.input)].size()))
      continue;  // the shape check below names it
    int64_t& n = sizes[static_cast<std::size_t>(d.symbol)];
    const int64_t here = x.size(d.dim);
    ADJOINT_CHECK(n < 0 || n == here, Value, kImportOp, s.path, ": dynamic size ", d.symbol, " is ",
                  n, " in one input and ", here, " in input ", d.input);
    ADJOINT_CHECK(here >= 2, Value, kImportOp, s.path, ": dim ", d.dim, " of input ", d.input,
                  " is ", here, ", and the file's dynamic sizes take 2 or more");
    n = here;
    shapes[static_cast<std::size_t>(d.input)][d.dim] = here;
  }
  for (std::size_t k = 0; k < sizes.size(); ++k)
    if (sizes[k] < 0) sizes[k] = s.base_sizes[k];
  return sizes;
}

/// The plan for `sizes`: the file's own, or one built from its formulas (kept).
std::shared_ptr<const Plan> plan_at(const ImportedState& s, const SymbolSizes& sizes) {
  if (sizes == s.base_sizes) return s.plan;
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<const Plan>& plan = s.plans[sizes];
  if (!plan) {
    Graph g = s.dynamic->at(sizes);
    check_shapes(g,
                 s.path);  // the formulas' graph, as the file's (Note [Checking an imported graph])
    plan = std::make_shared<const Plan>(make_plan(std::move(g), s.options));
  }
  return plan;
}

}  // namespace
}  // namespace detail

std::vector<Tensor> ImportedFunction::operator()(const std::vector<Tensor>& inputs) const {
  const detail::ImportedState& s = *state_;
  ADJOINT_CHECK(inputs.size() == s.input_shapes.size(), Value, detail::kImportOp, s.path,
                ": the function takes ", s.input_shapes.size(), " inputs, got ", inputs.size());
  std::vector<Shape> shapes = s.input_shapes;
  const detail::SymbolSizes sizes =
      s.dynamic ? detail::call_sizes(s, inputs, shapes) : detail::SymbolSizes{};
  std::vector<Tensor> args = inputs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    Tensor& x = args[i];
    if (!x.defined()) {
      ADJOINT_CHECK(s.plan->graph.inputs[i] < 0, Value, detail::kImportOp, s.path, ": input ", i,
                    " is undefined, the exported one was a ", s.input_dtypes[i],
                    " tensor of shape ", s.input_shapes[i]);
      continue;
    }
    ADJOINT_CHECK(
        s.plan->graph.inputs[i] >= 0 && x.shape() == shapes[i] && x.dtype() == s.input_dtypes[i],
        Value, detail::kImportOp, s.path, ": input ", i, " is a ", x.dtype(), " tensor of shape ",
        x.shape(), ", the exported function takes a ", s.input_dtypes[i], " tensor of shape ",
        shapes[i]);
    // An input the traced backward does not differentiate would get no gradient: refused. One
    // it does may come without requires_grad (inference, or only the parameters' gradients).
    ADJOINT_CHECK(!x.requires_grad() || s.input_requires_grad[i], Value, detail::kImportOp, s.path,
                  ": input ", i,
                  " requires grad, but the exported function was traced with one "
                  "that did not, so its backward gives it no gradient");
    // Ops decided by layout when traced (reshape views or copies): a contiguous trace gets a
    // contiguous copy; any other layout must be the traced one.
    // (An input with dynamic dims was traced contiguous.)
    const Shape traced =
        x.shape() == s.input_shapes[i] ? s.input_strides[i] : contiguous_strides(x.shape());
    if (x.strides() != traced) {
      ADJOINT_CHECK(contiguous_strides(x.shape()) == traced, Value, detail::kImportOp, s.path,
                    ": input ", i, " has strides ", x.strides(),
                    ", the exported function was traced with ", traced);
      x = x.contiguous();
    }
  }
  const std::shared_ptr<const detail::Plan> plan = s.dynamic ? detail::plan_at(s, sizes) : s.plan;
  // Under vmap or jvp, for a backward with create_graph, and when an op's state differs from
  // the trace's (cross_entropy's count of rows), the graph runs op by op through the dispatch
  // stack: the eager form of a function whose code is not here.
  auto op_by_op = [plan](const std::vector<Tensor>& in) {
    ADJOINT_CHECK(!plan->forward_reads_saved, Value, detail::kImportOp,
                  "this graph reads what its ops saved for backward, so it cannot run op by op "
                  "(under vmap or jvp, or with create_graph)");
    return detail::run_plan_dispatched(*plan, in);
  };
  if (detail::transformed(args, &plan->graph)) return op_by_op(args);
  return detail::run_plan(plan, args, op_by_op);
}

const std::vector<Tensor>& ImportedFunction::parameters() const { return state_->parameters; }
std::vector<Generator*> ImportedFunction::generators() const {
  return state_->plan->graph.generators;
}
std::vector<Shape> ImportedFunction::input_shapes() const { return state_->input_shapes; }
std::vector<DynamicDim> ImportedFunction::dynamic_dims() const { return state_->dynamic_dims; }
std::vector<DType> ImportedFunction::input_dtypes() const { return state_->input_dtypes; }
std::vector<bool> ImportedFunction::input_requires_grad() const {
  return state_->input_requires_grad;
}
std::string ImportedFunction::dump() const { return detail::graph_to_text(state_->plan->graph); }

}  // namespace adjoint
