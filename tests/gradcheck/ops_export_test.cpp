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
#include "support/sample_run.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_same_values;
using adjoint::testing::fixed_cotangent;
using adjoint::testing::needing_grad;
using adjoint::testing::OpSample;
using adjoint::testing::sample_leaves;

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
  compiled(sample_leaves(s, 1.0));
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
    std::vector<Tensor> xe = sample_leaves(s, scale), xi = sample_leaves(s, scale);
    Tensor ye = s.fn(xe);
    Tensor yi = imported(xi)[0];
    expect_same_values(yi, ye, tolerance, what + ": value");
    if (!is_floating(ye.dtype()) || !ye.requires_grad()) continue;
    const std::vector<Tensor> re = needing_grad(xe), ri = needing_grad(xi);
    const std::vector<Tensor> ge =
        autograd::grad({ye}, re, {fixed_cotangent(ye)}, true, false, true);
    const std::vector<Tensor> gi =
        autograd::grad({yi}, ri, {fixed_cotangent(yi)}, true, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i)
      expect_same_values(gi[i], ge[i], tolerance, what + ": gradient " + std::to_string(i));
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
