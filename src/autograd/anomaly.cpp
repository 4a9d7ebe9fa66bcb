// Anomaly mode: creation sites, module scopes and the NaN checks. See anomaly.h.
//
// Note [Anomaly mode]
// - Off, it costs nothing on the per-op path: apply<Op> reads ModeState::anomaly (a byte next
//   to the grad mode it already loads) only when it records a node, and nn::Module::operator()
//   calls is_anomaly_enabled() once per module call.
// - On, each recorded node gets a CreationSite: the forward op's name, the innermost module
//   scope, and the raw return addresses of the call stack (glibc's backtrace(), a few
//   microseconds). Nothing is symbolized until an error needs it.
// - The creation site is the first frame that is not adjoint's own: frames whose source file
//   lies in adjoint's src/ or include/adjoint/, in the C++ standard library's headers, or that
//   have no file and a function named adjoint::... or std::... are skipped. The rest is the
//   caller's code (tests and examples count as callers). Symbolizing uses GCC's libbacktrace
//   (shipped with g++ as libbacktrace.a, without its header, so the four functions used are
//   declared below): it reads the executable's DWARF line tables, so a caller built with -g
//   (or -g1) gets file and line; without debug information the function's name from the
//   symbol table is what it gets.
// - Backward (check_nan): the engine checks every gradient a node returns. While anomaly mode
//   is on, VJPs do not add into .grad in place (Note [Adding into .grad in place]): a leaf's
//   gradient is then always returned by the node that made it, and so checked, before its
//   AccumulateGrad adds it into .grad.
// - Forward (check_forward): an op's output with a NaN that none of its inputs had. Off by
//   default, as in PyTorch, since a NaN that a later `where` masks out is harmless.
#include "autograd/anomaly.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <utility>

#include "adjoint/anomaly.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "autograd/memory_hooks.h"
#include "core/mode_state.h"
#include "core/tensor_factory.h"
#include "dispatch/op_cache.h"

#ifdef ADJOINT_HAVE_LIBBACKTRACE
extern "C" {
// From GCC's libbacktrace (backtrace.h, not installed by Debian's libgcc-12-dev).
struct backtrace_state;
using backtrace_error_callback = void (*)(void* data, const char* msg, int errnum);
using backtrace_full_callback = int (*)(void* data, uintptr_t pc, const char* filename, int lineno,
                                        const char* function);
using backtrace_syminfo_callback = void (*)(void* data, uintptr_t pc, const char* symname,
                                            uintptr_t symval, uintptr_t symsize);
backtrace_state* backtrace_create_state(const char* filename, int threaded,
                                        backtrace_error_callback error_callback, void* data);
int backtrace_pcinfo(backtrace_state* state, uintptr_t pc, backtrace_full_callback callback,
                     backtrace_error_callback error_callback, void* data);
int backtrace_syminfo(backtrace_state* state, uintptr_t addr, backtrace_syminfo_callback callback,
                      backtrace_error_callback error_callback, void* data);
}
#endif

namespace adjoint {

DetectAnomaly::DetectAnomaly(bool enabled, AnomalyOptions options) : prev_(tls_mode.anomaly) {
  using namespace detail;
  tls_mode.anomaly =
      !enabled ? 0
               : static_cast<uint8_t>(kAnomalyOn | (options.check_nan ? kAnomalyCheckNan : 0) |
                                      (options.check_forward ? kAnomalyCheckForward : 0));
}
DetectAnomaly::~DetectAnomaly() { tls_mode.anomaly = prev_; }

bool is_anomaly_enabled() { return tls_mode.anomaly != 0; }

namespace detail {
namespace {

thread_local std::vector<std::string> tls_module_scopes;

// One frame of the call stack, symbolized.
struct Frame {
  std::string file;  // empty without debug information
  int line = 0;
  std::string function;  // demangled when it came from the symbol table
};

std::string demangle(const char* name) {
  if (name == nullptr) return {};
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// A file of this source tree as a path relative to its root ("src/ops/unary.cpp"), or "".
// DWARF may name files relative to the build directory ("../../tests/x.cpp"), so a relative
// name is tried without its leading "../" steps.
std::string project_relative(const std::string& file) {
  const std::string root = std::string(ADJOINT_SOURCE_DIR) + "/";
  if (starts_with(file, root.c_str())) return file.substr(root.size());
  if (file.empty() || file[0] == '/') return "";
  std::string rest = file;
  while (starts_with(rest, "../") || starts_with(rest, "./"))
    rest = rest.substr(rest[1] == '/' ? 2 : 3);
  std::error_code ec;
  return std::filesystem::exists(root + rest, ec) ? rest : "";
}

// Whether a frame is adjoint's own (or the standard library's, or a sanitizer's interceptor
// of backtrace()): see Note [Anomaly mode].
bool is_library_frame(const Frame& f) {
  if (starts_with(f.function, "__interceptor_") || starts_with(f.function, "__sanitizer") ||
      f.file.find("/libsanitizer/") != std::string::npos ||
      f.file.find("compiler-rt/") != std::string::npos)
    return true;
  if (!f.file.empty()) {
    const std::string in_project = project_relative(f.file);
    return starts_with(in_project, "src/") || starts_with(in_project, "include/adjoint/") ||
           f.file.find("/include/c++/") != std::string::npos ||
           f.file.find("/bits/") != std::string::npos;
  }
  return f.function.empty() || starts_with(f.function, "adjoint::") ||
         starts_with(f.function, "std::") || starts_with(f.function, "void std::") ||
         f.function.find(" adjoint::") != std::string::npos;
}

#ifdef ADJOINT_HAVE_LIBBACKTRACE
backtrace_state* symbolizer() {
  static backtrace_state* state = backtrace_create_state(
      nullptr, /*threaded=*/1, [](void*, const char*, int) {}, nullptr);
  return state;
}

// The frames at `pc`, innermost (inlined) first.
std::vector<Frame> symbolize(void* address) {
  std::vector<Frame> out;
  const auto pc = reinterpret_cast<uintptr_t>(address) - 1;  // inside the call instruction
  backtrace_pcinfo(
      symbolizer(), pc,
      [](void* data, uintptr_t, const char* file, int line, const char* function) {
        auto* frames = static_cast<std::vector<Frame>*>(data);
        frames->push_back({file ? file : "", line, function ? demangle(function) : ""});
        return 0;
      },
      [](void*, const char*, int) {}, &out);
  if (out.empty() || out.back().file.empty()) {
    std::string name;
    backtrace_syminfo(
        symbolizer(), pc,
        [](void* data, uintptr_t, const char* sym, uintptr_t, uintptr_t) {
          *static_cast<std::string*>(data) = demangle(sym);
        },
        [](void*, const char*, int) {}, &name);
    if (out.empty()) out.push_back({});
    if (out.back().function.empty() || out.back().file.empty()) out.back().function = name;
  }
  return out;
}
#else
std::vector<Frame> symbolize(void* address) {
  char** names = backtrace_symbols(&address, 1);
  Frame f;
  if (names != nullptr) {
    f.function = names[0];  // "program(mangled+0x12) [0x...]": best effort without libbacktrace
    if (const auto open = f.function.find('('), plus = f.function.find('+', open);
        open != std::string::npos && plus != std::string::npos)
      f.function = demangle(f.function.substr(open + 1, plus - open - 1).c_str());
    std::free(names);
  }
  return {f};
}
#endif

std::string describe_frames(const std::vector<void*>& frames) {
  for (void* pc : frames) {
    for (const Frame& f : symbolize(pc)) {
      if (is_library_frame(f)) continue;
      std::ostringstream os;
      if (!f.file.empty()) {
        const std::string in_project = project_relative(f.file);
        os << (in_project.empty() ? f.file : in_project) << ":" << f.line;
        if (!f.function.empty()) os << " (in " << f.function << ")";
      } else {
        os << "function " << f.function << " (built without -g: no file and line)";
      }
      return os.str();
    }
  }
  return "an unknown site (no frame of the call stack lies outside adjoint)";
}

// Counts of NaN and infinite elements of a floating tensor (0, 0 for others and for batched
// tensors, whose logical values are not one buffer).
struct NonFinite {
  int64_t nan = 0, inf = 0;
  bool any() const { return nan != 0 || inf != 0; }
};

NonFinite count_non_finite(const Tensor& t) {
  NonFinite r;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0 || t.impl()->batched) return r;
  // Plain data reads: no graph, no tangents, no anomaly checks of the checks, and unseen by
  // observers (profiles, timelines) and by a checkpoint region's op log, whose recomputation
  // may run with anomaly mode in another state.
  const NoGradGuard no_grad;
  const NoForwardGradGuard no_tangents;
  const DetectAnomaly off(false);
  const OpObserverPause unobserved;
  const OpCacheScope unlogged(nullptr);
  // An expanded gradient (sum's backward) is read over its unique elements only.
  for (double v : unique_elements(detail::detach_alias(t))
                      .to(DType::Float64)
                      .contiguous()
                      .to_vector<double>()) {
    r.nan += std::isnan(v);
    r.inf += std::isinf(v);
  }
  return r;
}

std::string describe_bad(const NonFinite& b, const Tensor& t) {
  std::ostringstream os;
  if (b.nan) os << b.nan << " nan";
  if (b.nan && b.inf) os << " and ";
  if (b.inf) os << b.inf << " infinite";
  os << " of " << t.numel() << " elements (" << t.shape() << ", " << t.dtype() << ")";
  return os.str();
}

}  // namespace

std::string CreationSite::describe() const {
  std::string s = "`" + op + "` called at " + describe_frames(frames);
  if (!module_path.empty()) s += " in module " + module_path;
  return s;
}

namespace {
// Where `op` is being called from now: its module scope and the raw call stack.
CreationSite capture(const char* op) {
  CreationSite site{op, tls_module_scopes.empty() ? "" : tls_module_scopes.back(), {}};
  void* buffer[64];
  const int n = ::backtrace(buffer, 64);
  site.frames.assign(buffer, buffer + std::max(n, 0));
  return site;
}
}  // namespace

void note_creation(Node& node, const char* op) {
  node.set_creation_site(std::make_unique<CreationSite>(capture(op)));
}

std::string creation_hint(const Node* node) {
  if (node != nullptr && node->creation_site() != nullptr)
    return "; its forward op was " + node->creation_site()->describe();
  return "; turn on anomaly mode (adjoint::DetectAnomaly) to see where its forward op was called";
}

void check_node_gradients(const Node& node, const TensorList& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const NonFinite bad = count_non_finite(grads[i]);
    if (!bad.any()) continue;
    std::ostringstream os;
    os << "anomaly: " << node.name() << " returned a gradient for its input " << i << " with "
       << describe_bad(bad, grads[i]);
    if (node.creation_site() != nullptr)
      os << creation_hint(&node);
    else
      os << "; the node was recorded outside anomaly mode, so its creation site is unknown";
    throw Error(ErrorKind::Value, "backward", os.str());
  }
}

void check_forward_output(const char* op, const Tensor* inputs, std::size_t n, const Tensor& out) {
  const NonFinite bad = count_non_finite(out);
  if (bad.nan == 0) return;
  for (std::size_t i = 0; i < n; ++i)
    if (count_non_finite(inputs[i]).nan != 0) return;  // a NaN passed on, not made here
  throw Error(ErrorKind::Value, op,
              detail::str("anomaly: the output has ", describe_bad(bad, out),
                          " though no input had a nan; ", capture(op).describe()));
}

ModuleScope::ModuleScope(std::string path) { tls_module_scopes.push_back(std::move(path)); }
ModuleScope::~ModuleScope() { tls_module_scopes.pop_back(); }

}  // namespace detail
}  // namespace adjoint
