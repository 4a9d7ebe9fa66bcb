// Descriptors and the agreement check run before each collective when the group checks
// shapes. See Note [Agreeing on a call].
#include "distributed/call_check.h"

#include <sstream>

#include "distributed/call_tag.h"

#include "adjoint/error.h"

namespace adjoint::dist {

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Average:
      return "average";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::Barrier:
      return "barrier";
  }
  return "?";
}

namespace detail {

// Note [Agreeing on a call]
// MPI matches collectives by order alone: if rank 0 all-reduces [2, 3] floats while rank 1
// all-reduces [3] doubles, MPI reads past a buffer or waits forever. So, unless the group was
// started with check_shapes = false, every collective first all-gathers a fixed-size
// descriptor (valid?, kind, op, root, dtype, shape) and only moves data when all agree. Every
// rank sees the same descriptors, so every rank reaches the same verdict and raises (no rank
// is left waiting). A rank whose call was invalid locally (a bad dtype, say) still takes
// part in the exchange for that reason, and then rethrows its own error.
//
// Note [Tagging a differentiable call]
// A differentiable collective's backward is a collective too, run only on the ranks that
// recorded the forward. If rank 0's input requires grad and rank 1's does not, rank 0's
// backward waits forever for rank 1. So the differentiable collectives tag their forward call
// (ScopedCallTag, set around the one ProcessGroup call that the forward makes, on the same
// thread) and the tag is part of the descriptor: a disagreement is an Autograd error on every
// rank at forward time.
//
// Note [Collectives know their step]
// Matching by order alone also pairs collectives of different training steps. A rank that
// catches an error inside backward and goes on (its DDP run abandoned after, say, two of four
// buckets) starts its next step's buckets while the others are still in the step it left:
// its step 3 gradients are averaged with their step 2, silently, and the job fails much later
// with a mismatch that names nothing useful. So each group counts steps (ProcessGroup::step):
// DistributedDataParallel advances the count when a synchronising backward run begins (its
// first hook; ZeRO's stages share that reduction), and every descriptor carries the count
// and the phase of the step its call belongs to (ScopedStepPhase: DDP's gradient reduction,
// ZeroOptimizer's update, or anything else). Ranks in lockstep agree on both at every call;
// a rank out of step disagrees at the first collective that mixes steps, and every rank
// raises the same Error there, naming each rank's step. It costs two words more in the
// descriptor exchange that runs anyway, and a relaxed atomic load per call. Not covered: a
// rank whose backward fails before any DDP hook has run never learns that a step began, and
// with check_shapes = false nothing is exchanged.
namespace {
enum Word { kValid, kKind, kOp, kRoot, kDType, kNdim, kTag, kStep, kPhase, kDim0 };

std::string shape_of(const CallDescriptor& d) {
  const auto& w = d.words;
  if (w[kDType] < 0) return "an undefined tensor";
  std::ostringstream os;
  os << '[';
  const int64_t nd = std::min<int64_t>(w[kNdim], CallDescriptor::kMaxDims);
  for (int64_t i = 0; i < nd; ++i) os << (i ? ", " : "") << w[kDim0 + i];
  if (w[kNdim] > CallDescriptor::kMaxDims) os << " (" << w[kNdim] << " dims, the rest folded)";
  os << "] (" << to_string(static_cast<DType>(w[kDType])) << ')';
  return os.str();
}

// "step 2 (DDP's gradient reduction)".
std::string step_of(const CallDescriptor& d) {
  std::string phase;
  switch (static_cast<StepPhase>(d.words[kPhase])) {
    case StepPhase::GradientReduction:
      phase = "DDP's gradient reduction";
      break;
    case StepPhase::ShardedUpdate:
      phase = "ZeRO's update";
      break;
    default:
      phase = "outside DDP and ZeRO";
  }
  return "step " + std::to_string(d.words[kStep]) + " (" + phase + ")";
}

// "rank 0 X, rank 1 Y" for the first few ranks (a long job lists eight and a count).
template <class F>
std::string per_rank(const std::vector<CallDescriptor>& all, F&& what) {
  std::ostringstream os;
  const std::size_t shown = std::min<std::size_t>(all.size(), 8);
  for (std::size_t r = 0; r < shown; ++r)
    os << (r ? ", " : "") << "rank " << r << ' ' << what(all[r]);
  if (shown < all.size()) os << ", ... (" << all.size() << " ranks)";
  return os.str();
}
}  // namespace

std::string op_name(CollectiveKind kind) { return "dist." + to_string(kind); }

CallDescriptor describe_call(CollectiveKind kind, ReduceOp op, int root, const Tensor& t,
                             bool valid, int64_t step) {
  CallDescriptor d;
  auto& w = d.words;
  w[kValid] = valid ? 1 : 0;
  w[kKind] = static_cast<int64_t>(kind);
  // Fields a collective ignores stay zero, so that they cannot disagree.
  w[kOp] = kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter
               ? static_cast<int64_t>(op)
               : 0;
  w[kRoot] = kind == CollectiveKind::Broadcast ? root : 0;
  w[kDType] = -1;
  w[kTag] = current_call_tag();
  w[kStep] = step;
  w[kPhase] = static_cast<int64_t>(current_step_phase());
  if (kind != CollectiveKind::Barrier && t.defined()) {
    w[kDType] = static_cast<int64_t>(t.dtype());
    w[kNdim] = t.dim();
    for (int64_t i = 0; i < t.dim(); ++i) {
      const int64_t slot = std::min<int64_t>(i, CallDescriptor::kMaxDims - 1);
      w[kDim0 + slot] = i <= slot ? t.size(i) : w[kDim0 + slot] * t.size(i);
    }
  }
  return d;
}

void check_agreement(const CommRequest& request, const std::vector<CallDescriptor>& all, int rank) {
  const std::string name = op_name(request.kind);
  if (request.local_error) throw Error(*request.local_error);
  auto differs = [&](int word) {
    for (const CallDescriptor& d : all)
      if (d.words[word] != all[0].words[word]) return true;
    return false;
  };
  // First: out of step, every other difference is a symptom. See Note [Collectives know their
  // step].
  ADJOINT_CHECK(!differs(kStep) && !differs(kPhase), Value, name,
                "ranks are out of step: ", per_rank(all, step_of),
                ". Each group counts the steps begun on it (ProcessGroup::step; "
                "DistributedDataParallel begins one per synchronising backward run). A rank that "
                "caught an error inside a step and went on is out of step with the others, and "
                "its collectives would pair with another step's: end the job instead "
                "(ProcessGroup::abort), or have every rank skip the same steps");
  for (std::size_t r = 0; r < all.size(); ++r)
    ADJOINT_CHECK(all[r].words[kValid] == 1, Value, name, "rank ", r, " refused its ",
                  to_string(static_cast<CollectiveKind>(all[r].words[kKind])),
                  " call (its error is reported there); this rank (", rank, ") passed ",
                  shape_of(all[rank]));
  ADJOINT_CHECK(!differs(kKind), Value, name,
                "ranks called different collectives at the same point: ",
                per_rank(all, [](const CallDescriptor& d) {
                  return to_string(static_cast<CollectiveKind>(d.words[kKind]));
                }));
  ADJOINT_CHECK(!differs(kTag), Autograd, name,
                "ranks disagree on recording the call for backward: ",
                per_rank(all,
                         [](const CallDescriptor& d) {
                           switch (d.words[kTag]) {
                             case kPlainCall:
                               return "called the process group directly";
                             case kNotRecorded:
                               return "did not record it (no input needs grad)";
                             default:
                               return "recorded it";
                           }
                         }),
                "; backward would wait forever on the ranks that recorded it. Every rank's input "
                "must agree on requires_grad (and grad mode)");
  ADJOINT_CHECK(!differs(kOp), Value, name,
                "ranks passed different reduce ops: ", per_rank(all, [](const CallDescriptor& d) {
                  return to_string(static_cast<ReduceOp>(d.words[kOp]));
                }));
  ADJOINT_CHECK(!differs(kRoot), Value, name,
                "ranks passed different roots: ", per_rank(all, [](const CallDescriptor& d) {
                  return std::to_string(d.words[kRoot]);
                }));
  ADJOINT_CHECK(!differs(kDType), DType, name,
                "ranks passed different dtypes: ", per_rank(all, shape_of));
  bool shape_differs = differs(kNdim);
  for (int i = 0; i < CallDescriptor::kMaxDims; ++i) shape_differs |= differs(kDim0 + i);
  ADJOINT_CHECK(!shape_differs, Shape, name,
                "ranks passed different shapes: ", per_rank(all, shape_of));
}

}  // namespace detail
}  // namespace adjoint::dist
