// Pointwise fusion: which ops form a group, and recomputation in the backward.
#include "compile/fusion.h"

#include <algorithm>
#include <functional>
#include <map>

#include "compile/fused_loop.h"

namespace adjoint::detail {

// Note [Pointwise fusion]
// A chain of pointwise ops run one by one reads and writes a full tensor per op. A fused node
// runs the whole group as one loop over blocks of a few thousand elements: each block's inputs
// are loaded once, every op of the group runs over the block in registers (arrays of one
// block), and only the values needed outside the group are written to memory. An interpreter
// of a small program, not generated code: adjoint has no compiler at run time, and an
// instruction over a block of 2048 floats costs the same as the compiled op would, so the
// dispatch between instructions is amortised; each instruction is the op's own per-element
// function: the vectorised kernel its contiguous path runs, called directly
// (kernels::simd_unary_fn, simd_binary_fn), or else its block kernel (kernels::unary_block,
// binary_block). So a fused group computes every element exactly as the ops would one by one,
// bit for bit where the op's kernel takes its contiguous path. A group holds ops of one phase
// (forward or backward), one register dtype (Note [Fusing 16-bit values and casts]) and one result
// shape; operands broadcast into it. Groups are grown in graph order: a node joins the open group
// when it fits, and a node that reads the group's values without fitting closes it. The fused node
// runs where its last member ran.

// Note [Fusing 16-bit values and casts]
// A group's registers hold its opmath dtype: float64, or float32 for float32, float16 and
// bfloat16 values alike, so a group may mix those three. A 16-bit input is widened as its block
// is read (exact), and each member whose result is 16-bit rounds its register to that dtype
// after computing, as the op's own kernel computes in float32 and rounds once (Note
// [Reduced-precision kernels]); a 16-bit output is rounded already, so storing it converts
// exactly. A cast between these dtypes is then a copy, with the rounding its result dtype
// asks. So an autocast region's casts and 16-bit ops fuse with the float32 ops beside them, bit
// for bit as eager. A cast to or from float64 changes the registers' dtype and stays out, and a
// reduction does not end a 16-bit group (eager reduces 16-bit values its own way).

bool fusible(const Graph& g, const GraphNode& n) {
  if (n.pinned() || n.outputs.size() != 1) return false;
  const std::optional<PointwiseKernel> kernel = n.op->pointwise();
  if (!kernel) return false;
  const Value& out = g.values[static_cast<std::size_t>(n.outputs[0])];
  if (!is_floating(out.dtype)) return false;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const int id = n.inputs[i];
    if (id < 0) return false;
    const DType d = g.values[static_cast<std::size_t>(id)].dtype;
    // where's condition is bool; the fused loop reads it as 0 or 1 in the group's dtype
    if (kernel->is_where && i == 0 && d == DType::Bool) continue;
    if (!is_floating(d) || opmath_dtype(d) != opmath_dtype(out.dtype)) return false;
  }
  return true;
}

namespace {

/// Whether some value `uses` reads is in `values`.
bool reads_any(const GraphNode& n, const std::vector<bool>& in_group) {
  for (int id : n.inputs)
    if (id >= 0 && in_group[static_cast<std::size_t>(id)]) return true;
  return false;
}

/// Elements per output of a sum over `dims` (normalized, not empty) of `shape`: the product of
/// their sizes when they are the trailing dims, else -1.
int64_t trailing_sum_size(const Shape& shape, std::vector<int64_t> dims) {
  std::sort(dims.begin(), dims.end());
  const int64_t rank = static_cast<int64_t>(shape.size()), k = static_cast<int64_t>(dims.size());
  int64_t inner = 1;
  for (int64_t i = 0; i < k; ++i) {
    if (dims[static_cast<std::size_t>(i)] != rank - k + i) return -1;
    inner *= shape[static_cast<std::size_t>(rank - k + i)];
  }
  return inner;
}

/// The same for leading dims: the product of the other dims' sizes (the columns summed), or -1.
int64_t leading_sum_columns(const Shape& shape, std::vector<int64_t> dims) {
  std::sort(dims.begin(), dims.end());
  int64_t columns = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool summed = d < dims.size();
    if (summed && dims[d] != static_cast<int64_t>(d)) return -1;
    if (!summed) columns *= shape[d];
  }
  return columns;
}

// A sum over trailing (leading) dims ends a group only when its rows (the columns it keeps) are
// at least this long: shorter ones make blocks too short for the interpreter to pay for itself.
constexpr int64_t kMinFusedRow = 128;

/// Builds the fused node for `members` (indices into g.nodes, in order), writing the values
/// in `written`; given `sum` (a node reducing one member's result, as reduced_by accepts), it
/// ends with that reduction too, as its last output.
GraphNode make_fused(Graph& g, const std::vector<int>& members, const std::vector<int>& written,
                     const GraphNode* sum = nullptr) {
  std::map<int, int> slot;  // value id -> slot (inputs first, then member results)
  std::vector<int> fused_inputs;
  for (int m : members)
    for (int id : g.nodes[static_cast<std::size_t>(m)].inputs)
      if (g.values[static_cast<std::size_t>(id)].kind != ValueKind::Result ||
          std::find(members.begin(), members.end(), g.values[static_cast<std::size_t>(id)].node) ==
              members.end())
        if (!slot.contains(id)) {
          slot[id] = static_cast<int>(fused_inputs.size());
          fused_inputs.push_back(id);
        }
  const int num_inputs = static_cast<int>(fused_inputs.size());
  for (std::size_t i = 0; i < members.size(); ++i)
    slot[g.nodes[static_cast<std::size_t>(members[i])].outputs[0]] =
        num_inputs + static_cast<int>(i);

  // Registers: one per input; member results reuse the registers of values whose last read
  // has passed, except those that are outputs (their register is the output's memory).
  const GraphNode& last = g.nodes[static_cast<std::size_t>(members.back())];
  Program p;
  p.dtype = opmath_dtype(g.values[static_cast<std::size_t>(last.outputs[0])].dtype);
  p.shape = g.values[static_cast<std::size_t>(last.outputs[0])].shape;
  std::vector<int> last_read(slot.size(), -1);
  for (std::size_t i = 0; i < members.size(); ++i)
    for (int id : g.nodes[static_cast<std::size_t>(members[i])].inputs)
      last_read[static_cast<std::size_t>(slot[id])] = static_cast<int>(i);
  std::vector<int> reg_of(slot.size(), -1), free_regs;
  for (int k = 0; k < num_inputs; ++k) {
    reg_of[static_cast<std::size_t>(k)] = p.num_registers++;
    p.input_register.push_back(reg_of[static_cast<std::size_t>(k)]);
    p.input_dtype.push_back(
        g.values[static_cast<std::size_t>(fused_inputs[static_cast<std::size_t>(k)])].dtype);
  }
  // Written values and the summed one keep their registers to the end.
  std::vector<int> outputs;
  std::vector<bool> is_output(slot.size(), false);
  for (int v : written) {
    outputs.push_back(v);
    is_output[static_cast<std::size_t>(slot[v])] = true;
  }
  if (sum != nullptr) is_output[static_cast<std::size_t>(slot[sum->inputs[0]])] = true;
  std::vector<std::shared_ptr<const TracedOp>> ops;
  std::vector<std::vector<int>> member_inputs;
  std::vector<int> member_output;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const GraphNode& n = g.nodes[static_cast<std::size_t>(members[i])];
    Instr in{*n.op->pointwise(), -1, reg_of[static_cast<std::size_t>(slot[n.inputs[0]])],
             n.inputs.size() > 1 ? reg_of[static_cast<std::size_t>(slot[n.inputs[1]])] : -1,
             n.inputs.size() > 2 ? reg_of[static_cast<std::size_t>(slot[n.inputs[2]])] : -1};
    std::vector<int> ins;
    for (int id : n.inputs) ins.push_back(slot[id]);
    // Registers of member results read for the last time here become free after it (inputs'
    // registers are never reused: they may point into the input tensors).
    for (int id : n.inputs) {
      const int s = slot[id];
      if (s >= num_inputs && last_read[static_cast<std::size_t>(s)] == static_cast<int>(i) &&
          !is_output[static_cast<std::size_t>(s)] &&
          std::find(free_regs.begin(), free_regs.end(), reg_of[static_cast<std::size_t>(s)]) ==
              free_regs.end())
        free_regs.push_back(reg_of[static_cast<std::size_t>(s)]);
    }
    const int s = num_inputs + static_cast<int>(i);
    if (!is_output[static_cast<std::size_t>(s)] && !free_regs.empty()) {
      reg_of[static_cast<std::size_t>(s)] = free_regs.back();
      free_regs.pop_back();
    } else {
      reg_of[static_cast<std::size_t>(s)] = p.num_registers++;
    }
    in.dst = reg_of[static_cast<std::size_t>(s)];
    in.result = g.values[static_cast<std::size_t>(n.outputs[0])].dtype;
    p.code.push_back(in);
    ops.push_back(n.op);
    member_inputs.push_back(std::move(ins));
    member_output.push_back(s);
  }
  std::vector<int> output_slot;
  for (int v : outputs) {
    output_slot.push_back(slot[v]);
    p.output_register.push_back(reg_of[static_cast<std::size_t>(slot[v])]);
    p.output_dtype.push_back(g.values[static_cast<std::size_t>(v)].dtype);
  }
  if (sum != nullptr) {
    const int summed = sum->inputs[0];
    p.reduced_register = reg_of[static_cast<std::size_t>(slot[summed])];
    p.reduced_shape = g.values[static_cast<std::size_t>(sum->outputs[0])].shape;
    const Shape& shape = g.values[static_cast<std::size_t>(summed)].shape;
    const ReductionKernel red = *sum->op->reduction(shape);
    const std::vector<int64_t>& dims = red.dims;
    p.reduce_kind = red.kind;
    if (!dims.empty() && dims.size() != shape.size()) {
      p.reduce_inner = std::max<int64_t>(trailing_sum_size(shape, dims), 0);
      if (p.reduce_inner == 0) p.reduce_columns = leading_sum_columns(shape, dims);
    }
    outputs.push_back(sum->outputs[0]);
    ops.push_back(sum->op);
    member_inputs.push_back({slot[summed]});
    member_output.push_back(num_inputs + static_cast<int>(members.size()));
    output_slot.push_back(member_output.back());
  }
  merge_scalar_steps(p);
  GraphNode fused;
  fused.op = make_fused_op(std::move(p), std::move(ops), std::move(member_inputs),
                           std::move(member_output), std::move(output_slot), num_inputs);
  fused.inputs = std::move(fused_inputs);
  fused.outputs = std::move(outputs);
  fused.backward = last.backward;
  return fused;
}

/// A sum, max or min that ends a group (Note [Sums that end a fused loop] in
/// src/backend/cpu/fused_program.cpp).
struct EndingReduction {
  int node = -1;  ///< the reduction node, or -1 for none
  /// It is all that reads the group from outside, so the fused node takes its place: it runs
  /// where the reduction ran. Else the fused node runs where the group's last member ran (the
  /// reduction being in the group's phase, and after that member: it closed the group).
  bool only_reader = false;
};

/// Whether node n reduces value v in a way a fused loop can: a sum, max or min over every dim,
/// its trailing dims in rows of kMinFusedRow or more, or its leading dims keeping kMinFusedRow
/// or more columns.
bool reduces_in_loop(const Graph& g, const GraphNode& n, int v) {
  const Value& in = g.values[static_cast<std::size_t>(v)];
  const std::optional<ReductionKernel> red = n.op->reduction(in.shape);
  if (!red || red->kind == kernels::Reduce::Prod || n.inputs.size() != 1 || n.inputs[0] != v ||
      n.outputs.size() != 1 || is_reduced_float(in.dtype) ||
      g.values[static_cast<std::size_t>(n.outputs[0])].dtype != in.dtype)
    return false;
  if (red->dims.empty() || red->dims.size() == in.shape.size()) return true;
  return trailing_sum_size(in.shape, red->dims) >= kMinFusedRow ||
         leading_sum_columns(in.shape, red->dims) >= kMinFusedRow;
}

/// The reduction node that ends the group whose values read outside it are `outside`: one that
/// reduces one of them (reduces_in_loop), all that reads the group from outside or in the
/// group's phase.
EndingReduction reduced_by(const Graph& g, const std::vector<std::vector<int>>& readers,
                           const std::vector<int>& group_of, int group,
                           const std::vector<int>& outside, bool backward) {
  for (int v : outside) {
    std::vector<int> others;  // v's readers outside the group (-1: an output or a gradient)
    for (int reader : readers[static_cast<std::size_t>(v)])
      if (reader < 0 || group_of[static_cast<std::size_t>(reader)] != group)
        others.push_back(reader);
    for (int reader : others) {
      if (reader < 0 || !reduces_in_loop(g, g.nodes[static_cast<std::size_t>(reader)], v)) continue;
      if (outside.size() == 1 && others.size() == 1) return {reader, true};
      if (g.nodes[static_cast<std::size_t>(reader)].backward == backward) return {reader, false};
    }
  }
  return {};
}

}  // namespace

int recompute_pointwise(Graph& g) {
  const std::size_t n_values = g.values.size();
  auto made_by_fusible = [&](int id) {
    const Value& v = g.values[static_cast<std::size_t>(id)];
    return v.kind == ValueKind::Result && !g.nodes[static_cast<std::size_t>(v.node)].backward &&
           fusible(g, g.nodes[static_cast<std::size_t>(v.node)]);
  };
  // What the backward has without recomputing: the leaves, and the forward values it reads
  // that no pointwise op made (kept anyway).
  std::vector<bool> kept(n_values, false);
  for (std::size_t id = 0; id < n_values; ++id) kept[id] = g.values[id].kind != ValueKind::Result;
  for (const GraphNode& n : g.nodes)
    if (n.backward)
      for (int id : n.inputs)
        if (id >= 0 && !made_by_fusible(id)) kept[static_cast<std::size_t>(id)] = true;
  // A value is recomputed only from what is kept anyway, so recomputing never makes the
  // forward keep more (a residual stream, rebuilt from branch outputs nothing else keeps,
  // stays kept, as in eager code).
  std::vector<int> from_kept(n_values, -1);  // -1 unknown, 0 no, 1 yes
  std::function<bool(int)> recomputable = [&](int id) -> bool {
    int& r = from_kept[static_cast<std::size_t>(id)];
    if (r >= 0) return r == 1;
    if (!made_by_fusible(id)) return (r = kept[static_cast<std::size_t>(id)] ? 1 : 0) == 1;
    r = 1;
    for (int in :
         g.nodes[static_cast<std::size_t>(g.values[static_cast<std::size_t>(id)].node)].inputs)
      if (in >= 0 && !recomputable(in)) r = 0;
    return r == 1;
  };
  std::vector<int> copy_of(n_values, -1);  // forward value -> its backward copy
  std::vector<GraphNode> copies;
  // Copies the forward node behind value id into the backward (its inputs first).
  std::function<int(int)> recompute = [&](int id) -> int {
    if (copy_of[static_cast<std::size_t>(id)] >= 0) return copy_of[static_cast<std::size_t>(id)];
    const Value& v = g.values[static_cast<std::size_t>(id)];
    if (v.kind != ValueKind::Result) return id;
    const GraphNode& n = g.nodes[static_cast<std::size_t>(v.node)];
    if (n.backward || !fusible(g, n) || !recomputable(id)) return id;
    GraphNode c = n;
    c.backward = true;
    for (int& in : c.inputs) in = recompute(in);
    Value out = g.values[static_cast<std::size_t>(id)];
    out.node = -1;  // set below, once the copies have their places
    const int copy = g.add_value(out);
    copy_of.resize(g.values.size(), -1);
    c.outputs = {copy};
    copies.push_back(std::move(c));
    copy_of[static_cast<std::size_t>(id)] = copy;
    return copy;
  };
  std::vector<GraphNode> backward;
  for (GraphNode& n : g.nodes)
    if (n.backward)
      for (int& in : n.inputs)
        if (in >= 0) in = recompute(in);
  for (int& id : g.grads)
    if (id >= 0) id = recompute(id);
  if (copies.empty()) return 0;
  // The copies run first in the backward, in the order they were made (inputs first).
  std::vector<GraphNode> nodes;
  for (GraphNode& n : g.nodes)
    if (!n.backward) nodes.push_back(std::move(n));
  for (GraphNode& c : copies) nodes.push_back(std::move(c));
  for (GraphNode& n : g.nodes)
    if (n.backward && n.op) nodes.push_back(std::move(n));
  g.nodes = std::move(nodes);
  g.index_results();
  return static_cast<int>(copies.size());
}

int fuse_pointwise(Graph& g) {
  const std::size_t n_nodes = g.nodes.size();
  // Who reads each value: nodes, and the graph's outputs and gradients (as readers -1).
  std::vector<std::vector<int>> readers(g.values.size());
  for (std::size_t i = 0; i < n_nodes; ++i)
    for (int id : g.nodes[i].inputs)
      if (id >= 0) readers[static_cast<std::size_t>(id)].push_back(static_cast<int>(i));
  for (int id : g.outputs)
    if (id >= 0) readers[static_cast<std::size_t>(id)].push_back(-1);
  for (int id : g.grads)
    if (id >= 0) readers[static_cast<std::size_t>(id)].push_back(-1);

  std::vector<std::vector<int>> groups;
  std::vector<int> group_of(n_nodes, -1);
  for (bool backward : {false, true}) {
    std::vector<int> open;
    std::vector<bool> in_open(g.values.size(), false);
    auto close = [&] {
      if (open.size() >= 2) {
        for (int m : open) group_of[static_cast<std::size_t>(m)] = static_cast<int>(groups.size());
        groups.push_back(open);
      }
      for (int m : open)
        in_open[static_cast<std::size_t>(g.nodes[static_cast<std::size_t>(m)].outputs[0])] = false;
      open.clear();
    };
    for (std::size_t i = 0; i < n_nodes; ++i) {
      const GraphNode& n = g.nodes[i];
      if (n.backward != backward) continue;
      // One result shape and one register dtype (Note [Fusing 16-bit values and casts]).
      auto result_of = [&](const GraphNode& m) -> const Value& {
        return g.values[static_cast<std::size_t>(m.outputs[0])];
      };
      const bool fits =
          fusible(g, n) &&
          (open.empty() ||
           (result_of(n).shape == result_of(g.nodes[static_cast<std::size_t>(open[0])]).shape &&
            opmath_dtype(result_of(n).dtype) ==
                opmath_dtype(result_of(g.nodes[static_cast<std::size_t>(open[0])]).dtype)));
      if (!fits) {
        // An effect (an optimizer's step) changes tensors the group may read: the fused
        // node, which runs where its last member ran, must not move past it.
        if (!open.empty() && (n.effect || reads_any(n, in_open) || fusible(g, n))) close();
        if (!fusible(g, n)) continue;
      }
      open.push_back(static_cast<int>(i));
      in_open[static_cast<std::size_t>(n.outputs[0])] = true;
    }
    close();
  }
  if (groups.empty()) return 0;

  // Each group's outputs: member results read outside the group.
  std::vector<GraphNode> fused;
  std::vector<EndingReduction> ending;  // by group
  for (const std::vector<int>& members : groups) {
    std::vector<int> outside;
    for (int m : members) {
      const int id = g.nodes[static_cast<std::size_t>(m)].outputs[0];
      for (int r : readers[static_cast<std::size_t>(id)])
        if (r < 0 ||
            group_of[static_cast<std::size_t>(r)] != group_of[static_cast<std::size_t>(m)]) {
          outside.push_back(id);
          break;
        }
    }
    // Nothing reads the group from outside only when dead code was kept: the last result.
    if (outside.empty())
      outside.push_back(g.nodes[static_cast<std::size_t>(members.back())].outputs[0]);
    const bool backward = g.nodes[static_cast<std::size_t>(members[0])].backward;
    const EndingReduction sum =
        reduced_by(g, readers, group_of, static_cast<int>(fused.size()), outside, backward);
    std::vector<int> written;  // all but a value that only the ending reduction reads outside
    for (int v : outside) {
      bool only_summed = sum.node >= 0;
      for (int r : readers[static_cast<std::size_t>(v)])
        if (r != sum.node &&
            (r < 0 || group_of[static_cast<std::size_t>(r)] != static_cast<int>(fused.size())))
          only_summed = false;
      if (!only_summed) written.push_back(v);
    }
    ending.push_back(sum);
    fused.push_back(
        make_fused(g, members, written,
                   sum.node >= 0 ? &g.nodes[static_cast<std::size_t>(sum.node)] : nullptr));
  }
  // The fused node takes the place of its last member, or of the reduction that ends it when
  // that is all that reads the group; the other members and the reduction go.
  std::vector<int> folded_into(n_nodes, -1);
  std::vector<bool> dropped(n_nodes, false);
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (ending[k].node < 0) continue;
    if (ending[k].only_reader) {
      folded_into[static_cast<std::size_t>(ending[k].node)] = static_cast<int>(k);
    } else {
      dropped[static_cast<std::size_t>(ending[k].node)] = true;
    }
  }
  std::vector<GraphNode> nodes;
  int removed = 0;
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const int grp = group_of[i];
    if (folded_into[i] >= 0) {
      nodes.push_back(std::move(fused[static_cast<std::size_t>(folded_into[i])]));
      removed += static_cast<int>(groups[static_cast<std::size_t>(folded_into[i])].size());
    } else if (dropped[i]) {
      ++removed;
    } else if (grp < 0) {
      nodes.push_back(std::move(g.nodes[i]));
    } else if (static_cast<int>(i) == groups[static_cast<std::size_t>(grp)].back() &&
               !ending[static_cast<std::size_t>(grp)].only_reader) {
      nodes.push_back(std::move(fused[static_cast<std::size_t>(grp)]));
      removed += static_cast<int>(groups[static_cast<std::size_t>(grp)].size()) - 1;
    }
  }
  g.nodes = std::move(nodes);
  g.index_results();
  return removed;
}

}  // namespace adjoint::detail
