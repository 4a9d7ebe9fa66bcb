// Devices: names, factories on meta and under a DeviceGuard, meta tensors without data (reads
// are errors), calls mixing devices, the meta memory statistics, moving tensors and modules,
// and autograd on meta. Shapes on meta are checked against the same computation on CPU.
#include <gtest/gtest.h>

#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/allocator.h"
#include "adjoint/nn/gpt.h"
#include "adjoint/nn/linear.h"

namespace adjoint {
namespace {

// Runs f and returns the Error it throws (failing the test when it throws none).
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::Internal, "none", "none");
}

TEST(Device, NamesParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_EQ(Device::parse("meta"), kMeta);
  EXPECT_EQ(Device::parse("cuda:1"), Device(DeviceType::CUDA, 1));
  EXPECT_EQ(Device::parse("cuda").str(), "cuda:0");
  EXPECT_EQ(kMeta.str(), "meta");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "metal"})
    EXPECT_EQ(error_of([&] { Device::parse(bad); }).kind(), ErrorKind::Value) << bad;
}

TEST(Device, FactoriesTakeADeviceOrTheGuardsDefault) {
  EXPECT_TRUE(zeros({2, 3}).device().is_cpu());
  const Tensor m = zeros({2, 3}, kMeta);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.shape(), Shape({2, 3}));
  EXPECT_EQ(m.strides(), Shape({3, 1}));
  EXPECT_EQ(m.dtype(), kDefaultFloat);
  EXPECT_TRUE(randn({4}, TensorOptions(DType::Float64).device(kMeta)).is_meta());
  {
    DeviceGuard guard(kMeta);
    EXPECT_EQ(default_device(), kMeta);
    EXPECT_TRUE(ones({2}).is_meta());
    EXPECT_TRUE(arange(5).is_meta());
    EXPECT_TRUE(eye(3).is_meta());
    EXPECT_TRUE(tensor({1.0, 2.0}).is_meta());
    {
      DeviceGuard inner(kCPU);
      EXPECT_TRUE(ones({2}).device().is_cpu());
    }
    EXPECT_TRUE(ones({2}).is_meta());
    EXPECT_TRUE(zeros({2}, kCPU).device().is_cpu());  // an explicit device wins
  }
  EXPECT_TRUE(ones({2}).device().is_cpu());
  EXPECT_TRUE(zeros_like(m).is_meta());
}

TEST(Device, MetaTensorsHaveNoValues) {
  const Tensor m = ones({2, 2}, kMeta);
  for (auto read : {+[](const Tensor& t) { (void)t.item<float>(); },
                    +[](const Tensor& t) { (void)t.to_vector<float>(); },
                    +[](const Tensor& t) { (void)t.data_ptr<float>(); }}) {
    const Error e = error_of([&] { read(m.sum().reshape({1})); });
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_NE(std::string(e.what()).find("meta device has no data"), std::string::npos) << e.what();
  }
  EXPECT_NE(describe(m).find("meta"), std::string::npos);
}

TEST(Device, CallsMixingDevicesNameBoth) {
  const Tensor c = ones({3}), m = ones({3}, kMeta);
  const Error e = error_of([&] { (void)(c + m); });
  EXPECT_EQ(e.kind(), ErrorKind::Device);
  EXPECT_EQ(e.op(), "add");
  const std::string what = e.what();
  EXPECT_NE(what.find("cpu"), std::string::npos) << what;
  EXPECT_NE(what.find("meta"), std::string::npos) << what;
  // A 0-d CPU tensor is a scalar, and goes with any device, as in PyTorch.
  const Tensor y = m * scalar_tensor(2.0);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), Shape({3}));
}

TEST(Device, DevicesThisBuildLacksAreNamedErrors) {
  const Error e = error_of([] { (void)zeros({2}, Device::parse("cuda:0")); });
  EXPECT_EQ(e.kind(), ErrorKind::Device);
  EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
}

TEST(Device, MetaBytesAreCountedInTheAllocatorsSizeClasses) {
  const MemoryStats before = memory_stats(kMeta);
  const MemoryStats cpu_before = memory_stats(kCPU);
  {
    const Tensor m = empty({1000, 1000}, kMeta);
    const MemoryStats during = memory_stats(kMeta);
    EXPECT_EQ(during.current_bytes - before.current_bytes,
              detail::block_bytes(1000 * 1000 * sizeof(float)));
    EXPECT_GE(during.peak_bytes, during.current_bytes);
  }
  EXPECT_EQ(memory_stats(kMeta).current_bytes, before.current_bytes);
  EXPECT_EQ(memory_stats(kCPU).current_bytes, cpu_before.current_bytes);  // none taken here
}

TEST(Device, ToMovesAndToEmptyMaterialises) {
  const Tensor c = randn({3, 4}).t();
  const Tensor m = c.to(kMeta);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.shape(), c.shape());
  EXPECT_TRUE(c.to(kCPU).is_same(c));
  EXPECT_EQ(error_of([&] { (void)m.to(kCPU); }).kind(), ErrorKind::Device);
  const Tensor e = m.to_empty(kCPU);
  EXPECT_TRUE(e.device().is_cpu());
  EXPECT_EQ(e.shape(), c.shape());
  // Moving would cut a graph: refused by name, not silently detached.
  const Tensor leaf = randn({2}).requires_grad_();
  EXPECT_EQ(error_of([&] { (void)leaf.to(kMeta); }).kind(), ErrorKind::Autograd);
  EXPECT_TRUE(leaf.detach().to(kMeta).is_meta());
}

TEST(Device, AutogradRecordsAndRunsBackwardOnMeta) {
  const Tensor x = randn({4, 3}, kMeta).requires_grad_();
  const Tensor w = randn({3, 5}, kMeta).requires_grad_();
  const Tensor loss = (matmul(x, w).tanh() * 2).logsumexp({1}).mean();
  EXPECT_TRUE(loss.is_meta());
  EXPECT_TRUE(loss.grad_fn() != nullptr);
  loss.backward();
  EXPECT_TRUE(x.grad().is_meta());
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(w.grad().shape(), w.shape());
}

TEST(Device, AModuleBuiltOnMetaRunsAndMaterialises) {
  nn::GPTConfig cfg{64, 16, 32, 4, 2};
  std::unique_ptr<nn::GPT> meta_model;
  {
    DeviceGuard guard(kMeta);
    meta_model = std::make_unique<nn::GPT>(cfg);
  }
  for (const Tensor& p : meta_model->parameters()) EXPECT_TRUE(p.is_meta());
  const Tensor idx = zeros({2, 16}, TensorOptions(DType::Int64).device(kMeta));
  const Tensor logits = meta_model->forward(idx);
  EXPECT_TRUE(logits.is_meta());
  EXPECT_EQ(logits.shape(), Shape({2, 16, 64}));
  logits.sum().backward();
  for (const Tensor& p : meta_model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().shape(), p.shape());
  }

  // The same model on CPU has the same state (parameters and buffers, names and shapes); the
  // meta one, materialised, takes the CPU one's values (as load_state_dict would) and then
  // computes the same logits.
  nn::GPT cpu_model(cfg);
  meta_model->to_empty(kCPU);
  const auto meta_state = meta_model->state_dict();
  const auto cpu_state = cpu_model.state_dict();
  ASSERT_EQ(meta_state.size(), cpu_state.size());
  for (std::size_t i = 0; i < cpu_state.size(); ++i) {
    EXPECT_EQ(meta_state[i].first, cpu_state[i].first);
    EXPECT_TRUE(meta_state[i].second.device().is_cpu());
    EXPECT_EQ(meta_state[i].second.shape(), cpu_state[i].second.shape());
    NoGradGuard no_grad;
    Tensor(meta_state[i].second).copy_(cpu_state[i].second);
  }
  const Tensor tokens = randint(0, 64, {2, 16});
  const std::vector<float> a = meta_model->forward(tokens).to_vector<float>();
  const std::vector<float> b = cpu_model.forward(tokens).to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(Device, ModuleToMeta) {
  nn::Linear lin(3, 2);
  lin.to(kMeta);
  EXPECT_TRUE(lin.weight.is_meta());
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_EQ(lin.forward(ones({5, 3}, kMeta)).shape(), Shape({5, 2}));
}

}  // namespace
}  // namespace adjoint
