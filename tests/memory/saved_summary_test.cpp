// saved_tensors_summary (memory.h): the nodes of a known graph in forward order with their
// saved tensors' roles, shapes, dtypes and bytes; shared storages counted once in the totals;
// freed tensors after backward; custom functions; the printable table; errors.
#include <gtest/gtest.h>

#include <sstream>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

const SavedNodeInfo* find_node(const SavedTensorsSummary& s, const std::string& name) {
  for (const SavedNodeInfo& n : s.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

TEST(SavedSummary, ListsNodesShapesAndBytes) {
  Tensor x = randn({8, 16}).requires_grad_(true);
  Tensor w = randn({16, 4}, TensorOptions(DType::Float64)).requires_grad_(true);
  Tensor a = exp(x);                           // saves its output a: 8*16*4 = 512 bytes
  Tensor h = matmul(a.to(DType::Float64), w);  // saves both inputs
  Tensor loss = tanh(h).sum();                 // tanh saves its output h': 8*4*8 = 256 bytes
  const SavedTensorsSummary s = saved_tensors_summary(loss);

  // Creation order is forward order.
  std::vector<std::string> names;
  for (const SavedNodeInfo& n : s.nodes) names.push_back(n.name);
  auto pos = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  ASSERT_LT(pos("ExpBackward"), static_cast<long>(names.size()));
  EXPECT_LT(pos("ExpBackward"), pos("MatmulBackward"));
  EXPECT_LT(pos("MatmulBackward"), pos("TanhBackward"));
  EXPECT_LT(pos("TanhBackward"), pos("SumBackward"));
  for (std::size_t i = 1; i < s.nodes.size(); ++i)
    EXPECT_LT(s.nodes[i - 1].sequence_nr, s.nodes[i].sequence_nr);

  const SavedNodeInfo* e = find_node(s, "ExpBackward");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->saved.size(), 1u);
  EXPECT_EQ(e->saved[0].role, "output");
  EXPECT_EQ(e->saved[0].shape, Shape({8, 16}));
  EXPECT_EQ(e->saved[0].dtype, DType::Float32);
  EXPECT_EQ(e->saved[0].bytes, 512u);
  EXPECT_EQ(e->saved[0].storage_bytes, 512u);
  EXPECT_FALSE(e->saved[0].shared);

  const SavedNodeInfo* m = find_node(s, "MatmulBackward");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->saved.size(), 2u);
  EXPECT_EQ(m->saved[0].role, "input");
  EXPECT_EQ(m->saved[0].index, 0u);
  EXPECT_EQ(m->saved[0].shape, Shape({8, 16}));
  EXPECT_EQ(m->saved[0].dtype, DType::Float64);
  EXPECT_EQ(m->saved[0].bytes, 8u * 16 * 8);
  EXPECT_EQ(m->saved[1].index, 1u);
  EXPECT_EQ(m->saved[1].shape, Shape({16, 4}));
  EXPECT_EQ(m->saved[1].bytes, 16u * 4 * 8);

  const SavedNodeInfo* t = find_node(s, "TanhBackward");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->saved.size(), 1u);
  EXPECT_EQ(t->saved[0].bytes, 8u * 4 * 8);

  EXPECT_TRUE(find_node(s, "SumBackward")->saved.empty());
  EXPECT_EQ(s.num_saved, 4u);
  EXPECT_EQ(s.num_storages, 4u);
  EXPECT_EQ(s.total_bytes, 512u + 1024 + 512 + 256);
  // Only w is a leaf: the matmul's other input is the output of the conversion.
  EXPECT_FALSE(e->saved[0].leaf);
  EXPECT_FALSE(m->saved[0].leaf);
  EXPECT_TRUE(m->saved[1].leaf);
  EXPECT_EQ(s.leaf_bytes, 512u);
}

TEST(SavedSummary, SharedStorageCountedOnceInTotals) {
  Tensor x = randn({100}).requires_grad_(true);
  Tensor sq = (x * x).sum();  // separate statements: the order of + operands is unspecified
  Tensor loss = sq + sin(x.slice(0, 0, 10)).sum();
  const SavedTensorsSummary s = saved_tensors_summary(loss);
  const SavedNodeInfo* m = find_node(s, "MulBackward");
  const SavedNodeInfo* sn = find_node(s, "SinBackward");
  ASSERT_NE(m, nullptr);
  ASSERT_NE(sn, nullptr);
  ASSERT_EQ(m->saved.size(), 2u);
  EXPECT_FALSE(m->saved[0].shared);
  EXPECT_TRUE(m->saved[1].shared);
  // The slice is 40 bytes of a 400-byte storage it keeps alive; already counted by mul.
  EXPECT_EQ(sn->saved[0].bytes, 40u);
  EXPECT_EQ(sn->saved[0].storage_bytes, 400u);
  EXPECT_TRUE(sn->saved[0].shared);
  EXPECT_EQ(s.num_saved, 3u);
  EXPECT_EQ(s.num_storages, 1u);
  EXPECT_EQ(s.total_bytes, 400u);
  EXPECT_TRUE(m->saved[0].leaf);
  EXPECT_FALSE(sn->saved[0].leaf);  // a view of a leaf has a grad_fn: it is no leaf
  EXPECT_EQ(s.leaf_bytes, 400u);    // counted at mul's input, a leaf
}

TEST(SavedSummary, AfterBackwardTheTensorsAreFreed) {
  Tensor x = randn({10}).requires_grad_(true);
  Tensor y = exp(x);
  Tensor loss = y.sum();
  loss.backward();
  const SavedTensorsSummary s = saved_tensors_summary(loss);
  const SavedNodeInfo* e = find_node(s, "ExpBackward");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->saved.size(), 1u);
  EXPECT_TRUE(e->saved[0].freed);
  EXPECT_EQ(e->saved[0].storage_bytes, 0u);
  EXPECT_EQ(s.total_bytes, 0u);
  EXPECT_NE(s.to_string().find("freed"), std::string::npos);
}

struct Square : Function<Square> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * 2.0 * ctx.get_saved()[0]};
  }
  static std::string name() { return "MySquare"; }
};

TEST(SavedSummary, CustomFunctionNodes) {
  Tensor x = randn({3, 5}).requires_grad_(true);
  const SavedTensorsSummary s = saved_tensors_summary(Square::apply(x));
  const SavedNodeInfo* n = find_node(s, "MySquareBackward");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->saved.size(), 1u);
  EXPECT_EQ(n->saved[0].role, "saved");
  EXPECT_EQ(n->saved[0].shape, Shape({3, 5}));
  EXPECT_EQ(n->saved[0].bytes, 60u);
}

TEST(SavedSummary, PrintsATable) {
  Tensor x = randn({4, 8}).requires_grad_(true);
  Tensor loss = (exp(x) * x).sum();
  const SavedTensorsSummary s = saved_tensors_summary(loss);
  const std::string text = s.to_string();
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), text);
  for (const char* part :
       {"ExpBackward", "MulBackward", "output", "input 0", "input 1", "[4, 8]", "float32", "128",
        "leaf", "total: 3 saved tensors in 2 storages, 256 bytes"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in:\n" << text;
  EXPECT_NE(text.find("shared"), std::string::npos);       // mul's input 0 is exp's output
  EXPECT_EQ(text.find("SumBackward"), std::string::npos);  // saves nothing: not listed
}

TEST(SavedSummary, NoGraphAndErrors) {
  Tensor leaf = randn({3}).requires_grad_(true);
  EXPECT_TRUE(saved_tensors_summary(leaf).nodes.empty());
  EXPECT_TRUE(saved_tensors_summary(randn({3})).nodes.empty());
  expect_error([] { saved_tensors_summary(Tensor()); }, ErrorKind::Value,
               {"saved_tensors_summary", "undefined"});
}

TEST(SavedSummary, SeveralOutputsShareOneWalk) {
  Tensor x = randn({6}).requires_grad_(true);
  Tensor a = exp(x);
  Tensor b = a * 2.0;
  Tensor c = a * 3.0;
  const SavedTensorsSummary s = saved_tensors_summary(std::vector<Tensor>{b, c});
  int exps = 0;
  for (const SavedNodeInfo& n : s.nodes) exps += n.name == "ExpBackward";
  EXPECT_EQ(exps, 1);
  EXPECT_EQ(s.total_bytes, 24u);
}

}  // namespace
