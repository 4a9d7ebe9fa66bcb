// A fused loop's program as text, for the graph dump (docs/compile.md, "Reading a dump").
#include <sstream>

#include "compile/fused_loop.h"

namespace adjoint::detail {
namespace {

using kernels::Binary;
using kernels::Unary;

// Unary kinds with parameters, and how many.
int parameters(Unary k) {
  switch (k) {
    case Unary::Softplus:
      return 2;
    case Unary::LeakyRelu:
    case Unary::ClampMin:
    case Unary::ClampMax:
    case Unary::AddScalar:
    case Unary::MulScalar:
    case Unary::RSubScalar:
    case Unary::RDivScalar:
    case Unary::PowScalar:
    case Unary::RPowScalar:
      return 1;
    default:
      return 0;
  }
}

std::string reg(int r) { return "r" + std::to_string(r); }

}  // namespace

std::string program_text(const Program& p, const std::string& indent) {
  std::ostringstream os;
  os << indent << "loop over " << p.dtype << p.shape << ", " << p.num_registers << " registers:";
  for (std::size_t k = 0; k < p.input_register.size(); ++k) {
    os << (k ? "," : "") << " " << reg(p.input_register[k]) << " <- input " << k;
    if (p.input_dtype[k] != p.dtype) os << " (" << p.input_dtype[k] << ")";
  }
  os << "\n";
  for (const Instr& in : p.code) {
    const PointwiseKernel& k = in.kernel;
    os << indent << "  " << reg(in.dst) << " = ";
    if (k.is_cast) {
      os << "to " << in.result << " " << reg(in.src0);
    } else if (k.is_where) {
      os << "where " << reg(in.src0) << ", " << reg(in.src1) << ", " << reg(in.src2);
    } else if (k.is_binary) {
      auto operand = [&](int which, int r) {
        if (in.prologue == kernels::ScalarStep::None || in.prologue_operand != which) return reg(r);
        std::ostringstream o;
        o << "(" << reg(r) << (in.prologue == kernels::ScalarStep::MulScalar ? " * " : " + ")
          << in.prologue_value << ")";
        return o.str();
      };
      os << kernels::kind_name(k.binary) << " " << operand(0, in.src0) << ", "
         << operand(1, in.src1);
    } else {
      os << kernels::kind_name(k.unary);
      const int n = parameters(k.unary);
      if (n > 0) os << "[" << k.a << (n > 1 ? ", " + std::to_string(k.b) : "") << "]";
      os << " " << reg(in.src0);
    }
    if (in.epilogue == kernels::ScalarStep::MulScalar)
      os << ", then mul_scalar[" << in.epilogue_value << "]";
    if (in.epilogue == kernels::ScalarStep::AddScalar)
      os << ", then add_scalar[" << in.epilogue_value << "]";
    if (!k.is_cast && in.result != p.dtype) os << " (rounded to " << in.result << ")";
    os << "\n";
  }
  for (std::size_t k = 0; k < p.output_register.size(); ++k)
    os << indent << "  " << reg(p.output_register[k]) << " -> output " << k << " "
       << p.output_dtype[k] << p.shape << "\n";
  if (p.reduced_register >= 0) {
    const char* kind = p.reduce_kind == kernels::Reduce::Max   ? "max"
                       : p.reduce_kind == kernels::Reduce::Min ? "min"
                                                               : "sum";
    os << indent << "  " << kind << " " << reg(p.reduced_register);
    if (p.reduce_inner > 0) os << " over rows of " << p.reduce_inner;
    if (p.reduce_columns > 0) os << " down columns of " << p.shape.numel() / p.reduce_columns;
    os << " -> output " << p.output_register.size() << " " << p.dtype << p.reduced_shape << "\n";
  }
  return os.str();
}

}  // namespace adjoint::detail
