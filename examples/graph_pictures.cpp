// The pictures of docs/graphs.md, drawn by the library: the worked examples of the source
// material with forward values and gradients on the edges, as SVG (through Graphviz's dot)
// and as step-through pages.
//   build/examples/adjoint-graph-pictures [out-dir]     (default docs/images)
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/debug.h"

using namespace adjoint;

namespace {

void write(const std::string& dir, const std::string& stem, const Tensor& out,
           const GraphOptions& options) {
  write_svg({out}, dir + "/" + stem + ".svg", options);
  write_html({out}, dir + "/" + stem + ".html", options);
  std::printf("wrote %s/%s.svg and %s.html\n", dir.c_str(), stem.c_str(), stem.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "docs/images";
  std::filesystem::create_directories(dir);

  // f(x, y) = (x + y) * sin(x) at x = 0.7, y = -1.9.
  {
    GraphRecorder rec;  // keeps forward values and what backward sent along each edge
    Tensor x = scalar_tensor(0.7, DType::Float64).requires_grad_(true);
    Tensor y = scalar_tensor(-1.9, DType::Float64).requires_grad_(true);
    Tensor f = (x + y) * sin(x);
    f.backward();
    GraphOptions o;
    o.names = {{"x", x}, {"y", y}};
    o.recording = &rec;
    o.show_saved = false;
    o.left_to_right = true;
    write(dir, "sum_sin", f, o);
  }

  // z = W1 x + b1, h = relu(z), loss = (W2 h - t)^2: the two-layer network.
  {
    GraphRecorder rec;
    Tensor x = tensor({1.0, -2.0}, Shape{2, 1}, DType::Float64);
    Tensor W1 =
        tensor({0.5, -0.3, 0.8, 0.2, -0.6, 0.1}, Shape{3, 2}, DType::Float64).requires_grad_(true);
    Tensor b1 = tensor({0.1, 0.2, 0.3}, Shape{3, 1}, DType::Float64).requires_grad_(true);
    Tensor W2 = tensor({0.7, -0.4, 0.9}, Shape{1, 3}, DType::Float64).requires_grad_(true);
    Tensor t = tensor({0.5}, Shape{1, 1}, DType::Float64);
    Tensor z = matmul(W1, x) + b1;
    Tensor h = relu(z);
    Tensor d = matmul(W2, h) - t;
    Tensor loss = (d * d).sum();
    loss.backward();
    GraphOptions o;
    o.names = {{"W1", W1}, {"b1", b1}, {"W2", W2}};
    o.recording = &rec;
    o.show_grads = true;
    write(dir, "two_layer", loss, o);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "adjoint-graph-pictures: %s\n", e.what());
  return 1;
}
