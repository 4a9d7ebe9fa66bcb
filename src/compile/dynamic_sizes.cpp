// Fitting a traced graph's sizes as formulas in the dynamic sizes, and the graph at new sizes.
#include "compile/dynamic_sizes.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <optional>

#include "adjoint/error.h"
#include "core/op_fields.h"

namespace adjoint::detail {

// Note [Dynamic sizes]
// C++ hands the traced function its sizes as plain integers (x.size(0) is an int64_t), so the
// tracer cannot see how the function computes with them, as torch.compile's symbolic ints do:
// reshape(x, {B * T, C}) reaches the graph as a number. compile learns the formulas from
// traces instead. Each dynamic size is a symbol. When a call brings a second set of sizes,
// compile takes the box [lo, hi] the two calls span (a symbol that did not change spans
// [n, n + 1]), traces the function at the box's corners that no call was traced at (probes,
// on the arguments' rows repeated), and at two checks off the corners: near (between lo and
// hi where there is room, else just past hi) and far (2 hi + 1). With k symbols that is 2^k
// corners (two of them the calls') and the checks. All the graphs must be the same op for op;
// every number that differs between them (a dim of a value's shape, an entry of an op's
// attributes: a view's shape, a random draw's shape, a mean's scale) must be given at every
// point by one formula:
// - a multilinear polynomial in the sizes with integer coefficients (dims, B T in a reshape,
//   an expand to the batch), which the corners determine (solved one symbol at a time); the
//   checks rule out the rest: s^2, and the piecewise-linear sizes a library computes (chunk(3)
//   cuts pieces of ceil(n / 3), linear between multiples of 3; a slice clamps its end), which
//   a check far from the corners lands on another piece of;
// - its reciprocal, a double (the scale of a mean over the dynamic dims, an unbiased variance's
//   1 / (n - 1)), to the bit, so the graph at a new size holds the double eager code computes;
// - the same polynomial with double coefficients, to the bit, for any other double.
// A constant that differs between the sizes is made again from its factory's recipe (zeros of
// the batch's shape, arange(T)). Anything else refuses the sizes: a constant without a recipe
// (tensor(values) of a size's length), an op that cannot be rebuilt from its attributes
// (Note [Exporting ops]) whose attributes differ, a different op. A refused compiled function
// traces each size as before, with a warning naming why. A fitted one makes the graph at new
// sizes from the formulas: the ops whose attributes hold a size are rebuilt by their export
// factories, the others shared, and the passes (fusion, the memory plan) run on it as on a
// trace.
//
// The probes run at the callers' sizes and above (one below, where the function refuses the
// sizes above), not at made-up small ones: a function may assume more rows than 2
// (x.split(64)[1]), and small sizes are where code takes special paths. The far check costs
// the most: a trace at about twice the largest size seen.
//
// What the traces cannot show is a branch on a size that they all fall on the same side of
// (`if (x.size(0) > 64)` traced at 16 and 8, checked at 12 and 33): the graph at 100 would be
// the wrong one; likewise a piecewise size whose breakpoints all lie outside the checked range.
// Such a size must not be marked dynamic (docs/compile.md, "Dynamic sizes"). Sizes 0 and 1 are
// never dynamic (broadcasting and squeeze treat 1 differently), as in torch.compile.

namespace {

struct Refused {
  std::string why;
};

bool same_bits(double x, double y) {
  return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
}

/// c prod_{i in subset} s_i, in int64; nullopt when it overflows.
std::optional<int64_t> term(int64_t c, std::size_t subset, const SymbolSizes& s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((subset >> i & 1) && __builtin_mul_overflow(c, s[i], &c)) return std::nullopt;
  return c;
}

/// sum over subsets S of c_S prod_{i in S} s_i, in int64; nullopt when it overflows.
std::optional<int64_t> polynomial(const std::vector<int64_t>& c, const SymbolSizes& s) {
  int64_t v = 0;
  for (std::size_t subset = 0; subset < c.size(); ++subset) {
    const auto t = term(c[subset], subset, s);
    if (!t || __builtin_add_overflow(v, *t, &v)) return std::nullopt;
  }
  return v;
}

/// The coefficients c_S from the values at the corners of [lo, hi], one symbol at a time: along
/// symbol i, the values v_lo, v_hi of each pair of corners become a + b s_i through both, with
/// b = (v_hi - v_lo) / (hi_i - lo_i), a = v_lo - b lo_i. Integers must divide exactly (and
/// not overflow).
std::optional<std::vector<int64_t>> coefficients(std::vector<int64_t> v, const SymbolSizes& lo,
                                                 const SymbolSizes& hi) {
  for (std::size_t i = 0; i < lo.size(); ++i) {
    const std::size_t bit = std::size_t{1} << i;
    const int64_t run = hi[i] - lo[i];
    for (std::size_t m = 0; m < v.size(); ++m) {
      if (m & bit) continue;
      int64_t rise = 0, shift = 0;
      if (__builtin_sub_overflow(v[m | bit], v[m], &rise) || rise % run != 0) return std::nullopt;
      const int64_t b = rise / run;
      if (__builtin_mul_overflow(b, lo[i], &shift) || __builtin_sub_overflow(v[m], shift, &v[m]))
        return std::nullopt;
      v[m | bit] = b;
    }
  }
  return v;
}

std::vector<double> coefficients(std::vector<double> v, const SymbolSizes& lo,
                                 const SymbolSizes& hi) {
  for (std::size_t i = 0; i < lo.size(); ++i) {
    const std::size_t bit = std::size_t{1} << i;
    const auto run = static_cast<double>(hi[i] - lo[i]);
    for (std::size_t m = 0; m < v.size(); ++m) {
      if (m & bit) continue;
      const double b = (v[m | bit] - v[m]) / run;
      v[m] -= b * static_cast<double>(lo[i]);
      v[m | bit] = b;
    }
  }
  return v;
}

/// The points to fit from: `corners` of them at the box's corners, then the checks.
struct Points {
  const std::vector<SymbolSizes>& sizes;
  const SymbolSizes& lo;
  const SymbolSizes& hi;
  std::size_t corners;
};

std::optional<SizeFormula> fit_integer(const std::vector<int64_t>& v, const Points& at) {
  const auto c = coefficients(
      std::vector<int64_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at.corners)), at.lo,
      at.hi);
  if (!c) return std::nullopt;
  for (std::size_t j = 0; j < v.size(); ++j)
    if (polynomial(*c, at.sizes[j]) != v[j]) return std::nullopt;
  return SizeFormula{SizeFormula::Kind::Integer, *c, {}};
}

bool fits(const SizeFormula& f, const std::vector<double>& v, const Points& at) {
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (f.kind == SizeFormula::Kind::Reciprocal && !polynomial(f.ints, at.sizes[j])) return false;
    if (!same_bits(f.at(at.sizes[j]), v[j])) return false;
  }
  return true;
}

std::optional<SizeFormula> fit_double(const std::vector<double>& v, const Points& at) {
  // The reciprocal of an integer count first: 1 / (B T) is no polynomial.
  std::vector<int64_t> counts(v.size());
  bool integral = true;
  for (std::size_t j = 0; j < v.size() && integral; ++j) {
    const double count = 1.0 / v[j];
    integral = std::abs(count) < 0x1p52;
    if (integral) counts[j] = std::llround(count);
  }
  if (integral) {
    if (const auto p = fit_integer(counts, at)) {
      const SizeFormula reciprocal{SizeFormula::Kind::Reciprocal, p->ints, {}};
      if (fits(reciprocal, v, at)) return reciprocal;
    }
  }
  const SizeFormula real{
      SizeFormula::Kind::Real,
      {},
      coefficients(
          std::vector<double>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at.corners)),
          at.lo, at.hi)};
  if (fits(real, v, at)) return real;
  return std::nullopt;
}

std::string describe_node(const Graph& g, std::size_t n) {
  return str("op ", n, " (", g.nodes[n].op->name(), g.nodes[n].backward ? ", in the backward" : "",
             ")");
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

void require(bool ok, const std::string& why) {
  if (!ok) throw Refused{why};
}

/// Every graph against the base: the same values, ops, inputs, outputs, captures and
/// constants, but for the numbers fitted afterwards.
void check_same_structure(const std::vector<const Graph*>& gs, const Graph& g0,
                          const std::vector<SymbolSizes>& sizes) {
  for (std::size_t k = 0; k < gs.size(); ++k) {
    const Graph& g = *gs[k];
    require(g.values.size() == g0.values.size() && g.nodes.size() == g0.nodes.size(),
            str("the graphs differ in size (", g0.nodes.size(), " and ", g.nodes.size(),
                " ops at sizes ", describe_sizes(sizes[k]), ")"));
    require(g.inputs == g0.inputs && g.outputs == g0.outputs &&
                g.output_detached == g0.output_detached && g.cotangents == g0.cotangents &&
                g.grad_leaves == g0.grad_leaves && g.grads == g0.grads &&
                g.generators == g0.generators,
            "the graphs' inputs, outputs or gradients differ");
    require(g.captures.size() == g0.captures.size() && g.constants.size() == g0.constants.size(),
            "the graphs read different tensors from outside");
    for (std::size_t i = 0; i < g0.captures.size(); ++i)
      require(g.captures[i].impl() == g0.captures[i].impl(),
              str("captured tensor ", i, " differs between the sizes"));
    for (std::size_t v = 0; v < g0.values.size(); ++v) {
      const Value& a = g0.values[v];
      const Value& b = g.values[v];
      require(b.kind == a.kind && b.index == a.index && b.node == a.node && b.dtype == a.dtype &&
                  b.alias_of == a.alias_of && b.shape.size() == a.shape.size(),
              str("value ", v, " differs between the sizes"));
    }
    for (std::size_t n = 0; n < g0.nodes.size(); ++n) {
      const GraphNode& a = g0.nodes[n];
      const GraphNode& b = g.nodes[n];
      const char* key = a.op->export_key();
      const char* other_key = b.op->export_key();
      require(std::strcmp(b.op->name(), a.op->name()) == 0 && b.inputs == a.inputs &&
                  b.outputs == a.outputs && b.backward == a.backward && b.random == a.random &&
                  b.effect == a.effect && (key == nullptr) == (other_key == nullptr) &&
                  (key == nullptr || std::strcmp(key, other_key) == 0),
              describe_node(g0, n) + " differs between the sizes");
      require(key != nullptr || &g == &g0 || a.op->same_as(*b.op),
              describe_node(g0, n) +
                  " cannot be rebuilt at other sizes (it cannot be exported), and its "
                  "attributes differ between the sizes or cannot be compared");
    }
  }
}

/// The entries that differ between `fields` (one list per graph) with their formulas; throws
/// Refused naming `where`.
std::vector<FieldFormula> fit_fields(const std::vector<FieldList>& fields, const Points& points,
                                     const std::string& where) {
  std::vector<FieldFormula> holes;
  for (const FieldList& f : fields)
    require(f.size() == fields[0].size(), where + " has other attributes at other sizes");
  const std::string at_sizes = " at sizes " + describe_sizes(points.sizes);
  for (std::size_t i = 0; i < fields[0].size(); ++i) {
    std::vector<const Field*> values;
    for (const FieldList& f : fields) {
      require(f[i].index() == fields[0][i].index(), where + " has other attributes at other sizes");
      values.push_back(&f[i]);
    }
    if (std::ranges::all_of(values, [&](const Field* x) { return *x == fields[0][i]; })) continue;
    const std::string attribute = str(where, ": attribute ", i);
    if (std::holds_alternative<int64_t>(fields[0][i])) {
      std::vector<int64_t> v;
      for (const Field* x : values) v.push_back(std::get<int64_t>(*x));
      const auto f = fit_integer(v, points);
      require(f.has_value(), attribute + " fits no polynomial in the sizes" + at_sizes);
      holes.push_back({i, -1, *f});
    } else if (std::holds_alternative<double>(fields[0][i])) {
      std::vector<double> v;
      for (const Field* x : values) v.push_back(std::get<double>(*x));
      const auto f = fit_double(v, points);
      require(f.has_value(),
              attribute + " fits no polynomial in the sizes, nor its reciprocal" + at_sizes);
      holes.push_back({i, -1, *f});
    } else if (const auto* list = std::get_if<std::vector<int64_t>>(&fields[0][i])) {
      for (const Field* x : values)
        require(std::get<std::vector<int64_t>>(*x).size() == list->size(),
                attribute + " has another length at other sizes");
      for (std::size_t e = 0; e < list->size(); ++e) {
        std::vector<int64_t> v;
        for (const Field* x : values) v.push_back(std::get<std::vector<int64_t>>(*x)[e]);
        if (std::ranges::all_of(v, [&](int64_t y) { return y == v[0]; })) continue;
        const auto f = fit_integer(v, points);
        require(f.has_value(), attribute + " fits no polynomial in the sizes" + at_sizes);
        holes.push_back({i, static_cast<std::ptrdiff_t>(e), *f});
      }
    } else {
      throw Refused{attribute + " differs between the sizes"};
    }
  }
  return holes;
}

/// `fields` with the formulas evaluated at s.
FieldList fields_at(FieldList fields, const std::vector<FieldFormula>& holes,
                    const SymbolSizes& s) {
  for (const FieldFormula& h : holes) {
    Field& f = fields[h.field];
    if (h.element >= 0) {
      std::get<std::vector<int64_t>>(f)[static_cast<std::size_t>(h.element)] =
          h.formula.integer_at(s);
    } else if (std::holds_alternative<int64_t>(f)) {
      f = h.formula.integer_at(s);
    } else {
      f = h.formula.at(s);
    }
  }
  return fields;
}

/// The recipe of constant i in g, or null when its factory gave none.
const ExternalExport* recipe_of(const Graph& g, std::size_t i) {
  if (i >= g.constant_recipes.size() || g.constant_recipes[i].key == nullptr) return nullptr;
  return &g.constant_recipes[i];
}

}  // namespace

std::string describe_sizes(const SymbolSizes& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out.push_back('x');
    out.append(std::to_string(s[i]));
  }
  return out;
}

std::string describe_sizes(const std::vector<SymbolSizes>& points) {
  std::string out;
  for (const SymbolSizes& s : points) {
    if (!out.empty()) out.append(", ");
    out.append(describe_sizes(s));
  }
  return out;
}

int64_t SizeFormula::integer_at(const SymbolSizes& s) const {
  const auto v = polynomial(ints, s);
  ADJOINT_CHECK(v.has_value(), Value, "compile", "the dynamic sizes ", describe_sizes(s),
                " make a number of the graph overflow an int64");
  return *v;
}

double SizeFormula::at(const SymbolSizes& s) const {
  if (kind == Kind::Real) {
    double v = 0;
    for (std::size_t subset = 0; subset < reals.size(); ++subset) {
      double t = reals[subset];
      for (std::size_t i = 0; i < s.size(); ++i)
        if (subset >> i & 1) t *= static_cast<double>(s[i]);
      v += t;
    }
    return v;
  }
  const auto v = static_cast<double>(integer_at(s));
  return kind == Kind::Integer ? v : 1.0 / v;
}

std::vector<SymbolSizes> DynamicTemplate::corners(const SymbolSizes& lo, const SymbolSizes& hi) {
  std::vector<SymbolSizes> points(std::size_t{1} << lo.size(), lo);
  for (std::size_t m = 0; m < points.size(); ++m)
    for (std::size_t i = 0; i < lo.size(); ++i)
      if (m >> i & 1) points[m][i] = hi[i];
  return points;
}

std::variant<DynamicTemplate, std::string> DynamicTemplate::fit(
    const std::vector<const Graph*>& gs, const std::vector<SymbolSizes>& sizes,
    const SymbolSizes& lo, const SymbolSizes& hi, std::size_t base) {
  const std::size_t corners = std::size_t{1} << lo.size();
  const Points points{sizes, lo, hi, corners};
  ADJOINT_CHECK(gs.size() == sizes.size() && gs.size() > corners && base < gs.size(), Internal,
                "compile", "fitting dynamic sizes from ", gs.size(), " graphs at ", sizes.size(),
                " sizes (", corners, " corners)");
  const Graph& g0 = *gs[base];
  DynamicTemplate t;
  try {
    check_same_structure(gs, g0, sizes);
    const std::string at_sizes = " at sizes " + describe_sizes(sizes);
    for (std::size_t v = 0; v < g0.values.size(); ++v) {
      for (std::size_t d = 0; d < g0.values[v].shape.size(); ++d) {
        std::vector<int64_t> dims;
        for (const Graph* g : gs) dims.push_back(g->values[v].shape[d]);
        if (std::ranges::all_of(dims, [&](int64_t x) { return x == dims[0]; })) continue;
        const auto f = fit_integer(dims, points);
        require(f.has_value(),
                str("dim ", d, " of value ", v, " fits no polynomial in the sizes", at_sizes));
        t.dims_.push_back({v, d, *f});
      }
    }
    t.nodes_.resize(g0.nodes.size());
    for (std::size_t n = 0; n < g0.nodes.size(); ++n) {
      if (g0.nodes[n].op->export_key() == nullptr) continue;  // the same everywhere (checked)
      std::vector<FieldList> fields;
      for (const Graph* g : gs) fields.push_back(g->nodes[n].op->export_fields());
      t.nodes_[n] = fit_fields(fields, points, describe_node(g0, n));
    }
    // A constant that differs between the sizes is made again from its factory's recipe
    // (zeros of the batch's shape, arange(T)); one without a recipe cannot be.
    t.constants_.resize(g0.constants.size());
    for (std::size_t i = 0; i < g0.constants.size(); ++i) {
      if (std::ranges::all_of(
              gs, [&](const Graph* g) { return same_constant(g->constants[i], g0.constants[i]); }))
        continue;
      const std::string no_recipe =
          str("constant ", i, " (", g0.constants[i].shape(),
              ") depends on the sizes, and no factory's recipe makes it (a tensor from C++ data, "
              "or one written in place)");
      const ExternalExport* r0 = recipe_of(g0, i);
      require(r0 != nullptr, no_recipe);
      std::vector<FieldList> fields;
      for (const Graph* g : gs) {
        const ExternalExport* r = recipe_of(*g, i);
        require(r != nullptr && std::strcmp(r->key, r0->key) == 0, no_recipe);
        fields.push_back(r->fields);
      }
      t.constants_[i] = fit_fields(fields, points, str("constant ", i, "'s factory"));
      require(!t.constants_[i].empty(),
              str("constant ", i, " differs between the sizes, but not its factory's arguments"));
    }
  } catch (const Refused& r) {
    return r.why;
  }
  t.base_ = g0;
  t.symbols_ = lo.size();
  return t;
}

DynamicTemplate DynamicTemplate::from_pieces(Graph base, std::size_t symbols,
                                             std::vector<DimFormula> dims,
                                             std::vector<std::vector<FieldFormula>> nodes,
                                             std::vector<std::vector<FieldFormula>> constants) {
  const std::size_t terms = std::size_t{1} << symbols;
  auto check = [&](bool ok, const std::string& what) {
    ADJOINT_CHECK(ok, Value, "import_function", "the dynamic sizes' formulas: ", what);
  };
  check(symbols >= 1 && symbols <= 3, str(symbols, " symbols"));
  check(nodes.size() == base.nodes.size() && constants.size() == base.constants.size(),
        "formulas for another number of ops or constants than the graph's");
  auto check_formula = [&](const SizeFormula& f) {
    check(f.terms() == terms, str("a formula of ", f.terms(), " terms, not ", terms));
  };
  for (const DimFormula& d : dims) {
    check(d.value < base.values.size() && d.dim < base.values[d.value].shape.size(),
          str("dim ", d.dim, " of value ", d.value, " out of range"));
    check(d.formula.kind == SizeFormula::Kind::Integer, "a dim's formula is not an integer one");
    check_formula(d.formula);
  }
  auto check_fields = [&](const FieldList& fields, const std::vector<FieldFormula>& holes) {
    for (const FieldFormula& h : holes) {
      check(h.field < fields.size(), str("attribute ", h.field, " out of range"));
      check_formula(h.formula);
      const Field& f = fields[h.field];
      const bool integer = h.formula.kind == SizeFormula::Kind::Integer;
      if (h.element >= 0) {
        const auto* list = std::get_if<std::vector<int64_t>>(&f);
        check(list != nullptr && static_cast<std::size_t>(h.element) < list->size() && integer,
              str("element ", h.element, " of attribute ", h.field,
                  " out of range or not an integer"));
      } else {
        check(integer ? std::holds_alternative<int64_t>(f) : std::holds_alternative<double>(f),
              str("attribute ", h.field, " is not a number of the formula's kind"));
      }
    }
  };
  for (std::size_t n = 0; n < nodes.size(); ++n)
    if (!nodes[n].empty()) {
      check(base.nodes[n].op->export_key() != nullptr, str("op ", n, " cannot be rebuilt"));
      check_fields(base.nodes[n].op->export_fields(), nodes[n]);
    }
  for (std::size_t i = 0; i < constants.size(); ++i)
    if (!constants[i].empty()) {
      check(i < base.constant_recipes.size() && base.constant_recipes[i].key != nullptr,
            str("constant ", i, " has formulas but no recipe"));
      check_fields(base.constant_recipes[i].fields, constants[i]);
    }
  DynamicTemplate t;
  t.base_ = std::move(base);
  t.symbols_ = symbols;
  t.dims_ = std::move(dims);
  t.nodes_ = std::move(nodes);
  t.constants_ = std::move(constants);
  return t;
}

Graph DynamicTemplate::at(const SymbolSizes& s) const {
  Graph g = base_;
  for (const DimFormula& h : dims_) {
    const int64_t d = h.formula.integer_at(s);
    ADJOINT_CHECK(d >= 0, Value, "compile", "the dynamic sizes ", describe_sizes(s), " make dim ",
                  h.dim, " of value ", h.value, " negative (", d, ")");
    g.values[h.value].shape[h.dim] = d;
  }
  // A tensor's size, as the importer checks a file's (formulas from a damaged file, or sizes
  // no memory holds, must not reach the allocator as a wrapped number).
  for (const DimFormula& h : dims_) {
    int64_t numel = 1;
    for (int64_t d : g.values[h.value].shape) {
      ADJOINT_CHECK(d == 0 || numel <= (int64_t{1} << 48) / d, Value, "compile",
                    "the dynamic sizes ", describe_sizes(s), " make value ", h.value, " of shape ",
                    g.values[h.value].shape, ", too large");
      numel *= d;
    }
  }
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].empty()) continue;
    const TracedOp& op = *base_.nodes[n].op;
    g.nodes[n].op = exported_op_factory(op.export_key())(
        fields_at(op.export_fields(), nodes_[n], s), {op.generator()});
  }
  for (std::size_t i = 0; i < constants_.size(); ++i)
    if (!constants_[i].empty())
      g.constants[i] =
          constant_from_recipe(fields_at(base_.constant_recipes[i].fields, constants_[i], s));
  return g;
}

}  // namespace adjoint::detail
