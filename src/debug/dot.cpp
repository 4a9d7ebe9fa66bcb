// to_dot formats a GraphView as Graphviz DOT; render_svg runs Graphviz's `dot` program on it.
// The program rather than libgvc: no link-time dependency for a debugging aid, and a missing
// Graphviz is a clear error at the call instead of a build that fails.
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "adjoint/debug.h"
#include "adjoint/error.h"
#include "adjoint/io/text_file.h"
#include "debug/graph_view.h"

extern char** environ;

namespace adjoint {
namespace {

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    q += c;
  }
  return q + "\"";
}

// One tensor as a label line, "grad: [..]": up to max_values numbers; a longer tensor adds its
// count and norm (format_values), the first thing vanishing and exploding gradients show.
void add_tensor_lines(std::vector<std::string>& lines, const char* what, const Tensor& t,
                      std::size_t max_values) {
  if (t.defined()) lines.push_back(std::string(what) + ": " + debug::format_values(t, max_values));
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (std::size_t i = 0; i < lines.size(); ++i) s += (i ? "\n" : "") + lines[i];
  return s;
}

// The `dot` program: $ADJOINT_DOT when set (tests point it at a missing file), else PATH.
std::string dot_program() {
  const char* env = std::getenv("ADJOINT_DOT");
  return env && *env ? env : "dot";
}

std::string dot_source(const std::vector<Tensor>& outputs, const GraphOptions& options,
                       const char* op) {
  const debug::GraphView view = debug::build_view(outputs, options, op);
  std::ostringstream o;
  o << "digraph adjoint {\n"
    << "  graph [rankdir=" << (options.left_to_right ? "LR" : "TB")
    << ", fontname=\"Helvetica\", nodesep=0.3, ranksep=0.4];\n"
    << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n"
    << "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];\n";
  for (const debug::ViewNode& v : view.nodes) {
    std::vector<std::string> lines;
    lines.push_back(v.leaf ? (v.name.empty() ? "leaf" : v.name)
                           : (v.name.empty() ? v.op : v.name + " = " + v.op));
    if (!v.shape.empty()) lines.push_back(v.shape + " " + v.dtype);
    if (options.show_saved && v.num_saved > 0)
      lines.push_back("saved " + std::to_string(v.saved_bytes) + " B" +
                      (v.saved_freed ? " (freed)" : ""));
    if (options.recording || v.leaf || v.output >= 0)
      add_tensor_lines(lines, "value", v.value, options.max_values);
    if (!v.backward_steps.empty()) {
      // The gradient arriving at the node in its last step; a leaf's is what went into .grad.
      const debug::ViewStep& s = view.steps[v.backward_steps.back()];
      if (!s.grads_in.empty())
        add_tensor_lines(lines, "grad in", s.grads_in[0], options.max_values);
    }
    if (options.show_grads && v.leaf) add_tensor_lines(lines, "grad", v.grad, options.max_values);
    if (!v.backward_steps.empty()) {
      std::string steps = "backward step";
      if (v.backward_steps.size() > 1) steps += "s";
      for (std::size_t i = 0; i < v.backward_steps.size(); ++i)
        steps += (i ? ", " : " ") + std::to_string(v.backward_steps[i] + 1);
      lines.push_back(steps);
    }
    const char* fill = v.leaf ? "#cfe2f3" : v.output >= 0 ? "#f4cccc" : "#eeeeee";
    o << "  " << v.id << " [label=" << quoted(join(lines)) << ", fillcolor=\"" << fill
      << "\", tooltip=" << quoted(v.backward_name) << "];\n";
  }
  for (const debug::ViewEdge& e : view.edges) {
    std::vector<std::string> lines;
    if (options.recording) {
      add_tensor_lines(lines, "value", e.value, options.max_values);
      add_tensor_lines(lines, "grad", e.grad, options.max_values);
    }
    o << "  " << view.nodes[e.from].id << " -> " << view.nodes[e.to].id;
    if (!lines.empty()) o << " [label=" << quoted(join(lines)) << "]";
    o << ";\n";
  }
  o << "}\n";
  return o.str();
}

}  // namespace

std::string to_dot(const std::vector<Tensor>& outputs, const GraphOptions& options) {
  return dot_source(outputs, options, "to_dot");
}

bool graphviz_available() {
  const std::string prog = dot_program();
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
  return false;
}

std::string render_svg(const std::string& dot_source) {
  namespace fs = std::filesystem;
  ADJOINT_CHECK(graphviz_available(), NotImplemented, "render_svg", "Graphviz's '", dot_program(),
                "' program was not found; install the Debian package graphviz "
                "(scripts/install-deps.sh graphviz)");
  // Files rather than pipes: dot reads all input before writing, and its messages go to a
  // file so that neither side can block on a full pipe.
  std::string dir_template = (fs::temp_directory_path() / "adjoint-dot-XXXXXX").string();
  ADJOINT_CHECK(::mkdtemp(dir_template.data()) != nullptr, IO, "render_svg",
                "cannot make a temporary folder: ", std::strerror(errno));
  const fs::path dir = dir_template;
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const std::string in = (dir / "graph.dot").string(), out = (dir / "graph.svg").string(),
                    err = (dir / "stderr.txt").string();
  {
    std::ofstream f(in, std::ios::binary);
    f << dot_source;
    ADJOINT_CHECK(f.good(), IO, "render_svg", "cannot write ", in);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::string prog = dot_program();
  std::vector<std::string> args{prog, "-Tsvg", "-o", out, in};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, prog.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ADJOINT_CHECK(rc == 0, NotImplemented, "render_svg", "cannot run Graphviz's '", prog,
                "': ", std::strerror(rc), "; install the Debian package graphviz");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  ADJOINT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, Value, "render_svg",
                "Graphviz's dot rejected the graph: ", slurp(err));
  return slurp(out);
}

void write_svg(const std::vector<Tensor>& outputs, const std::string& path,
               const GraphOptions& options) {
  io::write_text_file_atomic(path, render_svg(dot_source(outputs, options, "write_svg")),
                             "write_svg");
}

}  // namespace adjoint
