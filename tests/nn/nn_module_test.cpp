// Tests for nn::Module: registration and dotted names in registration order, counts,
// naming errors (duplicate, empty, dotted, cycles), zero_grad, train/eval propagation,
// to(dtype) in place, shared tensors listed once, and Sequential/MLP naming and forward.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

// A small hand-made hierarchy: Leaf holds one parameter and one buffer.
struct Leaf : nn::Module {
  Tensor w, stat;
  explicit Leaf(int64_t n) : Module("Leaf") {
    w = register_parameter("w", ones({n}));
    stat = register_buffer("stat", zeros({n}));
  }
  Tensor forward(const Tensor& x) override { return x * w; }
};

struct Tree : nn::Module {
  std::shared_ptr<Leaf> a, b;
  Tensor scale;
  Tree() : Module("Tree") {
    scale = register_parameter("scale", full({2, 2}, 3.0));
    a = register_module("a", std::make_shared<Leaf>(3));
    b = register_module("b", std::make_shared<Leaf>(4));
  }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, NamedParametersAreDottedInRegistrationOrder) {
  auto root = std::make_shared<nn::Module>("Root");
  auto tree = root->register_module("tree", std::make_shared<Tree>());
  auto extra = root->register_module("extra", std::make_shared<Leaf>(2));
  EXPECT_EQ(names(root->named_parameters()),
            (std::vector<std::string>{"tree.scale", "tree.a.w", "tree.b.w", "extra.w"}));
  EXPECT_EQ(names(root->named_buffers()),
            (std::vector<std::string>{"tree.a.stat", "tree.b.stat", "extra.stat"}));
  // Non-recursive listings see only the module's own tensors.
  EXPECT_TRUE(root->named_parameters(false).empty());
  EXPECT_EQ(names(tree->named_parameters(false)), (std::vector<std::string>{"scale"}));
  // The handles are the registered tensors themselves, not copies.
  std::vector<Tensor> ps = root->parameters();
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_TRUE(ps[0].is_same(tree->scale));
  EXPECT_TRUE(ps[1].is_same(tree->a->w));
  EXPECT_TRUE(ps[3].is_same(extra->w));
  EXPECT_TRUE(root->get_parameter("tree.b.w").is_same(tree->b->w));
  EXPECT_TRUE(root->get_buffer("extra.stat").is_same(extra->stat));
  for (const Tensor& p : ps) EXPECT_TRUE(p.requires_grad());
  for (const Tensor& b : root->buffers()) EXPECT_FALSE(b.requires_grad());
}

TEST(Module, CountsChildrenAndModules) {
  Tree tree;
  EXPECT_EQ(tree.num_parameters(), 4 + 3 + 4);
  auto children = tree.named_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].first, "a");
  EXPECT_EQ(children[0].second.get(), tree.a.get());
  EXPECT_EQ(tree.children()[1].get(), tree.b.get());
  auto all = tree.named_modules();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].first, "");
  EXPECT_EQ(all[0].second.get(), &tree);
  EXPECT_EQ(all[2].first, "b");
  EXPECT_EQ(all[2].second->type_name(), "Leaf");
}

TEST(Module, MissingDottedNameIsAnIndexError) {
  Tree tree;
  expect_error([&] { tree.get_parameter("a.nope"); }, ErrorKind::Index,
               {"[nn.Tree]", "no parameter named 'a.nope'"});
  expect_error([&] { tree.get_buffer("scale"); }, ErrorKind::Index, {"no buffer named 'scale'"});
}

TEST(Module, DuplicateEmptyAndDottedNamesThrow) {
  Tree tree;
  expect_error([&] { tree.register_parameter("scale", zeros({1})); }, ErrorKind::Value,
               {"[nn.Tree]", "'scale'", "Tree", "already taken by a parameter"});
  expect_error([&] { tree.register_buffer("a", zeros({1})); }, ErrorKind::Value,
               {"[nn.Tree]", "'a'", "already taken by a submodule"});
  expect_error([&] { tree.register_module("scale", std::make_shared<Leaf>(1)); }, ErrorKind::Value,
               {"submodule 'scale'", "already taken by a parameter"});
  expect_error([&] { tree.a->register_parameter("stat", zeros({1})); }, ErrorKind::Value,
               {"[nn.Leaf]", "'stat'", "already taken by a buffer"});
  expect_error([&] { tree.register_parameter("", zeros({1})); }, ErrorKind::Value,
               {"[nn.Tree]", "empty name"});
  expect_error([&] { tree.register_parameter("x.y", zeros({1})); }, ErrorKind::Value,
               {"[nn.Tree]", "'x.y'", "'.'"});
  expect_error([&] { tree.register_module("c.d", std::make_shared<Leaf>(1)); }, ErrorKind::Value,
               {"'c.d'", "'.'"});
  // Nothing was added by the failed calls.
  EXPECT_EQ(tree.named_parameters().size(), 3u);
}

TEST(Module, BadParametersAndCyclesThrow) {
  auto tree = std::make_shared<Tree>();
  expect_error([&] { tree->register_parameter("i", zeros({2}, DType::Int64)); }, ErrorKind::DType,
               {"[nn.Tree]", "'i'", "floating point"});
  Tensor x = ones({2}).requires_grad_(true);
  expect_error([&] { tree->register_parameter("y", x * 2); }, ErrorKind::Value,
               {"'y'", "leaf", "detach"});
  expect_error([&] { tree->register_module("null", std::shared_ptr<Leaf>()); }, ErrorKind::Value,
               {"'null'", "null"});
  expect_error([&] { tree->a->register_module("up", tree); }, ErrorKind::Value,
               {"[nn.Leaf]", "'up'", "cycle"});
  expect_error([&] { tree->register_module("self", tree); }, ErrorKind::Value, {"cycle"});
}

TEST(Module, BaseForwardIsNotImplemented) {
  nn::Module m("Bare");
  expect_error([&] { m.forward(zeros({1})); }, ErrorKind::NotImplemented,
               {"[nn.Bare]", "no single-tensor forward"});
}

TEST(Module, ZeroGradDropsOrZeroesGradients) {
  Tree tree;
  Tensor x = ones({3});
  (tree.a->forward(x).sum() + tree.scale.sum()).backward();
  ASSERT_TRUE(tree.a->w.grad().defined());
  ASSERT_TRUE(tree.scale.grad().defined());
  EXPECT_FALSE(tree.b->w.grad().defined());
  tree.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(tree.a->w.grad().defined());
  adjoint::testing::expect_values(tree.a->w.grad(), {0, 0, 0});
  tree.zero_grad();
  EXPECT_FALSE(tree.a->w.grad().defined());
  EXPECT_FALSE(tree.scale.grad().defined());
}

TEST(Module, TrainAndEvalPropagateToDescendants) {
  auto root = std::make_shared<nn::Sequential>();
  auto inner = root->push_back(std::make_shared<nn::Sequential>());
  auto drop = inner->push_back(std::make_shared<nn::Dropout>(0.5));
  EXPECT_TRUE(root->is_training());
  EXPECT_TRUE(drop->is_training());
  root->eval();
  EXPECT_FALSE(root->is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE(drop->is_training());
  root->train();
  EXPECT_TRUE(drop->is_training());
  inner->train(false);  // a subtree can be switched alone
  EXPECT_TRUE(root->is_training());
  EXPECT_FALSE(drop->is_training());
}

TEST(Module, ToConvertsInPlaceKeepingHandles) {
  Tree tree;
  Tensor held = tree.a->w;  // e.g. an optimizer's handle
  auto mask = tree.register_buffer("mask", ones({2}, DType::Bool));
  Tensor x = ones({3});
  tree.a->forward(x).sum().backward();
  ASSERT_TRUE(held.grad().defined());
  tree.to(DType::Float64);
  EXPECT_EQ(held.dtype(), DType::Float64);
  EXPECT_EQ(tree.a->w.dtype(), DType::Float64);
  EXPECT_EQ(tree.scale.dtype(), DType::Float64);
  EXPECT_EQ(tree.a->stat.dtype(), DType::Float64);
  EXPECT_EQ(mask.dtype(), DType::Bool);  // non-floating buffers keep their dtype
  EXPECT_TRUE(held.requires_grad());
  EXPECT_TRUE(held.is_leaf());
  EXPECT_FALSE(held.grad().defined());  // the float32 gradient was dropped
  adjoint::testing::expect_values(tree.scale, {3, 3, 3, 3});
  // Training still works through the converted handles, in float64.
  Tensor y = tree.a->forward(tensor({1.0, 2.0, 3.0}, DType::Float64)).sum();
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.backward();
  adjoint::testing::expect_values(held.grad(), {1, 2, 3});
  EXPECT_EQ(held.grad().dtype(), DType::Float64);
  expect_error([&] { tree.to(DType::Int64); }, ErrorKind::DType, {"[nn.Tree]", "floating"});
}

TEST(Module, SharedParameterIsListedOnce) {
  // Two modules holding one tensor (a tie) or one module reachable twice: listed once, under
  // the first name, and converted once by to().
  auto root = std::make_shared<nn::Module>("Root");
  auto leaf = root->register_module("first", std::make_shared<Leaf>(2));
  root->register_module("again", leaf);
  auto other = root->register_module("other", std::make_shared<nn::Module>("Other"));
  other->register_parameter("tied", leaf->w);
  EXPECT_EQ(names(root->named_parameters()), (std::vector<std::string>{"first.w"}));
  EXPECT_EQ(root->num_parameters(), 2);
  EXPECT_EQ(root->named_modules().size(), 3u);  // root, first (= again), other
  root->to(DType::Float64);
  EXPECT_EQ(other->named_parameters()[0].second.dtype(), DType::Float64);
  EXPECT_TRUE(other->named_parameters()[0].second.is_same(leaf->w));
}

TEST(Sequential, NamesChildrenByIndexAndChainsForward) {
  Generator gen(3);
  auto l0 = std::make_shared<nn::Linear>(3, 4, true, &gen);
  auto l2 = std::make_shared<nn::Linear>(4, 2, false, &gen);
  nn::Sequential seq{l0, std::make_shared<nn::Tanh>(), l2};
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(names(seq.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  EXPECT_EQ(seq.at<nn::Linear>(2).get(), l2.get());
  expect_error([&] { seq.at<nn::Linear>(1); }, ErrorKind::Value, {"module 1 is a Tanh"});
  expect_error([&] { seq[3]; }, ErrorKind::Index, {"index 3"});
  Tensor x = randn({5, 3}, {}, &gen);
  Tensor want = linear(tanh(linear(x, l0->weight, l0->bias)), l2->weight);
  adjoint::testing::expect_values(seq(x), want.to_vector<double>(), 0);
}

TEST(MLP, LayersActivationsAndNames) {
  Generator gen(4);
  nn::MLP mlp({5, 7, 3}, nn::Activation::ReLU, true, &gen);
  EXPECT_EQ(mlp.type_name(), "MLP");
  ASSERT_EQ(mlp.size(), 3u);  // Linear, ReLU, Linear: no activation after the last layer
  EXPECT_EQ(mlp[1]->type_name(), "ReLU");
  EXPECT_EQ(names(mlp.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(mlp.num_parameters(), 5 * 7 + 7 + 7 * 3 + 3);
  auto l0 = mlp.at<nn::Linear>(0);
  auto l2 = mlp.at<nn::Linear>(2);
  Tensor x = randn({4, 5}, {}, &gen);
  Tensor want = linear(relu(linear(x, l0->weight, l0->bias)), l2->weight, l2->bias);
  adjoint::testing::expect_values(mlp.forward(x), want.to_vector<double>(), 0);
  expect_error([] { nn::MLP({3}); }, ErrorKind::Value, {"[nn.MLP]", "at least two sizes"});
}
