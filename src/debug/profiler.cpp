// The profiler (include/adjoint/profiler.h): an op observer (src/autograd/memory_hooks.h) that
// timestamps each forward op and backward node, and the table and trace made from its events.
//
// Note [Profiler events]
// - A forward op is timed from before_forward_op (as the call reaches the Observe layer,
//   before the kernel runs) to after_forward_op (its node, saved tensors and tangents in
//   place): everything the op costs the caller. Ops called inside another op's forward nest:
//   they get depth > 0, and only depth-0 events are summed into totals, so that no time
//   counts twice. An op that throws reports forward_op_failed (the dispatch stack's Observe
//   layer catches, free until something throws) and leaves no event.
// - A backward node is timed around its apply() alone: the engine's bookkeeping between nodes
//   (summing gradients into buffers, the ready queue) is in no event, so the top-level events
//   of a step sum to a little less than its wall time. The ops a node's VJP runs are not
//   events (the engine pauses observers inside nodes; see Note [Op observer]).
// - FLOPs follow Note [FLOP counting]; a backward node is given twice its forward op's, the
//   usual estimate, when the profiler saw that forward (keyed by the node's address while it
//   is alive; a node made before the profiler started gets 0).
#include "adjoint/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "adjoint/io/text_file.h"
#include "adjoint/tensor.h"
#include "autograd/memory_hooks.h"
#include "autograd/op_cost.h"

namespace adjoint {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> dims(const Shape& s) { return {s.begin(), s.end()}; }

uint32_t this_thread_number() {
  static std::atomic<uint32_t> counter{0};
  thread_local const uint32_t number = ++counter;
  return number;
}

}  // namespace

struct Profiler::Impl final : detail::OpObserver {
  Clock::time_point start = Clock::now();
  Clock::time_point end{};
  bool recording = true;  // false after stop(): calls only pass on
  bool linked = true;     // in this thread's observer chain
  uint32_t thread = this_thread_number();
  std::vector<ProfileEvent> events;
  // Forward ops started and not yet finished, innermost last: their op name and event index.
  std::vector<std::pair<const char*, std::size_t>> open;
  std::optional<std::size_t> open_node;  // the event of the backward node running
  // Forward FLOPs by the sequence number of the node the op recorded (unique, where addresses
  // of pooled nodes are reused).
  std::unordered_map<uint64_t, uint64_t> forward_flops;

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }

  // A new event starting now, at the depth of the forward ops open; returns its index.
  std::size_t begin(std::string name, bool backward) {
    ProfileEvent e;
    e.name = std::move(name);
    e.backward = backward;
    e.start_ns = now_ns();
    e.end_ns = -1;  // open: see stop()
    e.depth = static_cast<int>(open.size());
    e.thread = thread;
    events.push_back(std::move(e));
    return events.size() - 1;
  }
  static void note_inputs(ProfileEvent& e, const Tensor* inputs, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      e.input_shapes.push_back(inputs[i].defined() ? inputs[i].shape() : Shape{});
      e.input_dtypes.push_back(inputs[i].defined() ? inputs[i].dtype() : DType::Float32);
    }
    e.bytes += detail::tensor_bytes(inputs, n);
  }
  void erase(std::size_t index) {
    events.erase(events.begin() + static_cast<std::ptrdiff_t>(index));
  }

  void before_forward_op(const char* op) override {
    if (recording) open.emplace_back(op, begin(op, false));
    OpObserver::before_forward_op(op);
  }

  void forward_op_tensors(const char* op, const Tensor* inputs, std::size_t n,
                          const Tensor& out) override {
    if (recording && !open.empty() && open.back().first == op) {
      ProfileEvent& e = events[open.back().second];
      note_inputs(e, inputs, n);
      e.bytes += detail::tensor_bytes(&out, 1);
      e.flops = detail::op_flops(op, inputs, n, out);
      if (out.defined()) {
        e.output_shape = out.shape();
        if (const std::shared_ptr<Node> node = out.grad_fn())
          forward_flops[node->sequence_nr()] = e.flops;
      }
    }
    OpObserver::forward_op_tensors(op, inputs, n, out);
  }

  // Ends `op`'s open entry (keeping its event or dropping it) and drops the entries above it
  // (ops that never finished; none when every op reports its end or failure). Touches nothing
  // when `op` is not open here: it began before this profiler, or an observer below failed
  // after its end.
  void close(const char* op, bool keep) {
    auto it =
        std::find_if(open.rbegin(), open.rend(), [&](const auto& e) { return e.first == op; });
    if (it == open.rend()) return;
    const std::size_t index = it->second;
    for (; open.back().second != index; open.pop_back()) erase(open.back().second);
    open.pop_back();
    if (keep) {
      events[index].end_ns = now_ns();
    } else {
      erase(index);
    }
  }

  void after_forward_op(const char* op) override {
    if (recording) close(op, /*keep=*/true);
    OpObserver::after_forward_op(op);
  }

  void forward_op_failed(const char* op) override {
    if (recording) close(op, /*keep=*/false);  // a failed op is no event
    OpObserver::forward_op_failed(op);
  }

  void before_backward_node(const Node& node) override {
    if (recording) {
      if (open_node) erase(*open_node);  // the previous node threw: no event
      open_node = begin(node.name(), true);
      if (auto it = forward_flops.find(node.sequence_nr()); it != forward_flops.end())
        events[*open_node].flops = 2 * it->second;
    }
    OpObserver::before_backward_node(node);
  }

  void backward_node_tensors(const Node& node, const TensorList& grads) override {
    if (recording && open_node) {
      ProfileEvent& e = events[*open_node];
      e.end_ns = now_ns();
      note_inputs(e, grads.data(), grads.size());
      open_node.reset();
    }
    OpObserver::backward_node_tensors(node, grads);
  }

  void install() {
    next_ = detail::tls_op_observer;
    detail::set_op_observer(this);
  }
  // Stops recording. Unlinks from the chain when on top of it; otherwise (an observer made
  // later is still above it) it stays linked, passing calls on, until the profiler dies.
  void stop() {
    if (detail::tls_op_observer == this) {
      detail::set_op_observer(next_);
      linked = false;
    }
    if (!recording) return;
    // Ops still open (stop() inside an op) and a node that threw have no end.
    std::erase_if(events, [](const ProfileEvent& e) { return e.end_ns < e.start_ns; });
    open.clear();
    open_node.reset();
    forward_flops.clear();
    end = Clock::now();
    recording = false;
  }
};

Profiler::Profiler() : impl_(std::make_unique<Impl>()) { impl_->install(); }

Profiler::~Profiler() {
  impl_->stop();
  // Still linked below a later observer, or destroyed on another thread: the chain still
  // points at it, so it stays, emptied and passing calls on (as a stopped GraphRecorder's
  // observer does).
  if (impl_->linked) {
    impl_->events = {};
    (void)impl_.release();
  }
}

void Profiler::stop() { impl_->stop(); }

const std::vector<ProfileEvent>& Profiler::events() const { return impl_->events; }

double Profiler::wall_ms() const {
  const Clock::time_point end = impl_->recording ? Clock::now() : impl_->end;
  return std::chrono::duration<double, std::milli>(end - impl_->start).count();
}

std::vector<ProfileSummary> Profiler::summary() const {
  std::map<std::pair<bool, std::string>, ProfileSummary> by_name;
  for (const ProfileEvent& e : impl_->events) {
    ProfileSummary& s = by_name[{e.backward, e.name}];
    s.name = e.name;
    s.backward = e.backward;
    s.count++;
    if (e.depth == 0) s.total_ms += e.duration_ms();
    s.flops += e.flops;
    s.bytes += e.bytes;
  }
  const double wall = wall_ms();
  std::vector<ProfileSummary> out;
  for (auto& [key, s] : by_name) {
    s.mean_ms = s.total_ms / static_cast<double>(s.count);
    s.share = wall > 0 ? s.total_ms / wall : 0;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const ProfileSummary& a, const ProfileSummary& b) {
    return a.total_ms > b.total_ms;
  });
  return out;
}

std::string Profiler::table(std::size_t rows) const {
  const std::vector<ProfileSummary> all = summary();
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-8s %7s %11s %10s %7s %12s %11s\n", "name", "phase",
                "count", "total ms", "mean ms", "share", "GFLOP", "MB");
  os << line;
  double total = 0;
  for (const ProfileSummary& s : all) total += s.total_ms;
  for (std::size_t i = 0; i < all.size() && i < rows; ++i) {
    const ProfileSummary& s = all[i];
    std::snprintf(line, sizeof line, "%-28.28s %-8s %7lld %11.3f %10.4f %6.1f%% %12.4f %11.2f\n",
                  s.name.c_str(), s.backward ? "backward" : "forward",
                  static_cast<long long>(s.count), s.total_ms, s.mean_ms, 100 * s.share,
                  static_cast<double>(s.flops) * 1e-9, static_cast<double>(s.bytes) * 1e-6);
    os << line;
  }
  if (all.size() > rows) os << "... " << all.size() - rows << " more\n";
  std::snprintf(
      line, sizeof line, "%zu events; %.3f ms in ops and nodes of %.3f ms wall (%.1f%%)\n",
      impl_->events.size(), total, wall_ms(), wall_ms() > 0 ? 100 * total / wall_ms() : 0.0);
  os << line;
  return os.str();
}

std::string Profiler::chrome_trace() const {
  nlohmann::json events = nlohmann::json::array();
  for (const ProfileEvent& e : impl_->events) {
    nlohmann::json shapes = nlohmann::json::array(), dtypes = nlohmann::json::array();
    for (const Shape& s : e.input_shapes) shapes.push_back(dims(s));
    for (DType d : e.input_dtypes) dtypes.push_back(std::string(to_string(d)));
    nlohmann::json args = {{"input_shapes", shapes},
                           {"input_dtypes", dtypes},
                           {"flops", e.flops},
                           {"bytes", e.bytes},
                           {"depth", e.depth}};
    if (!e.backward) args["output_shape"] = dims(e.output_shape);
    events.push_back({{"name", e.name},
                      {"cat", e.backward ? "backward" : "forward"},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) * 1e-3},
                      {"dur", static_cast<double>(e.end_ns - e.start_ns) * 1e-3},
                      {"pid", 1},
                      {"tid", e.thread},
                      {"args", args}});
  }
  const nlohmann::json trace = {{"traceEvents", events},
                                {"displayTimeUnit", "ms"},
                                {"otherData", {{"wall_ms", wall_ms()}, {"tool", "adjoint"}}}};
  return trace.dump();
}

void Profiler::write_chrome_trace(const std::string& path) const {
  io::write_text_file_atomic(path, chrome_trace(), "Profiler::write_chrome_trace");
}

}  // namespace adjoint
