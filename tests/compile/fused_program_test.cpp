// compile's fused programs as kernels of the table (Note [Fused programs are kernels] in
// src/backend/fused_program.h): a hand-made program run by the CPU's executor equals the ops it
// stands for bit for bit, with or without the kernels prepared once; meta gives the outputs'
// shapes and dtypes; and the inputs are checked the same on both (count, dtypes, broadcasting,
// devices). The oracle is eager code, op by op.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/device_kernels.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
using kernels::Binary;
using kernels::FusedProgram;
using kernels::PointwiseKernel;
using kernels::Unary;

namespace {

void expect_bitwise(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << what << " at " << i;
}

// y = exp(x) * 0.5 + b (b a row broadcast over x's rows), written out, and summed over each row:
// outputs y [rows, cols] and its row sums [rows].
FusedProgram exp_affine_row_sums(DType dtype, int64_t rows, int64_t cols) {
  FusedProgram p;
  p.dtype = dtype;
  p.shape = Shape{rows, cols};
  p.num_registers = 4;
  p.input_register = {0, 1};
  p.input_dtype = {dtype, dtype};
  p.code = {{PointwiseKernel::of(Unary::Exp), 2, 0, -1},
            {PointwiseKernel::of(Unary::MulScalar, 0.5), 2, 2, -1},
            {PointwiseKernel::of(Binary::Add), 3, 2, 1}};
  p.output_register = {3};
  p.output_dtype = {dtype};
  p.reduced_register = 3;
  p.reduce_kind = kernels::Reduce::Sum;
  p.reduced_shape = Shape{rows};
  p.reduce_inner = cols;
  return p;
}

TEST(FusedProgram, TheCpuExecutorEqualsTheOpsItStandsFor) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const FusedProgram p = exp_affine_row_sums(dtype, 5, 700);  // rows longer than one block
    const Tensor x = randn({5, 700}, TensorOptions(dtype)), b = randn({700}, TensorOptions(dtype));
    const Tensor y = exp(x) * 0.5 + b;
    const std::vector<Tensor> inputs = {x, b};
    const std::shared_ptr<const kernels::PreparedFusedProgram> prepared =
        kernels::prepare_fused_program(kCPU, p);
    ASSERT_NE(prepared, nullptr);
    for (const kernels::PreparedFusedProgram* kept :
         std::vector<const kernels::PreparedFusedProgram*>{prepared.get(), nullptr}) {
      const std::vector<Tensor> outs = kernels::run_fused_program(p, kept, inputs);
      ASSERT_EQ(outs.size(), 2u);
      expect_bitwise(outs[0], y, "the written output");
      expect_bitwise(outs[1], y.sum({1}), "the row sums");
    }
  }
}

TEST(FusedProgram, ReadsStridedAndBroadcastInputs) {
  // x transposed (strided) and b a column ([rows, 1], each element repeated along its row).
  FusedProgram p = exp_affine_row_sums(DType::Float64, 6, 40);
  const Tensor x = randn({40, 6}, TensorOptions(DType::Float64)).transpose(0, 1);
  const Tensor b = randn({6, 1}, TensorOptions(DType::Float64));
  ASSERT_FALSE(x.is_contiguous());
  const std::vector<Tensor> outs = kernels::run_fused_program(p, nullptr, std::vector{x, b});
  // The executor gathers x's elements into a register and runs the vectorised exp on it, as
  // eager code does on a contiguous copy (eager's strided loop may differ in the last ulp).
  const Tensor y = exp(x.contiguous()) * 0.5 + b;
  expect_bitwise(outs[0], y, "strided x, column b");
  expect_bitwise(outs[1], y.sum({1}), "its row sums");
}

TEST(FusedProgram, MetaGivesTheCpuOutputsShapesAndDtypes) {
  const FusedProgram p = exp_affine_row_sums(DType::Float32, 3, 9);
  EXPECT_EQ(kernels::prepare_fused_program(kMeta, p), nullptr);
  const std::vector<Tensor> cpu_in = {randn({3, 9}), randn({9})};
  const std::vector<Tensor> meta_in = {empty({3, 9}, TensorOptions().device(kMeta)),
                                       empty({9}, TensorOptions().device(kMeta))};
  const std::vector<Tensor> want = kernels::run_fused_program(p, nullptr, cpu_in);
  // The CPU's prepared kernels handed to meta are ignored there.
  const std::shared_ptr<const kernels::PreparedFusedProgram> cpu_prepared =
      kernels::prepare_fused_program(kCPU, p);
  const std::vector<Tensor> got = kernels::run_fused_program(p, cpu_prepared.get(), meta_in);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].device(), kMeta);
    EXPECT_EQ(got[k].shape(), want[k].shape());
    EXPECT_EQ(got[k].dtype(), want[k].dtype());
    EXPECT_EQ(got[k].strides(), want[k].strides());
  }
}

TEST(FusedProgram, RefusesInputsThatAreNotTheProgramsOnEveryDevice) {
  const FusedProgram p = exp_affine_row_sums(DType::Float32, 3, 9);
  for (Device device : {kCPU, kMeta}) {
    const TensorOptions f32 = TensorOptions().device(device);
    const Tensor x = empty({3, 9}, f32);
    expect_error([&] { kernels::run_fused_program(p, nullptr, std::vector{x}); }, ErrorKind::Value,
                 {"fused pointwise", "expected 2 inputs, got 1"});
    expect_error(
        [&] {
          kernels::run_fused_program(p, nullptr,
                                     std::vector{x, empty({9}, f32.dtype(DType::Float64))});
        },
        ErrorKind::DType, {"fused pointwise", "input 1", "float64"});
    expect_error(
        [&] {
          kernels::run_fused_program(p, nullptr, std::vector{x, empty({4}, f32)});
        },
        ErrorKind::Shape, {"fused pointwise", "[4]", "does not broadcast"});
  }
  // One input on meta, one on the CPU (not a 0-d scalar): a Device error naming both.
  expect_error(
      [&] {
        kernels::run_fused_program(
            p, nullptr, std::vector{randn({3, 9}), empty({9}, TensorOptions().device(kMeta))});
      },
      ErrorKind::Device, {"cpu", "meta"});
}

TEST(FusedProgram, ACompiledFunctionsFusedGroupRunsOnMeta) {
  // The graph is traced on the CPU (its fused node prepares the CPU's kernels); the same compiled
  // function called with meta tensors traces again for the new device and runs meta's executor.
  auto f = [](const Tensor& x) { return (exp(x) * 0.5 + 1.0).sum(); };
  CompiledFunction g = compile(f);
  const Tensor x = randn({64, 33});
  expect_bitwise(g(x), f(x), "CPU");
  const Tensor on_meta = g(empty({64, 33}, TensorOptions().device(kMeta)));
  EXPECT_EQ(on_meta.device(), kMeta);
  EXPECT_EQ(on_meta.shape(), Shape{});
  EXPECT_EQ(on_meta.dtype(), DType::Float32);
}

}  // namespace
