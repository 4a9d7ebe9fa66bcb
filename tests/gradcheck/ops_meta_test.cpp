// Every sample of the op registry runs on the meta device as shape and dtype inference: the
// same result shapes, dtypes and strides as on CPU, or the same error (kind and op), forward
// and backward (docs/devices.md). The CPU run is the oracle. The samples listed in
// `known_gaps` do not run on meta yet, each for one of two reasons; each is checked to fail on
// meta for its reason, so the list cannot go stale, and it only shrinks:
// - it reads values into C++ above the kernels (a solver's stopping test, matrix_exp's choice
//   of scaling, lstsq's rank): data meta does not have, as PyTorch's meta refuses too;
// - a constant it makes from C++ values above the kernels (an identity, a mask, an index list)
//   is made on CPU and meets the meta input in one call: to be made on the input's device.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/storage.h"
#include "adjoint/tensor_impl.h"
#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::needing_grad;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

const char* const kReadsValues = "has no data";
const char* const kCpuConstant = "expected all tensors on one device";

// The samples that do not run on meta yet, and the error each stops with.
const std::map<std::string, const char*>& known_gaps() {
  static const std::map<std::string, const char*> gaps = [] {
    std::map<std::string, const char*> m;
    for (const char* name : {
             "linalg/lstsq/broadcast",
             "linalg/lstsq/overdetermined",
             "linalg/lstsq/underdetermined",
             "linalg/lstsq/vector",
             "linalg/matrix_exp/batch",
             "linalg/matrix_exp/matrix",
             "linalg/matrix_exp/noncontiguous",
             "linalg/matrix_exp/one",
             "linalg/matrix_exp/squared",
             "scientific/linear_solve/cg",
             "scientific/linear_solve/constant_operator",
             "scientific/linear_solve/gmres",
         })
      m[name] = kReadsValues;
    for (const char* name : {
             "scientific/fixed_point/tanh_layer",
             "scientific/root/cubic",
         })
      m[name] = kCpuConstant;
    return m;
  }();
  return gaps;
}

// x on meta with exactly its geometry (shape, strides, offset, storage size), so the op sees
// the layout the CPU run saw; and x's requires_grad.
Tensor meta_replica(const Tensor& x) {
  if (!x.defined()) return x;
  auto storage = std::make_shared<StorageImpl>(x.impl()->storage->nbytes(), kMeta);
  Tensor m(
      std::make_shared<TensorImpl>(storage, x.shape(), x.strides(), x.storage_offset(), x.dtype()));
  if (x.requires_grad()) m.requires_grad_(true);
  return m;
}

struct Outcome {
  std::vector<Tensor> tensors;  // the result, then the gradients of the inputs needing grad
  std::optional<ErrorKind> error;
  std::string op, message;
};

// Runs the sample and its backward; on meta under a DeviceGuard, so that the constants a
// sample's function makes (an identity, an index list) are made there too, as PyTorch's
// `with torch.device("meta")` does.
Outcome run(const OpSample& s, const std::vector<Tensor>& xs, Device device = kCPU) {
  DeviceGuard guard(device);
  Outcome o;
  try {
    const Tensor y = s.fn(xs);
    o.tensors.push_back(y);
    const std::vector<Tensor> r = needing_grad(xs);
    if (y.defined() && is_floating(y.dtype()) && y.requires_grad() && !r.empty()) {
      for (const Tensor& g : autograd::grad({y}, r, {ones_like(y)}, false, false, true))
        o.tensors.push_back(g);
    }
  } catch (const Error& e) {
    o.error = e.kind();
    o.op = e.op();
    o.message = e.what();
  }
  return o;
}

class OpsOnMeta : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpsOnMeta, InferShapesDtypesAndStridesAsCpu) {
  const OpSample& s = GetParam();
  const Outcome cpu = run(s, sample_leaves(s, 1.0));
  std::vector<Tensor> xs;
  for (const Tensor& x : sample_leaves(s, 1.0)) xs.push_back(meta_replica(x));
  const Outcome meta = run(s, xs, kMeta);
  if (cpu.error) {
    ASSERT_TRUE(meta.error) << s.name << ": CPU failed (" << cpu.message << ") but meta succeeded";
    EXPECT_EQ(*meta.error, *cpu.error) << s.name << ": " << meta.message;
    EXPECT_EQ(meta.op, cpu.op) << s.name << ": " << meta.message;
    return;
  }
  ASSERT_FALSE(meta.error) << s.name << ": " << meta.message;
  ASSERT_EQ(meta.tensors.size(), cpu.tensors.size()) << s.name;
  for (std::size_t i = 0; i < cpu.tensors.size(); ++i) {
    const Tensor &want = cpu.tensors[i], &got = meta.tensors[i];
    const std::string what = s.name + (i == 0 ? " result" : " gradient " + std::to_string(i));
    ASSERT_EQ(got.defined(), want.defined()) << what;
    if (!want.defined()) continue;
    EXPECT_TRUE(got.is_meta()) << what;
    EXPECT_EQ(got.shape(), want.shape()) << what;
    EXPECT_EQ(got.dtype(), want.dtype()) << what;
    EXPECT_EQ(got.strides(), want.strides()) << what;
  }
}

std::vector<OpSample> meta_samples() {
  std::vector<OpSample> out;
  for (const OpSample& s : adjoint::testing::op_registry())
    if (!known_gaps().count(s.name)) out.push_back(s);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpsOnMeta, ::testing::ValuesIn(meta_samples()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return adjoint::testing::sample_test_name(info.param.name);
                         });

// The list stays true: each listed sample runs on CPU and fails on meta for its reason.
TEST(OpsOnMetaList, TheListedSamplesFailForTheirReason) {
  std::size_t listed = 0;
  for (const OpSample& s : adjoint::testing::op_registry()) {
    const auto gap = known_gaps().find(s.name);
    if (gap == known_gaps().end()) continue;
    ++listed;
    ASSERT_FALSE(run(s, sample_leaves(s, 1.0)).error) << s.name;
    std::vector<Tensor> xs;
    for (const Tensor& x : sample_leaves(s, 1.0)) xs.push_back(meta_replica(x));
    const Outcome meta = run(s, xs, kMeta);
    if (!meta.error) {
      ADD_FAILURE() << s.name << " ran on meta: take it off the list";
      continue;
    }
    EXPECT_EQ(*meta.error, ErrorKind::Device) << s.name << ": " << meta.message;
    EXPECT_NE(meta.message.find("has no data"), std::string::npos)
        << s.name << ": " << meta.message;
  }
}

}  // namespace
