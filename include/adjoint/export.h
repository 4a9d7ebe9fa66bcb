// Export a compiled function to a file, and import it in another process: forward and backward
// run without the C++ code that was traced (MLX's export_function / import_function).
//
//   auto f = adjoint::compile([&](const std::vector<Tensor>& in) {
//     return std::vector<Tensor>{model.forward(in[0])};
//   });
//   f({x});                                          // traces (the signature to export)
//   adjoint::export_function(f, "model.adjoint");    // the graph, parameters and constants
//
//   // in another program, which knows nothing of `model`:
//   adjoint::ImportedFunction g = adjoint::import_function("model.adjoint");
//   Tensor y = g({x})[0];
//   y.sum().backward();                              // gradients reach x and g.parameters()
//
// The file is a safetensors file: the tensors the function read from outside (parameters,
// in the order first read) and its constants, and the graph as JSON in the metadata. It holds
// the graph of one signature, before compile's passes; the importer runs them again. A function
// compiled with dynamic sizes whose formulas are fitted is written with them, and its import
// takes any sizes in those dims. See docs/compile.md, "Export".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adjoint/compile.h"
#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint {

namespace detail {
struct ImportedState;  // src/export/import.cpp
}

/// Writes the graph of the signature `f` was called with last, with the tensors it reads
/// (saved by value) and its constants, to `path` (atomically). Throws adjoint::Error (op
/// "export_function") when `f` has not traced a signature or fell back to eager code (a graph
/// break: custom autograd functions and in-place writes are), or reads a strided view from
/// outside (a file holds contiguous tensors; the graph's ops were traced on that layout). Every
/// graph compile keeps can be written; an op that could not (one holding a tensor) would be named
/// in the error.
void export_function(const CompiledFunction& f, const std::string& path);

/// A function read back by import_function: its graph, planned and run as `compile` runs it.
class ImportedFunction {
 public:
  /// Runs the graph on `inputs`, which must have the exported shapes (but for dynamic dims,
  /// of any size of 2 or more) and dtypes (a
  /// non-contiguous input is copied when the traced one was contiguous); an input may require
  /// grad only if the traced one did. Outputs carry a backward, as a compiled function's do.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  /// The tensors the function read from outside, as saved (leaves; requires_grad as they
  /// were): their .grad fills in backward, and an optimizer can train them.
  const std::vector<Tensor>& parameters() const;
  /// The generators its random draws (dropout) read, one per generator the traced function
  /// drew from: the process's default generator for draws that used the default one, else the
  /// function's own, which starts where the exported one stood when it was written (reseed it
  /// with manual_seed).
  std::vector<Generator*> generators() const;
  /// The shapes and dtypes the inputs must have (at the exported sizes, for dims that take a
  /// dynamic size).
  std::vector<Shape> input_shapes() const;
  /// The dims whose sizes may differ from input_shapes(): a function exported after its
  /// dynamic sizes' formulas were fitted (CompileOptions::dynamic) keeps them, and the graph
  /// of new sizes is built from them at their first call. Dims with one symbol share a size.
  std::vector<DynamicDim> dynamic_dims() const;
  std::vector<DType> input_dtypes() const;
  /// Which inputs the backward differentiates (those that required grad when traced).
  std::vector<bool> input_requires_grad() const;
  /// The graph as it runs (after the passes), as CompiledFunction::dump prints it.
  std::string dump() const;

 private:
  ImportedFunction() = default;  // made by import_function only: never without a graph
  friend ImportedFunction import_function(const std::string& path, const CompileOptions& options);
  std::shared_ptr<const detail::ImportedState> state_;
};

/// Reads a file export_function wrote and plans its graph with `options`. Throws adjoint::Error
/// (op "import_function") naming the file when it is not such a file or names an op this
/// build of adjoint does not have.
ImportedFunction import_function(const std::string& path, const CompileOptions& options = {});

}  // namespace adjoint
