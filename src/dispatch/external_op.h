// A call outside the dispatch stack (a comparison, an argmax, a random draw) as a traced graph
// keeps it: the function that runs it again, and when it can be written to a file, how
// (Note [Exporting ops] in src/core/op_fields.h).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "core/op_tracer.h"
#include "dispatch/layer.h"

namespace adjoint::detail {

class ExternalOp final : public TracedOp {
 public:
  ExternalOp(const char* name, ExternalFn run, ExternalExport exported = {},
             std::ptrdiff_t arity = -1, Generator* rng = nullptr)
      : name_(name),
        run_(std::move(run)),
        exported_(std::move(exported)),
        arity_(arity),
        rng_(rng) {}
  const char* name() const override { return name_; }
  Tensor run_kernel(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    extras.clear();
    return run_(in);
  }
  Tensor run_dispatched(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    extras.clear();
    return run_(in);
  }
  bool same_as(const TracedOp&) const override { return false; }
  const char* export_key() const override { return exported_.key; }
  FieldList export_fields() const override { return exported_.fields; }
  std::ptrdiff_t arity() const override { return arity_; }
  Generator* generator() const override { return rng_; }
  /// A rule for import's shape pass (TracedOp::infer), where the factory that rebuilds the op
  /// from a file knows one (a draw's shape).
  using Infer = std::function<std::optional<OutputSpec>(std::span<const ValueSpec>)>;
  void set_infer(Infer f) { infer_ = std::move(f); }
  std::optional<OutputSpec> infer(std::span<const ValueSpec> in) const override {
    return infer_ ? infer_(in) : std::nullopt;
  }

 private:
  const char* name_;
  ExternalFn run_;
  ExternalExport exported_;
  std::ptrdiff_t arity_;
  Generator* rng_;  ///< what a random draw advances
  Infer infer_;
};

}  // namespace adjoint::detail
