// Tracing a function into a Graph (Note [Tracing] in trace.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "adjoint/compile.h"
#include "adjoint/error.h"
#include "compile/graph.h"

namespace adjoint::detail {

/// Thrown while tracing when the function does something a graph cannot hold (it reads a
/// tensor's values into C++, changes a traced tensor in place, or makes a tensor from traced
/// values through code the tracer does not see). compile then runs the function eagerly for
/// that signature, or throws, as CompileOptions::on_graph_break says.
class GraphBreak : public Error {
 public:
  explicit GraphBreak(const std::string& reason)
      : Error(ErrorKind::NotImplemented, "compile", reason), reason_(reason) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

/// Runs f once on `inputs` under a tracer and returns what it recorded: the forward, and the
/// backward when grad mode is on and an input or a captured tensor requires grad. Throws
/// GraphBreak. Generators the function draws from are left as they were before the call.
Graph trace_function(const CompiledFunction::Fn& f, const std::vector<Tensor>& inputs,
                     const StaticArgs& statics);

}  // namespace adjoint::detail
