// Printing a model (std::cout << model: PyTorch's repr as a tree with parameter counts) and
// nn::summary (per module: output shape, parameters, forward FLOPs, bytes saved for backward).
// The expected text is built from the modules' own attributes, so the tests check the
// structure rather than a pasted blob; the numbers are checked against parameters(), the FLOP
// rule of Note [FLOP counting] and saved_memory_stats() of the same forward.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"

using namespace adjoint;

namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

std::string params(int64_t n) { return "  # " + std::to_string(n) + " parameters"; }

std::string linear_line(const nn::Linear& l) {
  return "Linear(in_features=" + std::to_string(l.in_features()) +
         ", out_features=" + std::to_string(l.out_features()) +
         ", bias=" + (l.bias.defined() ? "true" : "false") + ")" + params(l.num_parameters());
}

// A module of our own with its own parameters and a nested container.
struct Net : nn::Module {
  Tensor scale;
  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<nn::Linear> head;
  Net() : Module("Net") {
    scale = register_parameter("scale", ones({3}));
    body = register_module(
        "body", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                    std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                    std::make_shared<nn::Linear>(8, 3, false)}));
    head = register_module("head", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*body)(x)*scale); }
};

TEST(ModulePrint, LeafLayersInPyTorchsWords) {
  nn::Linear l(4, 8);
  std::ostringstream os;
  os << l;
  EXPECT_EQ(os.str(), linear_line(l));
  EXPECT_EQ(os.str(), "Linear(in_features=4, out_features=8, bias=true)  # 40 parameters");

  std::ostringstream relu;
  relu << nn::ReLU();
  EXPECT_EQ(relu.str(), "ReLU()");  // no parameters, no count

  nn::Embedding e(10, 4);
  EXPECT_EQ(e.extra_repr(), "num_embeddings=10, embedding_dim=4");
  nn::LayerNorm ln(6);
  EXPECT_EQ(ln.extra_repr().rfind("normalized_shape=[6], eps=", 0), 0u);
  nn::Dropout d(0.25);
  EXPECT_EQ(d.extra_repr(), "p=0.25");
}

TEST(ModulePrint, NestedModelIsAnIndentedTree) {
  auto net = std::make_shared<Net>();
  std::ostringstream os;
  os << *net;
  const std::vector<std::string> got = lines(os.str());

  auto& l0 = *net->body->at<nn::Linear>(0);
  auto& l2 = *net->body->at<nn::Linear>(2);
  const std::vector<std::string> expected = {
      "Net(" + params(net->num_parameters()),
      "  scale=[3]",  // its own parameter, by its shape
      "  (body): Sequential(" + params(net->body->num_parameters()),
      "    (0): " + linear_line(l0),
      "    (1): ReLU()",
      "    (2): " + linear_line(l2),
      "  )",
      "  (head): " + linear_line(*net->head),
      ")",
  };
  EXPECT_EQ(got, expected) << os.str();
  // The counts add up: the model's is its own parameters plus its children's.
  EXPECT_EQ(net->num_parameters(), 3 + net->body->num_parameters() + net->head->num_parameters());
}

TEST(ModulePrint, AModuleOfYourOwnCanDescribeItself) {
  struct Scaled : nn::Module {
    double factor;
    explicit Scaled(double f) : Module("Scaled"), factor(f) {}
    std::string extra_repr() const override { return "factor=" + std::to_string(int(factor)); }
    Tensor forward(const Tensor& x) override { return x * factor; }
  };
  std::ostringstream os;
  os << Scaled(3);
  EXPECT_EQ(os.str(), "Scaled(factor=3)");
}

TEST(ModuleSummary, ParametersFlopsAndSavedBytesPerModule) {
  auto net = std::make_shared<Net>();
  const int64_t batch = 5;
  Tensor x = randn({batch, 4});
  nn::ModelSummary s = nn::summary(net, x);

  const auto modules = net->named_modules();
  ASSERT_EQ(s.rows.size(), modules.size());
  int64_t own_sum = 0;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const nn::ModuleSummaryRow& r = s.rows[i];
    EXPECT_EQ(r.name, modules[i].first);
    EXPECT_EQ(r.type, modules[i].second->type_name());
    EXPECT_EQ(r.calls, 1) << r.name;
    int64_t n = 0;
    for (const Tensor& p : modules[i].second->parameters()) n += p.numel();
    EXPECT_EQ(r.parameters, n) << r.name;
    if (modules[i].second->children().empty()) own_sum += r.parameters;
  }
  EXPECT_EQ(s.total_parameters, own_sum + 3);  // the leaves' and Net's own `scale`
  EXPECT_EQ(s.rows[0].name, "");
  EXPECT_EQ(s.rows[0].depth, 0);
  EXPECT_EQ(s.rows[0].output_shape, (Shape{batch, 2}));

  auto row = [&](const std::string& name) -> const nn::ModuleSummaryRow& {
    for (const auto& r : s.rows)
      if (r.name == name) return r;
    ADD_FAILURE() << "no row " << name;
    return s.rows[0];
  };
  EXPECT_EQ(row("body").depth, 1);
  EXPECT_EQ(row("body.0").depth, 2);
  EXPECT_EQ(row("body.0").output_shape, (Shape{batch, 8}));
  EXPECT_EQ(row("body.2").output_shape, (Shape{batch, 3}));
  // Note [FLOP counting]: a Linear is 2mnk, plus one per output element for the bias.
  EXPECT_EQ(row("body.2").flops, uint64_t(2 * batch * 3 * 8));  // no bias
  EXPECT_EQ(row("body.0").flops, uint64_t(2 * batch * 8 * 4 + batch * 8));
  EXPECT_EQ(row("head").flops, uint64_t(2 * batch * 2 * 3 + batch * 2));
  EXPECT_EQ(row("body.1").flops, uint64_t(batch * 8));  // relu: one per element
  EXPECT_EQ(row("body").flops, row("body.0").flops + row("body.1").flops + row("body.2").flops);
  EXPECT_GE(s.total_flops, row("body").flops + row("head").flops);
  EXPECT_EQ(s.rows[0].flops, s.total_flops);

  // Saved bytes against the saved-tensor accounting of the same forward, done by hand.
  std::size_t expected_saved = 0;
  {
    SavedMemoryTracker tracker;
    const std::size_t before = saved_memory_stats().current_bytes;
    Tensor y = (*net)(x);
    expected_saved = saved_memory_stats().current_bytes - before;
  }
  EXPECT_GT(expected_saved, 0u);
  EXPECT_EQ(s.total_saved_bytes, expected_saved);
  EXPECT_EQ(s.rows[0].saved_bytes, expected_saved);
  EXPECT_LE(row("body").saved_bytes, expected_saved);

  // The hooks are gone and the model is as it was: a second summary gives the same numbers.
  nn::ModelSummary again = nn::summary(*net, x);
  EXPECT_EQ(again.total_flops, s.total_flops);
  EXPECT_EQ(again.total_saved_bytes, s.total_saved_bytes);
  for (const auto& r : again.rows) EXPECT_EQ(r.calls, 1);

  // The table has a header, a row per module and the totals.
  const std::string text = s.to_string();
  EXPECT_NE(text.find("output shape"), std::string::npos);
  EXPECT_NE(text.find("body.0 (Linear)"), std::string::npos);
  EXPECT_NE(text.find(std::to_string(s.total_parameters) + " parameters"), std::string::npos);
  EXPECT_EQ(lines(text).size(), modules.size() + 4);
}

TEST(ModuleSummary, InsideNoGradItStillCountsWhatBackwardWouldSave) {
  nn::Linear l(4, 3);
  NoGradGuard no_grad;
  nn::ModelSummary s = nn::summary(l, randn({2, 4}));
  EXPECT_GT(s.total_saved_bytes, 0u);
  EXPECT_EQ(s.rows.size(), 1u);
  EXPECT_EQ(s.total_parameters, 15);
}

}  // namespace
