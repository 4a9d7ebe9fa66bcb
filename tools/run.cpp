// adjoint-run: runs a function that export_function wrote, with no other code: inputs from a
// safetensors file, outputs (and with --backward the gradients) to another.
//
//   adjoint-run model.adjoint inputs.safetensors out.safetensors [--backward]
//
// Inputs are the tensors "input.0", "input.1", ... of the inputs file, made leaves that
// require grad where the exported function's did. The outputs file gets "output.<i>"; with
// --backward, the backward runs from the cotangents "cotangent.<i>" of the inputs file (ones
// where absent) and the file also gets "grad.input.<i>" and "grad.parameter.<i>" (the
// gradients of the inputs and of the function's parameters that require grad).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/io/safetensors.h"

using adjoint::Tensor;

namespace {

const Tensor* find(const adjoint::io::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

int run(const std::string& function_path, const std::string& inputs_path,
        const std::string& outputs_path, bool backward) {
  const adjoint::ImportedFunction f = adjoint::import_function(function_path);
  const adjoint::io::SafetensorsFile in = adjoint::io::load_safetensors(inputs_path);
  const std::vector<adjoint::Shape> shapes = f.input_shapes();
  const std::vector<adjoint::DType> dtypes = f.input_dtypes();
  const std::vector<bool> grads = f.input_requires_grad();
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Tensor* t = find(in.tensors, "input." + std::to_string(i));
    if (t == nullptr) {
      std::fprintf(stderr, "adjoint-run: %s has no tensor 'input.%zu'\n", inputs_path.c_str(), i);
      return 1;
    }
    Tensor x = t->to(dtypes[i]);  // safetensors widens 16-bit floats on load
    inputs.push_back(grads[i] ? x.detach().requires_grad_(true) : x);
  }
  const std::vector<Tensor> outputs = f(inputs);
  adjoint::io::NamedTensors out;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    out.emplace_back("output." + std::to_string(i), outputs[i].detach());
  if (backward) {
    std::vector<Tensor> roots, cotangents;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad()) continue;
      const Tensor* c = find(in.tensors, "cotangent." + std::to_string(i));
      roots.push_back(outputs[i]);
      cotangents.push_back(c ? c->to(outputs[i].dtype()) : adjoint::ones_like(outputs[i]));
    }
    adjoint::autograd::backward(roots, cotangents);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && inputs[i].grad().defined())
        out.emplace_back("grad.input." + std::to_string(i), inputs[i].grad());
    for (std::size_t i = 0; i < f.parameters().size(); ++i)
      if (f.parameters()[i].grad().defined())
        out.emplace_back("grad.parameter." + std::to_string(i), f.parameters()[i].grad());
  }
  adjoint::io::save_safetensors(outputs_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs a function export_function wrote (adjoint/export.h)"};
  std::string function_path, inputs_path, outputs_path;
  bool backward = false;
  app.add_option("function", function_path, "the file export_function wrote")->required();
  app.add_option("inputs", inputs_path, "safetensors file with input.0, input.1, ...")->required();
  app.add_option("outputs", outputs_path, "safetensors file to write output.<i> (and grads) to")
      ->required();
  app.add_flag("--backward", backward,
               "also run the backward from cotangent.<i> (ones where absent) and write "
               "grad.input.<i> and grad.parameter.<i>");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(function_path, inputs_path, outputs_path, backward);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adjoint-run: %s\n", e.what());
    return 1;
  }
}
