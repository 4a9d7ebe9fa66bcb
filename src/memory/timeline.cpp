// MemoryTimeline: one thread-local dispatcher is the op observer (Note [Op observer] in
// src/dispatch/op_observer.cpp) while any timeline on the thread records; it samples the
// bytes once per event and hands the event to every recording timeline, so nested timelines
// see the same numbers. CSV and SVG output are built from the events.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>

#include "adjoint/allocator.h"
#include "adjoint/error.h"
#include "adjoint/io/svg_plot.h"
#include "adjoint/io/text_file.h"
#include "adjoint/memory.h"
#include "autograd/memory_hooks.h"

namespace adjoint {

struct MemoryTimeline::Impl {
  std::optional<SavedMemoryTracker> tracking;  // saved-tensor counting, while recording
  MemoryEvent start;
  std::vector<MemoryEvent> events;
  std::thread::id thread = std::this_thread::get_id();  // the thread it records
};

namespace {

MemoryEvent sample(std::string op, MemoryPhase phase, bool take_window) {
  const detail::SavedRegistryStats saved = detail::saved_registry_stats();
  MemoryEvent e;
  e.op = std::move(op);
  e.phase = phase;
  e.saved_bytes = saved.current_bytes;
  e.saved_peak_bytes = take_window ? detail::take_saved_window_peak() : saved.current_bytes;
  // All storage: the CPU allocator's and what meta tensors would take (a run on meta is a
  // plan of a CPU run's memory; docs/devices.md).
  e.storage_bytes = memory_stats().current_bytes + memory_stats(kMeta).current_bytes;
  return e;
}

class Dispatcher final : public detail::OpObserver {
 public:
  // Events go on to the observer this one replaced (a FLOP counter, an outer tool), so
  // observers compose; also while nothing records, when the last timeline stopped inside a
  // backward node (the engine had paused the observer there and then put this one back).
  void after_forward_op(const char* op) override {
    if (!active_.empty()) record(op, MemoryPhase::Forward);
    OpObserver::after_forward_op(op);
  }
  void after_backward_node(const std::string& node) override {
    if (!active_.empty()) record(node, MemoryPhase::Backward);
    OpObserver::after_backward_node(node);
  }

  void add(const std::shared_ptr<MemoryTimeline::Impl>& t) {
    t->start = sample("start", MemoryPhase::Start, /*take_window=*/active_.empty());
    // Linked once: when the last timeline stopped below a later observer (a profiler), this
    // stayed in the chain, and linking it again on top would make the chain a cycle.
    if (!linked_) {
      next_ = detail::tls_op_observer;
      detail::set_op_observer(this);
      linked_ = true;
    }
    active_.push_back(t);
  }

  void remove(const std::shared_ptr<MemoryTimeline::Impl>& t) {
    std::erase(active_, t);
    if (active_.empty() && detail::tls_op_observer == this) {
      detail::set_op_observer(next_);
      linked_ = false;
    }
  }

 private:
  void record(std::string op, MemoryPhase phase) {
    const MemoryEvent e = sample(std::move(op), phase, /*take_window=*/true);
    for (const auto& t : active_) t->events.push_back(e);
  }

  std::vector<std::shared_ptr<MemoryTimeline::Impl>> active_;
  bool linked_ = false;  // in this thread's observer chain
};

thread_local Dispatcher tls_dispatcher;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

const char* to_string(MemoryPhase phase) {
  switch (phase) {
    case MemoryPhase::Start:
      return "start";
    case MemoryPhase::Forward:
      return "forward";
    case MemoryPhase::Backward:
      return "backward";
  }
  return "?";
}

MemoryTimeline::MemoryTimeline() : impl_(std::make_shared<Impl>()) {
  impl_->tracking.emplace();  // before the start sample, so a first tracker's reset is in it
  tls_dispatcher.add(impl_);
}

MemoryTimeline::~MemoryTimeline() {
  // A destructor cannot throw. On a wrong thread (a bug stop() would report) the recording
  // thread's dispatcher keeps its share of the state, safely, until that thread ends.
  if (impl_->tracking && impl_->thread == std::this_thread::get_id()) stop();
}

void MemoryTimeline::stop() {
  if (!impl_->tracking) return;
  ADJOINT_CHECK(impl_->thread == std::this_thread::get_id(), Value, "MemoryTimeline.stop",
                "a timeline records the thread that made it and must be stopped there");
  tls_dispatcher.remove(impl_);
  impl_->tracking.reset();
}

bool MemoryTimeline::recording() const { return impl_->tracking.has_value(); }
const MemoryEvent& MemoryTimeline::start() const { return impl_->start; }
const std::vector<MemoryEvent>& MemoryTimeline::events() const { return impl_->events; }

std::string MemoryTimeline::csv() const {
  std::ostringstream o;
  o << "index,phase,op,saved_bytes,saved_peak_bytes,storage_bytes\n";
  auto row = [&](std::size_t i, const MemoryEvent& e) {
    o << i << "," << to_string(e.phase) << "," << csv_field(e.op) << "," << e.saved_bytes << ","
      << e.saved_peak_bytes << "," << e.storage_bytes << "\n";
  };
  row(0, impl_->start);
  for (std::size_t i = 0; i < impl_->events.size(); ++i) row(i + 1, impl_->events[i]);
  return o.str();
}

std::string MemoryTimeline::svg(const std::string& title) const {
  std::vector<const MemoryEvent*> all{&impl_->start};
  for (const MemoryEvent& e : impl_->events) all.push_back(&e);
  std::size_t top = 0;
  for (const MemoryEvent* e : all)
    top = std::max({top, e->storage_bytes, e->saved_peak_bytes, e->saved_bytes});
  // One unit for the whole plot, the largest that keeps the top above 1.
  const char* units[] = {"bytes", "KiB", "MiB", "GiB"};
  double scale = 1;
  int u = 0;
  while (u < 3 && static_cast<double>(top) / scale >= 1024) scale *= 1024, ++u;

  io::PlotSeries storage{"all tensor storage", {}, {}, "#ff7f0e"};
  io::PlotSeries saved{"saved activations", {}, {}, "#1f77b4"};
  // Dots where an op held more while it ran than before and after it (a recomputation
  // inside a backward node); elsewhere the peak is just the line's own corner.
  io::PlotSeries inside{"saved, peak inside an op", {}, {}, "#d62728", true};
  std::vector<io::PlotSeries> guides;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const MemoryEvent& e = *all[i];
    const double x = static_cast<double>(i);
    storage.x.push_back(x);
    storage.y.push_back(static_cast<double>(e.storage_bytes) / scale);
    saved.x.push_back(x);
    saved.y.push_back(static_cast<double>(e.saved_bytes) / scale);
    if (i > 0 && e.saved_peak_bytes > std::max(e.saved_bytes, all[i - 1]->saved_bytes)) {
      inside.x.push_back(x);
      inside.y.push_back(static_cast<double>(e.saved_peak_bytes) / scale);
    }
    // A dashed guide where each backward pass begins (legend on the first only).
    if (i > 0 && e.phase == MemoryPhase::Backward && all[i - 1]->phase != MemoryPhase::Backward) {
      const double gx = x - 0.5;
      guides.push_back({guides.empty() ? "backward starts" : "",
                        {gx, gx},
                        {0, static_cast<double>(top) / scale},
                        "#888888",
                        false,
                        true});
    }
  }
  std::vector<io::PlotSeries> series{storage, saved};
  if (!inside.x.empty()) series.push_back(inside);
  series.insert(series.end(), guides.begin(), guides.end());
  return io::render_svg_plot(title, "op (forward ops, then backward nodes)", units[u], series);
}

void MemoryTimeline::write_csv(const std::string& path) const {
  io::write_text_file_atomic(path, csv(), "MemoryTimeline.write_csv");
}

void MemoryTimeline::write_svg(const std::string& path, const std::string& title) const {
  io::write_text_file_atomic(path, svg(title), "MemoryTimeline.write_svg");
}

}  // namespace adjoint
