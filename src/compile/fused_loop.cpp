// The graph node of a fused group: its program run by the inputs' device's executor
// (kernels::run_fused_program, Note [Fused programs are kernels] in backend/fused_program.h),
// or its members one by one under vmap or jvp (Note [Pointwise fusion] in fusion.cpp).
#include "compile/fused_loop.h"

#include <sstream>

#include "backend/device_kernels.h"
#include "core/op_scope.h"

namespace adjoint::detail {
namespace {

/// A fused group as the graph keeps it.
class FusedOp final : public TracedOp {
 public:
  FusedOp(Program program, std::vector<std::shared_ptr<const TracedOp>> members,
          std::vector<std::vector<int>> member_inputs, std::vector<int> member_output,
          std::vector<int> output_slot, int num_inputs)
      : program_(std::move(program)),
        members_(std::move(members)),
        member_inputs_(std::move(member_inputs)),
        member_output_(std::move(member_output)),
        output_slot_(std::move(output_slot)),
        num_inputs_(num_inputs) {
    prepared_ = kernels::prepare_fused_program(kCPU, program_);
    std::ostringstream os;
    os << "fused[";
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (i == 6) {
        os << ", ... " << members_.size() << " ops";
        break;
      }
      os << (i ? ", " : "") << members_[i]->name();
    }
    os << "]";
    name_ = os.str();
  }

  const char* name() const override { return name_.c_str(); }

  Tensor run_kernel(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    const OpScope scope("fused pointwise");
    return first_and_rest(kernels::run_fused_program(program_, prepared_.get(), in), extras);
  }

  // The members one by one through the stack (under vmap or jvp). Slots 0 .. num_inputs_ - 1
  // are the fused inputs, then one per member result.
  Tensor run_dispatched(std::span<const Tensor> in, std::vector<Tensor>& extras) const override {
    std::vector<Tensor> slots(in.begin(), in.end());
    slots.resize(static_cast<std::size_t>(num_inputs_) + members_.size());  // (a sum included)
    std::vector<Tensor> args, unused;
    for (std::size_t m = 0; m < members_.size(); ++m) {
      args.clear();
      for (int s : member_inputs_[m]) args.push_back(slots[static_cast<std::size_t>(s)]);
      slots[static_cast<std::size_t>(member_output_[m])] =
          members_[m]->run_dispatched(args, unused);
    }
    std::vector<Tensor> outs;
    for (int s : output_slot_) outs.push_back(slots[static_cast<std::size_t>(s)]);
    return first_and_rest(std::move(outs), extras);
  }

  bool same_as(const TracedOp&) const override { return false; }
  bool fused() const override { return true; }
  std::string body_text(const std::string& indent) const override {
    return program_text(program_, indent);
  }

 private:
  static Tensor first_and_rest(std::vector<Tensor> outs, std::vector<Tensor>& extras) {
    extras.assign(std::make_move_iterator(outs.begin() + 1), std::make_move_iterator(outs.end()));
    return std::move(outs[0]);
  }

  Program program_;
  std::vector<std::shared_ptr<const TracedOp>> members_;
  std::vector<std::vector<int>> member_inputs_;  // slots
  std::vector<int> member_output_;               // slot of each member's result
  std::vector<int> output_slot_;                 // slot of each fused output
  int num_inputs_;
  std::string name_;
  /// What the CPU's executor fetched for the program once (the graph is traced on the CPU; an
  /// executor given another device's works its own out per run).
  std::shared_ptr<const kernels::PreparedFusedProgram> prepared_;
};

}  // namespace

std::shared_ptr<const TracedOp> make_fused_op(Program program,
                                              std::vector<std::shared_ptr<const TracedOp>> members,
                                              std::vector<std::vector<int>> member_inputs,
                                              std::vector<int> member_output,
                                              std::vector<int> output_slot, int num_inputs) {
  return std::make_shared<FusedOp>(std::move(program), std::move(members), std::move(member_inputs),
                                   std::move(member_output), std::move(output_slot), num_inputs);
}

}  // namespace adjoint::detail
