// Fitting a traced graph's sizes as formulas in one dynamic size, and the graph at a new size.
#include "compile/dynamic_sizes.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "adjoint/error.h"
#include "core/op_fields.h"

namespace adjoint::detail {

// Note [Dynamic sizes]
// C++ hands the traced function its sizes as plain integers (x.size(0) is an int64_t), so the
// tracer cannot see how the function computes with them, as torch.compile's symbolic ints do:
// reshape(x, {B * T, C}) reaches the graph as a number. compile learns the formulas from
// traces instead. The first two sizes a call brings are traced as usual; a third trace runs at
// a small size made up for it (a probe, on the arguments' first rows repeated). The three graphs
// must be the same op for op; every number that differs between them (a dim of a value's
// shape, an entry of an op's attributes: a view's shape, a random draw's shape, a mean's scale)
// must fit one formula at all three sizes:
// - a + b s, integers (dims, a reshape's B T, an expand to the batch); three points rule out
//   any other polynomial;
// - 1 / (a + b s) with integers a and b, a double (the scale of a mean over the dynamic dim, an
//   unbiased variance's 1 / (s - 1)), checked to the bit, so the graph at a new size holds the
//   double eager code computes.
// Anything else refuses the size: a constant that differs (arange(T) made from the size), an op
// that cannot be rebuilt from its attributes (Note [Exporting ops]) whose attributes differ, a
// different op. A refused compiled function traces each size as before, with a warning
// naming why. A fitted one makes the graph of a new size from the formulas: the ops whose
// attributes hold the size are rebuilt by their export factories, the others shared, and the
// passes (fusion, the memory plan) run on it as on a trace.
//
// What three traces cannot show is a branch on the size that the three sizes fall on the same
// side of (`if (x.size(0) > 64)` traced at 8, 16 and 2): the graph at 100 would be the wrong
// one. Such a size must not be marked dynamic (docs/compile.md, "Dynamic sizes"). Sizes 0 and 1
// are never dynamic (broadcasting and squeeze treat 1 differently), as in torch.compile.

namespace {

struct Refused {
  std::string why;
};

bool same_bits(double x, double y) {
  return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
}

/// The formula of an integer from its values at the three sizes, or nullopt when none fits.
std::optional<SizeFormula> fit_integer(std::array<int64_t, 3> v, std::array<int64_t, 3> s) {
  const int64_t rise = v[1] - v[0], run = s[1] - s[0];
  if (rise % run != 0) return std::nullopt;
  const int64_t b = rise / run, a = v[0] - b * s[0];
  if (a + b * s[2] != v[2]) return std::nullopt;
  return SizeFormula{SizeFormula::Kind::Affine, static_cast<double>(a), static_cast<double>(b)};
}

bool fits(const SizeFormula& f, std::array<double, 3> v, std::array<int64_t, 3> s) {
  for (std::size_t i = 0; i < 3; ++i)
    if (!same_bits(f.at(s[i]), v[i])) return false;
  return true;
}

std::optional<SizeFormula> fit_double(std::array<double, 3> v, std::array<int64_t, 3> s) {
  const double b = (v[1] - v[0]) / static_cast<double>(s[1] - s[0]);
  const SizeFormula affine{SizeFormula::Kind::Affine, v[0] - b * static_cast<double>(s[0]), b};
  if (std::isfinite(affine.a) && std::isfinite(b) && fits(affine, v, s)) return affine;
  // 1 / (a + b s): the reciprocal of an integer count (a mean's 1 / (c s), an unbiased
  // variance's 1 / (s - 1)), checked to the bit at the three sizes.
  std::array<int64_t, 3> counts{};
  for (std::size_t i = 0; i < 3; ++i) {
    const double count = 1.0 / v[i];
    if (!(std::abs(count) < 0x1p52)) return std::nullopt;
    counts[i] = std::llround(count);
  }
  const auto line = fit_integer(counts, s);
  if (!line) return std::nullopt;
  const SizeFormula reciprocal{SizeFormula::Kind::Reciprocal, line->a, line->b};
  if (fits(reciprocal, v, s)) return reciprocal;
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

}  // namespace

double SizeFormula::at(int64_t s) const {
  if (kind == Kind::Affine) return a + b * static_cast<double>(s);
  return 1.0 / static_cast<double>(static_cast<int64_t>(a) + static_cast<int64_t>(b) * s);
}

std::variant<DynamicTemplate, std::string> DynamicTemplate::fit(std::array<const Graph*, 3> gs,
                                                                std::array<int64_t, 3> sizes) {
  const Graph& g0 = *gs[0];
  DynamicTemplate t;
  try {
    for (const Graph* g : gs) {
      require(
          g->values.size() == g0.values.size() && g->nodes.size() == g0.nodes.size(),
          str("the graphs differ in size (", g0.nodes.size(), " and ", g->nodes.size(), " ops)"));
      require(g->inputs == g0.inputs && g->outputs == g0.outputs &&
                  g->output_detached == g0.output_detached && g->cotangents == g0.cotangents &&
                  g->grad_leaves == g0.grad_leaves && g->grads == g0.grads &&
                  g->generators == g0.generators,
              "the graphs' inputs, outputs or gradients differ");
      require(
          g->captures.size() == g0.captures.size() && g->constants.size() == g0.constants.size(),
          "the graphs read different tensors from outside");
      for (std::size_t i = 0; i < g0.captures.size(); ++i)
        require(g->captures[i].impl() == g0.captures[i].impl(),
                str("captured tensor ", i, " differs between the sizes"));
      for (std::size_t i = 0; i < g0.constants.size(); ++i)
        require(same_constant(g->constants[i], g0.constants[i]),
                str("constant ", i, " (", g0.constants[i].shape(), " at size ", sizes[0], ", ",
                    g->constants[i].shape(),
                    " at another) depends on the size; a tensor made "
                    "from C++ values (arange(n)) is a constant of the trace"));
    }
    for (std::size_t v = 0; v < g0.values.size(); ++v) {
      const Value& a = g0.values[v];
      for (const Graph* g : gs) {
        const Value& b = g->values[v];
        require(b.kind == a.kind && b.index == a.index && b.node == a.node && b.dtype == a.dtype &&
                    b.alias_of == a.alias_of && b.shape.size() == a.shape.size(),
                str("value ", v, " differs between the sizes"));
      }
      for (std::size_t d = 0; d < a.shape.size(); ++d) {
        const std::array<int64_t, 3> dims{a.shape[d], gs[1]->values[v].shape[d],
                                          gs[2]->values[v].shape[d]};
        if (dims[0] == dims[1] && dims[1] == dims[2]) continue;
        const auto f = fit_integer(dims, sizes);
        require(f.has_value(), str("dim ", d, " of value ", v, " is ", dims[0], ", ", dims[1],
                                   " and ", dims[2], " at sizes ", sizes[0], ", ", sizes[1],
                                   " and ", sizes[2], ": no formula a + b s fits"));
        t.dims_.push_back({v, d, *f});
      }
    }
    t.nodes_.resize(g0.nodes.size());
    for (std::size_t n = 0; n < g0.nodes.size(); ++n) {
      const GraphNode& a = g0.nodes[n];
      const char* key = a.op->export_key();
      std::array<FieldList, 3> fields;
      for (std::size_t k = 0; k < 3; ++k) {
        const GraphNode& b = gs[k]->nodes[n];
        const char* other_key = b.op->export_key();
        require(std::strcmp(b.op->name(), a.op->name()) == 0 && b.inputs == a.inputs &&
                    b.outputs == a.outputs && b.backward == a.backward && b.random == a.random &&
                    (key == nullptr) == (other_key == nullptr) &&
                    (key == nullptr || std::strcmp(key, other_key) == 0),
                describe_node(g0, n) + " differs between the sizes");
        if (key == nullptr) {
          require(k == 0 || a.op->same_as(*b.op),
                  describe_node(g0, n) +
                      " cannot be rebuilt at another size (it cannot be exported), and its "
                      "attributes differ between the sizes or cannot be compared");
        } else {
          fields[k] = b.op->export_fields();
        }
      }
      if (key == nullptr) continue;
      require(fields[1].size() == fields[0].size() && fields[2].size() == fields[0].size(),
              describe_node(g0, n) + " has other attributes at another size");
      std::vector<FieldHole>& holes = t.nodes_[n].holes;
      for (std::size_t i = 0; i < fields[0].size(); ++i) {
        const Field& f0 = fields[0][i];
        const Field& f1 = fields[1][i];
        const Field& f2 = fields[2][i];
        require(f0.index() == f1.index() && f0.index() == f2.index(),
                describe_node(g0, n) + " has other attributes at another size");
        if (f0 == f1 && f0 == f2) continue;
        const std::string where = str(describe_node(g0, n), ": attribute ", i);
        if (const auto* x = std::get_if<int64_t>(&f0)) {
          const auto f = fit_integer({*x, std::get<int64_t>(f1), std::get<int64_t>(f2)}, sizes);
          require(f.has_value(), where + " fits no formula a + b s in the size");
          holes.push_back({i, -1, *f});
        } else if (const auto* x = std::get_if<double>(&f0)) {
          const auto f = fit_double({*x, std::get<double>(f1), std::get<double>(f2)}, sizes);
          require(f.has_value(), where + " fits neither a + b s nor 1 / (a + b s) in the size");
          holes.push_back({i, -1, *f});
        } else if (const auto* x = std::get_if<std::vector<int64_t>>(&f0)) {
          const auto& y = std::get<std::vector<int64_t>>(f1);
          const auto& z = std::get<std::vector<int64_t>>(f2);
          require(y.size() == x->size() && z.size() == x->size(),
                  where + " has another length at another size");
          for (std::size_t e = 0; e < x->size(); ++e) {
            if ((*x)[e] == y[e] && y[e] == z[e]) continue;
            const auto f = fit_integer({(*x)[e], y[e], z[e]}, sizes);
            require(f.has_value(), where + " fits no formula a + b s in the size");
            holes.push_back({i, static_cast<std::ptrdiff_t>(e), *f});
          }
        } else {
          throw Refused{where + " differs between the sizes"};
        }
      }
    }
  } catch (const Refused& r) {
    return r.why;
  }
  t.base_ = g0;
  return t;
}

Graph DynamicTemplate::at(int64_t s) const {
  Graph g = base_;
  for (const DimHole& h : dims_) {
    const auto d = static_cast<int64_t>(h.formula.at(s));
    ADJOINT_CHECK(d >= 0, Value, "compile", "the dynamic size ", s, " makes dim ", h.dim,
                  " of value ", h.value, " negative (", d, ")");
    g.values[h.value].shape[h.dim] = d;
  }
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].holes.empty()) continue;
    const TracedOp& op = *base_.nodes[n].op;
    FieldList fields = op.export_fields();
    for (const FieldHole& h : nodes_[n].holes) {
      Field& f = fields[h.field];
      if (h.element >= 0) {
        std::get<std::vector<int64_t>>(f)[static_cast<std::size_t>(h.element)] =
            static_cast<int64_t>(h.formula.at(s));
      } else if (std::holds_alternative<int64_t>(f)) {
        f = static_cast<int64_t>(h.formula.at(s));
      } else {
        f = h.formula.at(s);
      }
    }
    g.nodes[n].op = exported_op_factory(op.export_key())(fields, {op.generator()});
  }
  return g;
}

}  // namespace adjoint::detail
