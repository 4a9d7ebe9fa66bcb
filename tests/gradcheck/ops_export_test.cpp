// The registry-driven export check: for every sample in adjoint::testing::op_registry(), the
// compiled function is written with export_function and read back with import_function, and
// the imported function equals the eager one bit for bit (fusion off, so no pass reassociates
// arithmetic) in its values and its gradients through the imported backward, on the traced
// values and on others; with fusion on, within a few ulps. A sample whose graph holds an op
// that cannot be written (a comparison, a random draw) must be refused with an error naming
// it; those are listed at the end, with the registry's op keys, which must be unique.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "core/op_fields.h"
#include "support/registry.h"

namespace {

using namespace adjoint;
using adjoint::testing::OpSample;

std::vector<Tensor> leaves(const OpSample& s, double scale) {
  std::vector<Tensor> xs;
  for (const Tensor& x : s.inputs) {
    if (!x.defined()) {
      xs.push_back(x);
      continue;
    }
    Tensor d = is_floating(x.dtype()) ? (x.detach() * scale).detach() : x.detach().clone();
    if (x.requires_grad()) d.requires_grad_(true);
    xs.push_back(d);
  }
  return xs;
}

std::vector<Tensor> needing_grad(const std::vector<Tensor>& xs) {
  std::vector<Tensor> r;
  for (const Tensor& x : xs)
    if (x.defined() && x.requires_grad()) r.push_back(x);
  return r;
}

void expect_same(const Tensor& got, const Tensor& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (tolerance == 0) {
      ASSERT_EQ(a[i], b[i]) << what << " at element " << i;
    } else {
      ASSERT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(b[i])))
          << what << " at element " << i;
    }
  }
}

Tensor cotangent(const Tensor& y) {
  return sin(arange(y.numel(), TensorOptions(y.dtype())) * 0.37 + 0.2).reshape(y.shape());
}

std::mutex refused_mutex;
std::atomic<int> imported_count{0};
std::set<std::string>& refused() {
  static std::set<std::string> r;
  return r;
}

std::string temp_path() {
  static std::atomic<int> counter{0};
  return ::testing::TempDir() + "adjoint_export_" + std::to_string(::getpid()) + "_" +
         std::to_string(counter++) + ".adjoint";
}

void check_sample(const OpSample& s, bool fuse) {
  CompileOptions options;
  options.warn = false;
  options.fuse_pointwise = fuse;
  const double tolerance = fuse ? 1e-12 : 0;
  auto list_fn = [&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{s.fn(xs)}; };
  CompiledFunction compiled = compile(list_fn, options);
  compiled(leaves(s, 1.0));
  if (compiled.stats().graph_breaks > 0) return;  // nothing traced to write (ops_compile_test)
  const std::string path = temp_path();
  try {
    export_function(compiled, path);
  } catch (const Error& e) {
    // Refused: the message names the op that cannot be written.
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot be written"), std::string::npos) << s.name << ": " << what;
    std::lock_guard<std::mutex> lock(refused_mutex);
    refused().insert(s.name + ": " + what.substr(0, what.find(',')));
    return;
  }
  const ImportedFunction imported = import_function(path, options);
  std::remove(path.c_str());
  ++imported_count;
  for (double scale : {1.0, 1.01}) {
    const std::string what = s.name + (fuse ? " fused" : "") + " scale " + std::to_string(scale);
    std::vector<Tensor> xe = leaves(s, scale), xi = leaves(s, scale);
    Tensor ye = s.fn(xe);
    Tensor yi = imported(xi)[0];
    expect_same(yi, ye, tolerance, what + ": value");
    if (!is_floating(ye.dtype()) || !ye.requires_grad()) continue;
    const std::vector<Tensor> re = needing_grad(xe), ri = needing_grad(xi);
    const std::vector<Tensor> ge = autograd::grad({ye}, re, {cotangent(ye)}, true, false, true);
    const std::vector<Tensor> gi = autograd::grad({yi}, ri, {cotangent(yi)}, true, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i)
      expect_same(gi[i], ge[i], tolerance, what + ": gradient " + std::to_string(i));
  }
}

class OpExport : public ::testing::TestWithParam<OpSample> {};

TEST_P(OpExport, ImportedEqualsEager) {
  check_sample(GetParam(), false);
  check_sample(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Registry, OpExport, ::testing::ValuesIn(adjoint::testing::op_registry()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           std::string n = info.param.name;
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n + "_" + std::to_string(info.index);
                         });

TEST(OpExportRegistry, EveryOpKeyIsUnique) {
  EXPECT_EQ(detail::exported_op_key_conflicts(), std::vector<std::string>{});
  EXPECT_GT(detail::exported_op_keys().size(), 60u);
}

// After every sample ran: how many were written and read back, and which were refused.
class ListRefusals : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(refused_mutex);
    std::printf("samples exported and imported: %d, refused: %zu\n", imported_count.load(),
                refused().size());
    for (const std::string& r : refused()) std::printf("  %s\n", r.c_str());
  }
};
const auto* const list_refusals = ::testing::AddGlobalTestEnvironment(new ListRefusals);

}  // namespace
