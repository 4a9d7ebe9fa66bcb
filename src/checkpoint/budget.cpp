// plan_checkpoints: the layers of a sequential model to checkpoint so that the predicted peak
// of saved activations fits a byte budget with the fewest recomputed FLOPs; and
// predict_checkpoint_plan, the exact prediction for any choice. Profiling is in
// budget_profile.cpp, running a plan in budget_run.cpp.
//
// Note [Budget cost model]
// A plan splits the layers into segments, each run plainly or as one checkpointed region.
// Layer i run plainly holds the storages its ops save, S_i, until backward reaches it. A
// checkpointed segment [a, b) holds only its input's storage x_a after its first run, and all
// of S_a ∪ ... ∪ S_b-1 again while backward recomputes it (and while its first run is in
// progress: a region holds what its function saves until the function returns). Backward
// reaches a segment after every later layer has freed what it saved, while every earlier
// layer still holds its share. A storage several layers save counts once (as memory tracking
// counts it). With H_<a what the layers before a hold after the forward:
//   forward end:             |H_<L|
//   segment [a, b) recomputed: |H_<a ∪ S_a ∪ ... ∪ S_b-1 ∪ {x_a}|
//     (the recomputed storages are new ones of the same sizes; x_a is the one kept)
// and the predicted peak is the largest of these. Not modelled: what is saved outside the
// layers (a loss after them), and graph pieces a layer builds and drops during its forward.
// Segments matter: a layer checkpointed on its own keeps its input, which the layer before it
// usually saves anyway, and drops its output, which the layer after it usually saves anyway;
// in a chain whose layers save only their inputs and outputs it saves nothing. A segment drops
// the boundaries inside it.
//
// Note [Budget planner]
// Minimise the recomputed FLOPs (those of the checkpointed layers) subject to peak <= budget.
// Layers usually share storages only with their neighbours (a layer's output is the next
// one's input), so what a segment starting at layer a adds depends only on what layer a-1
// holds: S_a-1 when it ran plainly, nothing shared when it ended a checkpointed segment (whose
// input x_a' is not adjacent). A dynamic programme over the segment boundaries with that as its
// state keeps, per boundary and state, the partial plans that no other beats in all of bytes
// held so far, peak so far and FLOPs so far (a Pareto front), dropping those over the budget:
// exact, with no rounding of bytes. Storage shared beyond neighbours is counted at each
// holder, so the programme then overestimates: a plan it accepts fits, and the plan's numbers
// are computed exactly afterwards. Fronts larger than kMaxFront are thinned to the cheapest
// plan per band of held bytes, which keeps plans feasible and costs optimality only in that
// rare case (identical layers give tiny fronts). Work: O(L^2) transitions times front sizes.
#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "adjoint/checkpoint_budget.h"
#include "adjoint/error.h"
#include "checkpoint/budget_util.h"

namespace adjoint {

namespace detail {

void fill_layer_bytes(SequentialProfile& profile) {
  std::vector<char> seen(profile.storage_bytes.size(), 0);
  for (LayerProfile& l : profile.layers) {
    l.saved_bytes = 0;
    for (std::size_t id : l.saved)
      if (!seen[id]) seen[id] = 1, l.saved_bytes += profile.storage_bytes[id];
    l.input_bytes = l.input == kNoStorage ? 0 : profile.storage_bytes[l.input];
  }
}

}  // namespace detail

namespace {

using Ids = std::vector<std::size_t>;  // sorted, without duplicates

void check_profile(const SequentialProfile& p, const char* op) {
  const std::size_t n = p.storage_bytes.size();
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    for (std::size_t id : p.layers[i].saved)
      ADJOINT_CHECK(id < n, Index, op, "layer ", i, " saves storage ", id, " but the profile has ",
                    n, " storages");
    const std::size_t in = p.layers[i].input;
    ADJOINT_CHECK(in == kNoStorage || in < n, Index, op, "layer ", i, " has input storage ", in,
                  " but the profile has ", n, " storages");
  }
}

Ids sorted_unique(Ids v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Each layer's saved storages, sorted.
std::vector<Ids> saved_sets(const SequentialProfile& p) {
  std::vector<Ids> sets;
  for (const LayerProfile& l : p.layers) sets.push_back(sorted_unique(l.saved));
  return sets;
}

void check_segments(const std::vector<CheckpointSegment>& segments, std::size_t layers,
                    const char* op) {
  std::size_t next = 0;
  for (const CheckpointSegment& s : segments) {
    ADJOINT_CHECK(s.begin >= next && s.begin < s.end && s.end <= layers, Value, op,
                  "checkpointed segments must be non-empty, sorted, disjoint and within the ",
                  layers, " layers; got [", s.begin, ", ", s.end, ") after layer ", next);
    next = s.end;
  }
}

// The union of S_a..S_b-1 and x_a, grown one layer at a time, with its bytes.
class SegmentUnion {
 public:
  SegmentUnion(const std::vector<std::size_t>& bytes, std::size_t input)
      : bytes_(bytes), in_(bytes.size(), 0) {
    if (input != kNoStorage) add(input);
  }
  void add(std::size_t id) {
    if (!in_[id]) in_[id] = 1, total_ += bytes_[id];
  }
  void add(const Ids& ids) {
    for (std::size_t id : ids) add(id);
  }
  std::size_t bytes() const { return total_; }
  // Bytes of the union not among `held`.
  std::size_t bytes_without(const Ids& held) const {
    std::size_t shared = 0;
    for (std::size_t id : held)
      if (in_[id]) shared += bytes_[id];
    return total_ - shared;
  }

 private:
  const std::vector<std::size_t>& bytes_;
  std::vector<char> in_;
  std::size_t total_ = 0;
};

// Bytes of the storages in `a` that are not in `b`.
std::size_t bytes_not_in(const Ids& a, const Ids& b, const std::vector<std::size_t>& bytes) {
  std::size_t total = 0;
  auto j = b.begin();
  for (std::size_t id : a) {
    while (j != b.end() && *j < id) ++j;
    if (j == b.end() || *j != id) total += bytes[id];
  }
  return total;
}

// A partial plan of layers 0..b-1 whose last block ran plainly or checkpointed (the state);
// the parent is a point of the front it was extended from.
struct Point {
  std::size_t held = 0;  // bytes the layers so far hold after the forward
  std::size_t peak = 0;  // the largest predicted saved bytes so far
  uint64_t flops = 0;    // recomputed so far
  uint32_t parent = 0;
  uint32_t parent_pos = 0;
  uint8_t parent_state = 0;
};

enum State : uint8_t { kPlain = 0, kCheckpointed = 1 };

constexpr std::size_t kMaxFront = 2048;

// The points no other point is at least as good as in held, peak and FLOPs at once.
std::vector<Point> pareto(std::vector<Point> c) {
  std::sort(c.begin(), c.end(), [](const Point& a, const Point& b) {
    return std::tie(a.flops, a.held, a.peak) < std::tie(b.flops, b.held, b.peak);
  });
  // Kept points (all with FLOPs <= the current one's) as a staircase: held rising, the least
  // peak among those with at most that held falling.
  std::map<std::size_t, std::size_t> stair;
  std::vector<Point> kept;
  for (const Point& p : c) {
    auto it = stair.upper_bound(p.held);
    if (it != stair.begin() && std::prev(it)->second <= p.peak) continue;
    kept.push_back(p);
    auto hi = stair.lower_bound(p.held);
    const auto lo = hi;
    while (hi != stair.end() && hi->second >= p.peak) ++hi;
    stair.erase(lo, hi);
    stair.emplace(p.held, p.peak);
  }
  return kept;
}

// At most kMaxFront points: the cheapest (then lowest-peak) one per band of held bytes.
std::vector<Point> thin(std::vector<Point> front) {
  if (front.size() <= kMaxFront) return front;
  std::size_t top = 0;
  for (const Point& p : front) top = std::max(top, p.held);
  std::vector<std::optional<Point>> band(kMaxFront);
  for (const Point& p : front) {
    const auto b = static_cast<std::size_t>(static_cast<unsigned __int128>(p.held) * kMaxFront /
                                            (static_cast<unsigned __int128>(top) + 1));
    std::optional<Point>& slot = band[b];
    if (!slot || std::tie(p.flops, p.peak) < std::tie(slot->flops, slot->peak)) slot = p;
  }
  std::vector<Point> out;
  for (const auto& p : band)
    if (p) out.push_back(*p);
  return out;
}

// The cheapest segmentation whose predicted peak is at most `budget` (see Note [Budget
// planner]); with count_flops false, the one with the lowest peak. Nothing when none fits.
std::optional<std::vector<CheckpointSegment>> solve(const SequentialProfile& p,
                                                    const std::vector<Ids>& saved,
                                                    std::size_t budget, std::size_t max_segment,
                                                    bool count_flops) {
  const std::size_t n = p.layers.size();
  const std::vector<std::size_t>& bytes = p.storage_bytes;
  static const Ids kNothing;
  // candidates[b][state]: partial plans of layers 0..b-1, pruned into fronts[b][state] once
  // every transition into b is in (all come from boundaries before b).
  std::vector<std::array<std::vector<Point>, 2>> fronts(n + 1), candidates(n + 1);
  candidates[0][kPlain].push_back(Point{});
  for (std::size_t a = 0; a <= n; ++a) {
    for (int s = 0; s < 2; ++s) fronts[a][s] = thin(pareto(std::move(candidates[a][s])));
    if (a == n) break;
    for (int s = 0; s < 2; ++s) {
      const std::vector<Point>& from = fronts[a][s];
      if (from.empty()) continue;
      // What layer a-1 holds, as far as the layers from a on can share it.
      const Ids& before = a > 0 && s == kPlain ? saved[a - 1] : kNothing;
      auto extend = [&](std::size_t b, State state, std::size_t adds, std::size_t recomputes,
                        uint64_t flops) {
        for (std::size_t k = 0; k < from.size(); ++k) {
          const Point& q = from[k];
          Point x;
          x.held = q.held + adds;
          x.peak = std::max({q.peak, x.held, q.held + recomputes});
          if (x.peak > budget) continue;
          x.flops = q.flops + flops;
          x.parent = static_cast<uint32_t>(k);
          x.parent_pos = static_cast<uint32_t>(a);
          x.parent_state = static_cast<uint8_t>(s);
          candidates[b][state].push_back(x);
        }
      };
      extend(a + 1, kPlain, bytes_not_in(saved[a], before, bytes), 0, 0);
      const std::size_t input = p.layers[a].input;
      const std::size_t keeps = input == kNoStorage ? 0 : bytes_not_in(Ids{input}, before, bytes);
      SegmentUnion segment(bytes, input);
      uint64_t flops = 0;
      const std::size_t last = max_segment == 0 ? n : std::min(n, a + max_segment);
      for (std::size_t b = a + 1; b <= last; ++b) {
        segment.add(saved[b - 1]);
        if (count_flops) flops += p.layers[b - 1].flops;
        extend(b, kCheckpointed, keeps, segment.bytes_without(before), flops);
      }
    }
  }
  std::optional<std::pair<int, std::size_t>> best;
  for (int s = 0; s < 2; ++s)
    for (std::size_t k = 0; k < fronts[n][s].size(); ++k) {
      const Point& x = fronts[n][s][k];
      const Point* b = best ? &fronts[n][best->first][best->second] : nullptr;
      if (!b || std::tie(x.flops, x.peak) < std::tie(b->flops, b->peak)) best = {s, k};
    }
  if (!best) return std::nullopt;
  std::vector<CheckpointSegment> segments;
  std::size_t pos = n;
  auto [s, k] = *best;
  while (pos > 0) {
    const Point& x = fronts[pos][s][k];
    if (s == kCheckpointed) segments.push_back({x.parent_pos, pos});
    pos = x.parent_pos;
    s = x.parent_state;
    k = x.parent;
  }
  std::reverse(segments.begin(), segments.end());
  return segments;
}

std::string layer_list(const std::vector<CheckpointSegment>& segments) {
  if (segments.empty()) return "none";
  std::ostringstream os;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    os << (i ? ", " : "") << segments[i].begin;
    if (segments[i].end > segments[i].begin + 1) os << "-" << segments[i].end - 1;
  }
  return os.str();
}

}  // namespace

CheckpointPlan predict_checkpoint_plan(const SequentialProfile& profile,
                                       const std::vector<CheckpointSegment>& segments) {
  const char* op = "predict_checkpoint_plan";
  check_profile(profile, op);
  check_segments(segments, profile.layers.size(), op);
  const std::vector<std::size_t>& bytes = profile.storage_bytes;
  CheckpointPlan plan;
  plan.segments = segments;
  plan.forward_flops = profile.forward_flops();
  plan.layers.resize(profile.layers.size());
  for (std::size_t i = 0; i < profile.layers.size(); ++i)
    plan.layers[i].flops = profile.layers[i].flops;
  // See Note [Budget cost model].
  std::vector<char> held(bytes.size(), 0);
  std::size_t held_bytes = 0;
  auto hold = [&](std::size_t id, std::size_t& into) {
    if (!held[id]) held[id] = 1, into += bytes[id], held_bytes += bytes[id];
  };
  auto run_plain = [&](std::size_t i) {
    for (std::size_t id : profile.layers[i].saved) hold(id, plan.layers[i].held_bytes);
  };
  std::size_t next = 0;
  for (const CheckpointSegment& seg : segments) {
    for (; next < seg.begin; ++next) run_plain(next);
    const std::size_t input = profile.layers[seg.begin].input;
    Ids all = input == kNoStorage ? Ids{} : Ids{input};
    for (std::size_t i = seg.begin; i < seg.end; ++i)
      all.insert(all.end(), profile.layers[i].saved.begin(), profile.layers[i].saved.end());
    std::size_t recompute = held_bytes;
    for (std::size_t id : sorted_unique(std::move(all)))
      if (!held[id]) recompute += bytes[id];
    plan.predicted_peak_bytes = std::max(plan.predicted_peak_bytes, recompute);
    for (std::size_t i = seg.begin; i < seg.end; ++i) {
      plan.layers[i].checkpointed = true;
      plan.layers[i].recompute_peak_bytes = recompute;
      plan.extra_flops += profile.layers[i].flops;
    }
    if (input != kNoStorage) hold(input, plan.layers[seg.begin].held_bytes);
    next = seg.end;
  }
  for (; next < profile.layers.size(); ++next) run_plain(next);
  plan.forward_bytes = held_bytes;
  plan.predicted_peak_bytes = std::max(plan.predicted_peak_bytes, held_bytes);
  return plan;
}

CheckpointPlan predict_checkpoint_layers(const SequentialProfile& profile,
                                         const std::vector<bool>& checkpointed) {
  ADJOINT_CHECK(checkpointed.size() == profile.layers.size(), Value, "predict_checkpoint_layers",
                "got ", checkpointed.size(), " decisions for a profile of ", profile.layers.size(),
                " layers");
  std::vector<CheckpointSegment> segments;
  for (std::size_t i = 0; i < checkpointed.size(); ++i)
    if (checkpointed[i]) segments.push_back({i, i + 1});
  return predict_checkpoint_plan(profile, segments);
}

CheckpointPlan plan_checkpoints(const SequentialProfile& profile, std::size_t budget_bytes,
                                const CheckpointPlanOptions& options) {
  const char* op = "plan_checkpoints";
  check_profile(profile, op);
  const std::vector<Ids> saved = saved_sets(profile);
  const std::size_t max_segment = options.max_segment_layers;
  auto choice = solve(profile, saved, budget_bytes, max_segment, true);
  if (!choice) {
    // The lowest peak the planner reaches: exact for neighbour-only sharing, where its
    // prediction cannot fit either. Otherwise its exact numbers may still fit: take it.
    const auto lowest =
        *solve(profile, saved, std::numeric_limits<std::size_t>::max(), max_segment, false);
    const CheckpointPlan best = predict_checkpoint_plan(profile, lowest);
    ADJOINT_CHECK(
        best.predicted_peak_bytes <= budget_bytes, Value, op, "no plan fits the budget of ",
        budget_bytes, " bytes (", detail::human_bytes(budget_bytes),
        ") for saved activations: the smallest predicted peak is ", best.predicted_peak_bytes,
        " bytes (", detail::human_bytes(best.predicted_peak_bytes), "), checkpointing layers ",
        layer_list(lowest), " of ", profile.layers.size(),
        max_segment ? detail::str(" in segments of at most ", max_segment, " layers")
                    : std::string());
    choice = lowest;
  }
  CheckpointPlan plan = predict_checkpoint_plan(profile, *choice);
  plan.budget_bytes = budget_bytes;
  ADJOINT_ASSERT(plan.predicted_peak_bytes <= budget_bytes, "planned peak ",
                 plan.predicted_peak_bytes, " over the budget ", budget_bytes);
  return plan;
}

double CheckpointPlan::extra_fraction() const {
  return forward_flops == 0 ? 0.0
                            : static_cast<double>(extra_flops) / static_cast<double>(forward_flops);
}

std::vector<std::size_t> CheckpointPlan::checkpointed() const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].checkpointed) out.push_back(i);
  return out;
}

std::string CheckpointPlan::to_string() const {
  using detail::human_bytes, detail::human_flops, detail::str_printf;
  std::ostringstream os;
  os << "checkpoint plan: ";
  if (budget_bytes) os << "budget " << human_bytes(budget_bytes) << ", ";
  os << "predicted peak " << human_bytes(predicted_peak_bytes) << " of saved activations (the "
     << "forward keeps " << human_bytes(forward_bytes) << "); " << checkpointed().size() << " of "
     << layers.size() << " layers checkpointed in " << segments.size()
     << (segments.size() == 1 ? " segment" : " segments") << ", recomputing "
     << human_flops(extra_flops) << str_printf(" (%.1f%% of a forward, ", 100 * extra_fraction())
     << human_flops(forward_flops) << ")\n";
  os << str_printf("  %5s  %-16s  %12s  %14s  %14s\n", "layer", "plan", "holds", "recompute peak",
                   "forward FLOPs");
  std::vector<std::string> plan(layers.size(), "save");
  for (const CheckpointSegment& s : segments)
    for (std::size_t i = s.begin; i < s.end; ++i)
      plan[i] = s.end == s.begin + 1 ? std::string("checkpoint")
                                     : str_printf("checkpoint %zu-%zu", s.begin, s.end - 1);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    os << str_printf("  %5zu  %-16s  %12s  %14s  %14s\n", i, plan[i].c_str(),
                     human_bytes(l.held_bytes).c_str(),
                     l.checkpointed ? human_bytes(l.recompute_peak_bytes).c_str() : "",
                     human_flops(l.flops).c_str());
  }
  return os.str();
}

}  // namespace adjoint
