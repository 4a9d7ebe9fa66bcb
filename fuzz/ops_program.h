// The byte format of an op program (fuzz_ops), shared by the interpreter (ops_fuzz.cpp) and
// the seed writer (seeds.cpp):
//   byte 0      mode: which of backward, double backward, checkpoint, duals, ... (kMode*)
//   byte 1      outputs: 1 + (b & 3) % 3 last values are the program's outputs; bit 2 picks
//               autograd::grad instead of Tensor::backward; bit 3 also runs the program
//               through compile() and compares (kOutputsCompile); b >> 4: 14 runs the program
//               under NoGradGuard, 15 under InferenceMode (kRunNoGrad, kRunInference)
//   byte 2      inputs: 1 + (b % 4) input tensors, each described by kInputBytes bytes:
//                 [0] dtype (b & 3: bool, int64, float32, float64), requires_grad (bit 2),
//                     value style (bits 3-4), ndim ((b >> 5) % 5)
//                 [1], [2] sizes, a nibble per dim (nibble % 5; 15: a huge size)
//                 [3] seed of the values
//   then        up to kMaxOps instructions of kInstrBytes bytes: an opcode (b % kNumOps)
//               and kInstrBytes - 1 argument bytes whose meaning the op gives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adjoint::fuzz {

inline constexpr std::size_t kHeaderBytes = 3;
inline constexpr std::size_t kInputBytes = 4;
inline constexpr std::size_t kInstrBytes = 6;
inline constexpr std::size_t kMaxOps = 24;

enum Mode : uint8_t {
  kModeBackward = 1 << 0,        ///< reverse mode on the outputs
  kModeDoubleBackward = 1 << 1,  ///< create_graph, then backward through the gradients
  kModeCheckpoint = 1 << 2,      ///< the program runs inside checkpoint()
  kModeDual = 1 << 3,            ///< float inputs get tangents (make_dual) in a DualLevel
  kModeCompare = 1 << 4,         ///< also run without checkpoint: the gradients must be identical
  kModeRetain = 1 << 5,          ///< retain_graph, and a second backward
  kModeHooks = 1 << 6,           ///< every input gets a gradient hook that checks what it sees
  kModeJvpTransform = 1 << 7,    ///< also the program's jvp through transforms' jvp()
};

inline constexpr uint8_t kOutputsAutogradGrad = 1 << 2;
inline constexpr uint8_t kOutputsCompile = 1 << 3;
inline constexpr uint8_t kRunNoGrad = 14;
inline constexpr uint8_t kRunInference = 15;

enum Op : uint8_t {
  // unary elementwise: a0 = operand
  kNeg,
  kExp,
  kLog,
  kLog1p,
  kExpm1,
  kSqrt,
  kRsqrt,
  kAbs,
  kSign,
  kSin,
  kCos,
  kTan,
  kTanh,
  kErf,
  kSigmoid,
  kRelu,
  kSilu,
  kSquare,
  kLogicalNot,
  kLeakyRelu,      // a1 scalar slope
  kGelu,           // a1 & 1: tanh approximation
  kSoftplus,       // a1 beta, a2 threshold (scalars)
  kClamp,          // a1 min (bit 7 of a3: none), a2 max (bit 6 of a3: none)
  kPowScalar,      // a1 scalar exponent
  kPowScalarBase,  // a1 scalar base
  kTo,             // a1 dtype
  kContiguous,
  kClone,
  kDetach,
  // binary: a0, a1 = operands; a2 scalar or alpha
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMinimum,
  kMaximum,
  kPow,
  kCompare,        // a2 % 6: eq ne lt le gt ge
  kLogical,        // a2 & 1: and / or
  kWhere,          // a2 operand: the condition (made bool if it is not)
  kBinaryFresh,    // a1 % 6: add sub mul div min max with a fresh broadcastable operand
  kScalarArith,    // a1 % 8: + - * / (tensor op scalar, scalar op tensor); a2 scalar
  kCompareScalar,  // a1 % 6, a2 scalar
  // reductions: a1 dims, a2 flags
  kSum,
  kMean,
  kVar,
  kStd,
  kProd,
  kMaxAll,
  kMinAll,
  kMaxDim,
  kMinDim,
  kAmax,
  kAmin,
  kLogsumexp,
  kNorm,
  kArgmax,
  kArgmin,
  // linear algebra
  kMatmul,       // a0, a1 operands
  kMatmulFresh,  // a0 operand, a1 columns, a2 seed
  kLinear,       // a0 operand, a1 out features, a2 bias flag
  kDot,
  kOuter,
  // shapes and views
  kReshape,  // a1, a2: shape
  kView,
  kPermute,  // a1 permutation code
  kTranspose,
  kT,
  kSlice,  // a1 dim, a2 start, a3 end, a4 step
  kSelect,
  kNarrow,
  kExpand,  // a1, a2: shape
  kSqueeze,
  kUnsqueeze,
  kFlatten,
  kCat,
  kStack,
  kSplit,
  kChunk,
  kSumTo,
  // indexing
  kIndexSelect,
  kGather,
  kScatterAdd,
  kIndexAdd,
  kMaskedFill,
  kEmbedding,
  kOneHot,
  kTril,
  kTriu,
  // nn
  kSoftmax,
  kLogSoftmax,
  kMaskedSoftmax,
  kCrossEntropy,
  kNllLoss,
  kMseLoss,
  kBceWithLogits,
  kLayerNorm,
  kDropout,
  // in place: a0 target; a1 view kind (itself, slice, select, transpose, of a clone or not)
  kInplaceScalar,  // a2 % 6: add_ sub_ mul_ div_ fill_ zero_ ; a3 scalar
  kInplaceTensor,  // a2 % 5: add_ sub_ mul_ div_ copy_ ; a3 operand; a4 alpha
  kInplaceClamp,   // a2 min, a3 max, a4 flags
  // factories and the rest
  kFactory,       // a1 kind, a2 size, a3 dtype
  kRequiresGrad,  // a0 tensor: requires_grad_(a1 & 1)
  kRetainGrad,
  kHook,         // a1 & 1: the hook doubles the gradient, else it returns it unchanged
  kMidBackward,  // a0 tensor: backward of its sum, a1 & 1 retain_graph
  kItem,
  kPrint,
  kGradMode,  // flips grad mode (restored at the end of the program)
  kNumOps
};

/// The ops' names, for traces (ADJOINT_FUZZ_TRACE=1).
inline constexpr const char* kOpNames[] = {
    "Neg",
    "Exp",
    "Log",
    "Log1p",
    "Expm1",
    "Sqrt",
    "Rsqrt",
    "Abs",
    "Sign",
    "Sin",
    "Cos",
    "Tan",
    "Tanh",
    "Erf",
    "Sigmoid",
    "Relu",
    "Silu",
    "Square",
    "LogicalNot",
    "LeakyRelu",
    "Gelu",
    "Softplus",
    "Clamp",
    "PowScalar",
    "PowScalarBase",
    "To",
    "Contiguous",
    "Clone",
    "Detach",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Minimum",
    "Maximum",
    "Pow",
    "Compare",
    "Logical",
    "Where",
    "BinaryFresh",
    "ScalarArith",
    "CompareScalar",
    "Sum",
    "Mean",
    "Var",
    "Std",
    "Prod",
    "MaxAll",
    "MinAll",
    "MaxDim",
    "MinDim",
    "Amax",
    "Amin",
    "Logsumexp",
    "Norm",
    "Argmax",
    "Argmin",
    "Matmul",
    "MatmulFresh",
    "Linear",
    "Dot",
    "Outer",
    "Reshape",
    "View",
    "Permute",
    "Transpose",
    "T",
    "Slice",
    "Select",
    "Narrow",
    "Expand",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Cat",
    "Stack",
    "Split",
    "Chunk",
    "SumTo",
    "IndexSelect",
    "Gather",
    "ScatterAdd",
    "IndexAdd",
    "MaskedFill",
    "Embedding",
    "OneHot",
    "Tril",
    "Triu",
    "Softmax",
    "LogSoftmax",
    "MaskedSoftmax",
    "CrossEntropy",
    "NllLoss",
    "MseLoss",
    "BceWithLogits",
    "LayerNorm",
    "Dropout",
    "InplaceScalar",
    "InplaceTensor",
    "InplaceClamp",
    "Factory",
    "RequiresGrad",
    "RetainGrad",
    "Hook",
    "MidBackward",
    "Item",
    "Print",
    "GradMode",
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps);

}  // namespace adjoint::fuzz
