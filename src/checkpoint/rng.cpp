// Recording and replaying generator states for checkpointed regions (see rng.h).
#include "checkpoint/rng.h"

namespace adjoint::detail {

RngSnapshot RngSnapshot::capture(const std::vector<Generator*>& gens) {
  RngSnapshot s;
  s.states_.reserve(gens.size() + 1);
  auto add = [&](Generator* g) {
    if (!g) return;
    for (const auto& [seen, state] : s.states_)
      if (seen == g) return;
    s.states_.emplace_back(g, g->state());
  };
  add(&default_generator());
  for (Generator* g : gens) add(g);
  return s;
}

RngReplay::RngReplay(const RngSnapshot& snapshot) {
  for (const auto& [g, state] : snapshot.states()) {
    before_.states_.emplace_back(g, g->state());
    g->set_state(state);
  }
}

RngReplay::~RngReplay() {
  for (const auto& [g, state] : before_.states()) g->set_state(state);
}

}  // namespace adjoint::detail
