// export_function / import_function (include/adjoint/export.h). Oracles: the eager function on
// the same values (bit for bit: the imported graph runs the same kernels), and for the other
// process, adjoint-run's output files compared with eager values. Also: training the imported
// parameters, transforms over an imported function, exact doubles, 16-bit tensors, and errors
// (no trace, a random draw, a file that is not an export, a damaged graph, wrong inputs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"

namespace {

using namespace adjoint;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "adjoint_export_test_" + std::to_string(::getpid()) + "_" + name;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " at " << i;
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small model whose parameters the function reads from outside (captured tensors).
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(uint64_t seed) {
    Generator gen(seed);
    auto param = [&](const Shape& s) {
      return (randn(s, DType::Float32, &gen) * 0.3).detach().requires_grad_(true);
    };
    w1 = param({16, 8});
    b1 = param({16});
    w2 = param({4, 16});
    b2 = param({4});
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  // logits and a loss against integer targets
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    const Tensor h = gelu(linear(in[0], w1, b1)) * 0.5 + tanh(in[0].sum({-1}, true));
    const Tensor logits = linear(h, w2, b2);
    return {logits, cross_entropy(logits, in[1])};
  }
};

TEST(Export, AnImportedMlpEqualsEagerInValuesAndGradientsOfInputsAndParameters) {
  const Mlp model(1);
  CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return model(in); });
  Generator gen(2);
  const Tensor x = randn({5, 8}, DType::Float32, &gen), t = randint(0, 4, {5}, &gen);
  f({x.detach().requires_grad_(true), t});
  const std::string path = temp_path("mlp.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  ASSERT_EQ(g.parameters().size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    expect_same(g.parameters()[i], model.params()[i].detach(), "parameter " + std::to_string(i));
    EXPECT_TRUE(g.parameters()[i].requires_grad());
    EXPECT_TRUE(g.parameters()[i].is_leaf());
  }
  EXPECT_EQ(g.input_shapes(), (std::vector<Shape>{{5, 8}, {5}}));
  EXPECT_EQ(g.input_dtypes(), (std::vector<DType>{DType::Float32, DType::Int64}));
  EXPECT_EQ(g.input_requires_grad(), (std::vector<bool>{true, false}));

  // Other values than traced, twice (the second call replays the planned graph again).
  for (int step = 0; step < 2; ++step) {
    const Tensor x2 = randn({5, 8}, DType::Float32, &gen), t2 = randint(0, 4, {5}, &gen);
    Tensor xe = x2.detach().requires_grad_(true), xi = x2.detach().requires_grad_(true);
    const std::vector<Tensor> ye = model({xe, t2}), yi = g({xi, t2});
    expect_same(yi[0], ye[0], "logits");
    expect_same(yi[1], ye[1], "loss");
    const std::vector<Tensor> wrt_e = {xe, model.w1, model.b1, model.w2, model.b2};
    const std::vector<Tensor> wrt_i = {xi, g.parameters()[0], g.parameters()[1], g.parameters()[2],
                                       g.parameters()[3]};
    const Tensor ce = ye[1] + (ye[0] * ye[0]).sum() * 0.01;
    const Tensor ci = yi[1] + (yi[0] * yi[0]).sum() * 0.01;
    const std::vector<Tensor> ge = autograd::grad({ce}, wrt_e);
    const std::vector<Tensor> gi = autograd::grad({ci}, wrt_i);
    for (std::size_t k = 0; k < ge.size(); ++k)
      expect_same(gi[k], ge[k], "gradient " + std::to_string(k));
  }
}

TEST(Export, AFunctionWithDynamicSizesIsImportedForAnySize) {
  // Fitted on batches of 5 and 7 (the positions of arange(n) included), written, read back: the
  // imported function takes batches it was never traced at, with eager's values and gradients.
  const Mlp model(11);
  CompileOptions o;
  o.dynamic = {{0, 0}, {1, 0}};
  o.warn = false;
  auto fn = [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> out = model(in);
    const int64_t n = in[0].size(0);
    out[0] = out[0] * arange(n, DType::Float32).unsqueeze(1);
    return out;
  };
  CompiledFunction f = compile(fn, o);
  Generator gen(12);
  for (int64_t n : {5, 7})
    f({randn({n, 8}, DType::Float32, &gen).requires_grad_(true), randint(0, 4, {n}, &gen)});
  ASSERT_EQ(f.stats().probes, 2);
  const std::string path = temp_path("dynamic.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  EXPECT_EQ(g.input_shapes(), (std::vector<Shape>{{5, 8}, {5}}));
  ASSERT_EQ(g.dynamic_dims().size(), 2u);
  for (int64_t n : {5, 3, 12, 3}) {
    const std::string at = " at batch " + std::to_string(n);
    const Tensor x = randn({n, 8}, DType::Float32, &gen), t = randint(0, 4, {n}, &gen);
    Tensor xe = x.detach().requires_grad_(true), xi = x.detach().requires_grad_(true);
    const std::vector<Tensor> ye = fn({xe, t}), yi = g({xi, t});
    expect_same(yi[0], ye[0], "logits" + at);
    expect_same(yi[1], ye[1], "loss" + at);
    const std::vector<Tensor> ge = autograd::grad({ye[1]}, {xe, model.w1});
    const std::vector<Tensor> gi = autograd::grad({yi[1]}, {xi, g.parameters()[0]});
    expect_same(gi[0], ge[0], "input gradient" + at);
    expect_same(gi[1], ge[1], "weight gradient" + at);
  }
  EXPECT_NE(error_of([&] {
              g({randn({1, 8}), randint(0, 4, {1})});
            }).find("2 or more"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g({randn({4, 8}), randint(0, 4, {6})});
            }).find("dynamic size 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g({randn({4, 9}), randint(0, 4, {4})});
            }).find("[4, 8]"),
            std::string::npos);
}

TEST(Export, TheImportedParametersTrainAsTheEagerOnes) {
  // Three SGD steps on each: .grad accumulates into the imported parameters, and the updated
  // values are read by the next call.
  Mlp eager(3);
  CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return eager(in); });
  Generator gen(4);
  const Tensor x = randn({6, 8}, DType::Float32, &gen), t = randint(0, 4, {6}, &gen);
  f({x, t});
  const std::string path = temp_path("train.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  optim::SGDOptions sgd;
  sgd.lr = 0.1;
  optim::SGD opt_e(eager.params(), sgd), opt_i(g.parameters(), sgd);
  for (int step = 0; step < 3; ++step) {
    opt_e.zero_grad();
    opt_i.zero_grad();
    eager({x, t})[1].backward();
    g({x, t})[1].backward();
    opt_e.step();
    opt_i.step();
  }
  for (std::size_t i = 0; i < 4; ++i)
    expect_same(g.parameters()[i].detach(), eager.params()[i].detach(),
                "parameter " + std::to_string(i) + " after 3 steps");
}

// Runs `command`; returns its exit status.
int run(const std::string& command) { return std::system(command.c_str()); }

TEST(Export, AnotherProcessRunsTheFunctionForwardAndBackwardWithoutItsCode) {
  // adjoint-run links the library alone: it imports the file, reads the inputs, writes the
  // outputs and gradients. Oracle: the eager model in this process.
  const Mlp model(5);
  CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return model(in); });
  Generator gen(6);
  const Tensor x = randn({7, 8}, DType::Float32, &gen), t = randint(0, 4, {7}, &gen);
  f({x.detach().requires_grad_(true), t});
  const std::string fn = temp_path("proc.adjoint"), in = temp_path("proc_in.safetensors"),
                    out = temp_path("proc_out.safetensors");
  export_function(f, fn);
  const Tensor cot0 = randn({7, 4}, DType::Float32, &gen);
  io::save_safetensors(in, {{"input.0", x}, {"input.1", t}, {"cotangent.0", cot0}});
  ASSERT_EQ(run(std::string(ADJOINT_RUN_PATH) + " " + fn + " " + in + " " + out + " --backward"),
            0);
  const io::SafetensorsFile got = io::load_safetensors(out);
  std::remove(fn.c_str());
  std::remove(in.c_str());
  std::remove(out.c_str());
  auto named = [&](const std::string& n) {
    for (const auto& [name, tensor] : got.tensors)
      if (name == n) return tensor;
    ADD_FAILURE() << "adjoint-run wrote no " << n;
    return Tensor();
  };
  Tensor xe = x.detach().requires_grad_(true);
  const std::vector<Tensor> ye = model({xe, t});
  expect_same(named("output.0"), ye[0].detach(), "logits");
  expect_same(named("output.1"), ye[1].detach(), "loss");
  autograd::backward({ye[0], ye[1]}, {cot0, ones_like(ye[1])});
  expect_same(named("grad.input.0"), xe.grad(), "input gradient");
  const std::vector<Tensor> params = model.params();
  for (std::size_t i = 0; i < params.size(); ++i)
    expect_same(named("grad.parameter." + std::to_string(i)), params[i].grad(),
                "parameter gradient " + std::to_string(i));
}

TEST(Export, AttributesKeepTheirExactBitsAndComparisonsAndArgmaxAreWritten) {
  // Doubles go through the file as their bits (a subnormal, -0, an infinity in clamp); a
  // comparison, where and argmax are calls outside the dispatch stack, written by kind.
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor x = in[0];
    const Tensor y = clamp(x * 4.9406564584124654e-324 + x * 0.1, -INFINITY, 0.25) + -0.0;
    const Tensor m = where(logical_or(gt(x, 0.3), lt(x, in[1])), y, x * 3.0);
    return std::vector<Tensor>{m, argmax(m, 1).to(DType::Float64), pow(x, 2.5)};
  };
  CompiledFunction f = compile(fn);
  Generator gen(7);
  const Tensor x = randn({4, 6}, DType::Float64, &gen), b = randn({4, 6}, DType::Float64, &gen);
  f({x, b});
  const std::string path = temp_path("bits.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  const Tensor x2 = randn({4, 6}, DType::Float64, &gen);
  const std::vector<Tensor> want = fn({x2, b}), got = g({x2, b});
  for (std::size_t i = 0; i < want.size(); ++i)
    expect_same(got[i], want[i], "output " + std::to_string(i));
}

TEST(Export, TransformsAndDoubleBackwardComposeWithAnImportedFunction) {
  // vmap and jvp run the imported graph op by op through the dispatch stack; create_graph
  // gives a gradient that is differentiable again.
  auto fn = [](const Tensor& x) { return (tanh(x * 1.5) * x).sum({-1}); };
  CompiledFunction f = compile(fn);
  Generator gen(8);
  const Tensor x = randn({3, 5}, DType::Float64, &gen);
  f(x.detach().requires_grad_(true));
  const std::string path = temp_path("transforms.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  auto gi = [&](const Tensor& v) { return g({v})[0]; };

  // vmap over a leading batch of 2 examples of the traced shape
  const Tensor xs = randn({2, 3, 5}, DType::Float64, &gen);
  {
    // the imported function takes a tensor that requires grad: give each example one
    const Tensor got =
        vmap([&](const Tensor& v) { return gi(v.detach().requires_grad_(true)).detach(); })(xs);
    expect_same(got, vmap(fn)(xs), "vmap");
  }
  const Tensor dir = randn({3, 5}, DType::Float64, &gen);
  const Tensor xr = x.detach().requires_grad_(true);
  const auto ji = jvp(gi, xr, dir);
  const auto je = jvp(fn, x.detach().requires_grad_(true), dir);
  expect_same(ji.outputs.detach(), je.outputs.detach(), "jvp value");
  expect_same(ji.tangents.detach(), je.tangents.detach(), "jvp tangent");

  Tensor xi = x.detach().requires_grad_(true), xe = x.detach().requires_grad_(true);
  const Tensor gi1 = autograd::grad({gi(xi).sum()}, {xi}, {}, true, true)[0];
  const Tensor ge1 = autograd::grad({fn(xe).sum()}, {xe}, {}, true, true)[0];
  expect_same(gi1.detach(), ge1.detach(), "gradient with create_graph");
  const Tensor gi2 = autograd::grad({(gi1 * gi1).sum()}, {xi})[0];
  const Tensor ge2 = autograd::grad({(ge1 * ge1).sum()}, {xe})[0];
  expect_same(gi2, ge2, "second derivative");
}

TEST(Export, SixteenBitParametersAndAnAutocastGraphRoundTrip) {
  Generator gen(9);
  const Tensor w = (randn({8, 8}, DType::Float32, &gen) * 0.2).to(DType::BFloat16);
  const Tensor v = (randn({8, 8}, DType::Float32, &gen) * 0.2).detach().requires_grad_(true);
  auto fn = [&](const std::vector<Tensor>& in) {
    Autocast amp(DType::BFloat16);
    return std::vector<Tensor>{relu(matmul(in[0], v)) + matmul(in[0].to(DType::BFloat16), w)};
  };
  CompiledFunction f = compile(fn);
  const Tensor x = randn({3, 8}, DType::Float32, &gen);
  f({x});
  const std::string path = temp_path("bf16.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  // The captured tensors, in the order the trace first read them, in their own dtypes.
  ASSERT_EQ(g.parameters().size(), 2u);
  const std::size_t fp32 = g.parameters()[0].dtype() == DType::Float32 ? 0 : 1;
  EXPECT_EQ(g.parameters()[fp32].dtype(), DType::Float32);
  EXPECT_EQ(g.parameters()[1 - fp32].dtype(), DType::BFloat16);
  expect_same(g.parameters()[1 - fp32], w, "bfloat16 parameter");
  const Tensor y = g({x})[0];
  expect_same(y, fn({x})[0], "value");
  y.sum().backward();
  v.zero_grad();
  fn({x})[0].sum().backward();
  expect_same(g.parameters()[fp32].grad(), v.grad(), "float32 parameter's gradient");
}

TEST(Export, RandomDrawsReplayFromTheirGeneratorsAsEagerCodeDoes) {
  // Draws from a generator of the caller's continue its stream in the imported function's own
  // generator (its state as exported); draws from the default generator use the importing
  // process's default one. Oracle: eager code on generators in the same states.
  Generator gen(21);
  auto fn = [&](const std::vector<Tensor>& in) {
    const Tensor h = dropout(in[0], 0.4, true, &gen) + randn({4, 6}, DType::Float32, &gen) * 0.1;
    return std::vector<Tensor>{dropout(h, 0.3) + randint(0, 5, {6}).to(DType::Float32)};
  };
  CompiledFunction f = compile(fn);
  const Tensor x = ones({4, 6});
  f({x.detach().requires_grad_(true)});
  f({x.detach().requires_grad_(true)});
  const std::string path = temp_path("random.adjoint");
  export_function(f, path);
  const Generator::State exported = gen.state();
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  ASSERT_EQ(g.generators().size(), 2u);
  const std::size_t own = g.generators()[0] == &default_generator() ? 1 : 0;
  EXPECT_EQ(g.generators()[1 - own], &default_generator());
  EXPECT_NE(g.generators()[own], &gen);
  gen.set_state(exported);
  for (int call = 0; call < 2; ++call) {
    manual_seed(100 + call);
    Tensor xi = x.detach().requires_grad_(true);
    const Tensor got = g({xi})[0];
    got.sum().backward();
    manual_seed(100 + call);
    Tensor xe = x.detach().requires_grad_(true);
    const Tensor want = fn({xe})[0];
    want.sum().backward();
    expect_same(got, want, "call " + std::to_string(call));
    expect_same(xi.grad(), xe.grad(), "gradient, call " + std::to_string(call));
    // the imported function's generator moved as the eager one did
    EXPECT_EQ(g.generators()[own]->state().s0, gen.state().s0);
    EXPECT_EQ(g.generators()[own]->state().s1, gen.state().s1);
  }
}

TEST(Export, AnImportedGptTrainsAsTheEagerOneBitForBit) {
  // A small GPT's loss (embeddings, layer norms, attention, dropout layers with generators of
  // their own, cross-entropy on the trainer's sliced windows) exported and imported; AdamW on
  // the imported parameters and on an eager twin's, whose generators stand where the exported
  // ones did.
  const nn::GPTConfig config{32, 16, 32, 2, 2, 0.1};
  Generator ge(5), gc(5);
  nn::GPT eager(config, &ge), traced(config, &gc);
  CompiledFunction loss = compile([&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{traced.loss(in[0], in[1])};
  });
  Generator data(9);
  auto windows = [&] {
    const Tensor tokens = randint(0, 32, {3, 17}, &data);
    return std::vector<Tensor>{tokens.slice(1, 0, 16), tokens.slice(1, 1, 17)};
  };
  // One call each, so that every dropout layer's own generator has drawn once in both models
  // (the trace gives its draws back; the replay that follows draws).
  const std::vector<Tensor> first = windows();
  loss(first);
  eager.loss(first[0], first[1]);
  const std::string path = temp_path("gpt.adjoint");
  export_function(loss, path);
  const ImportedFunction imported = import_function(path);
  std::remove(path.c_str());
  // The captured tensors are the parameters and the model's buffers (the causal mask), in
  // the order first read: each parameter is a capture with its values (equal ones, such as
  // layer norms' ones, are interchangeable until the first step, which the test then checks).
  const std::vector<Tensor> pe = eager.parameters();
  std::vector<Tensor> pi;
  std::vector<bool> used(imported.parameters().size(), false);
  for (const Tensor& p : pe) {
    for (std::size_t k = 0; k < used.size(); ++k) {
      const Tensor& c = imported.parameters()[k];
      if (!used[k] && c.shape() == p.shape() && c.dtype() == p.dtype() && c.requires_grad() &&
          c.to_vector<double>() == p.to_vector<double>()) {
        used[k] = true;
        pi.push_back(c);
        break;
      }
    }
  }
  ASSERT_EQ(pi.size(), pe.size());
  optim::AdamW opt_e(pe, {.lr = 1e-2}), opt_i(pi, {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const std::vector<Tensor> w = windows();
    opt_e.zero_grad();
    opt_i.zero_grad();
    const Tensor le = eager.loss(w[0], w[1]), li = imported(w)[0];
    expect_same(li, le, "loss at step " + std::to_string(step));
    le.backward();
    li.backward();
    for (std::size_t i = 0; i < pe.size(); ++i)
      expect_same(pi[i].grad(), pe[i].grad(), "gradient " + std::to_string(i));
    opt_e.step();
    opt_i.step();
  }
}

TEST(Export, WhatCannotBeWrittenOrReadIsAnErrorNamingIt) {
  CompiledFunction none = compile([](const Tensor& x) { return x * 2.0; });
  EXPECT_NE(error_of([&] {
              export_function(none, temp_path("none.adjoint"));
            }).find("no traced signature"),
            std::string::npos);

  // A captured tensor that is a strided view: a file holds it contiguous, and the graph's
  // ops were traced on its layout.
  const Tensor outside = randn({3, 4}).t();
  CompiledFunction strided = compile([&](const Tensor& x) { return x + outside.reshape({-1}); });
  strided(ones({12}));
  EXPECT_NE(error_of([&] {
              export_function(strided, temp_path("strided.adjoint"));
            }).find("strided view"),
            std::string::npos);

  CompileOptions eager_on_break;
  eager_on_break.warn = false;
  CompiledFunction broken = compile(
      [](const Tensor& x) { return x.sum().item<double>() > 0 ? x * 2.0 : x; }, eager_on_break);
  broken(ones({3}));
  EXPECT_NE(
      error_of([&] { export_function(broken, temp_path("broken.adjoint")); }).find("graph break"),
      std::string::npos);

  // A safetensors file that export_function did not write, and a missing one.
  const std::string plain = temp_path("plain.safetensors");
  io::save_safetensors(plain, {{"x", ones({2})}});
  EXPECT_NE(error_of([&] { import_function(plain); }).find("not a file export_function wrote"),
            std::string::npos);
  std::remove(plain.c_str());
  EXPECT_NE(error_of([&] { import_function(temp_path("missing.adjoint")); }), "");

  // Wrong inputs to an imported function.
  Generator gen(10);
  CompiledFunction f = compile([](const Tensor& x) { return tanh(x) * 2.0; });
  f(ones({2, 3}).requires_grad_(true));
  const std::string path = temp_path("inputs.adjoint");
  export_function(f, path);
  const ImportedFunction g = import_function(path);
  EXPECT_NE(error_of([&] {
              g({ones({3, 2}).requires_grad_(true)});
            }).find("shape [3, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g({ones({2, 3}, DType::Float64).requires_grad_(true)});
            }).find("float64"),
            std::string::npos);
  // An input that the trace differentiated may come without requires_grad (inference); one
  // that it did not may not require grad (its backward would give it no gradient).
  const Tensor values = randn({2, 3}, DType::Float32, &gen);
  expect_same(g({values})[0], tanh(values) * 2.0, "an input without requires_grad");
  CompiledFunction h = compile([](const Tensor& x) { return tanh(x) * 2.0; });
  h(ones({2, 3}));
  const std::string no_grad_path = temp_path("no_grad.adjoint");
  export_function(h, no_grad_path);
  const ImportedFunction hi = import_function(no_grad_path);
  std::remove(no_grad_path.c_str());
  EXPECT_NE(error_of([&] {
              hi({ones({2, 3}).requires_grad_(true)});
            }).find("no gradient"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g({}); }).find("takes 1 inputs"), std::string::npos);
  // A non-contiguous input of the right shape is copied (the trace was contiguous).
  const Tensor nc = randn({3, 2}, DType::Float32, &gen).t().detach().requires_grad_(true);
  expect_same(g({nc})[0], tanh(nc.contiguous()) * 2.0, "non-contiguous input");
  std::remove(path.c_str());
}

// The graph of a small exported function, for the damaged-file tests.
io::SafetensorsFile exported_file(const std::string& path) {
  CompiledFunction f = compile([](const Tensor& x) { return (tanh(x) * 2.0 + x).sum({-1}); });
  f(ones({2, 3}).requires_grad_(true));
  export_function(f, path);
  return io::load_safetensors(path);
}

// The error of importing and running the exported graph with each `from` replaced by `to`.
std::string import_error_with(const std::vector<std::pair<std::string, std::string>>& edits) {
  const std::string path = temp_path("damaged.adjoint");
  io::SafetensorsFile file = exported_file(path);
  std::string& graph = file.metadata.at("adjoint.graph");
  for (const auto& [from, to] : edits) {
    const std::size_t at = graph.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << graph;
    if (at == std::string::npos) return "";
    graph.replace(at, from.size(), to);
  }
  io::save_safetensors(path, file.tensors, file.metadata);
  const std::string e = error_of([&] {
    const ImportedFunction g = import_function(path);
    g({ones({2, 3}).requires_grad_(true)})[0].sum().backward();
  });
  std::remove(path.c_str());
  return e;
}

std::string import_error_with(const std::string& from, const std::string& to) {
  return import_error_with({{from, to}});
}

TEST(Export, DamagedDynamicFormulasAreRefusedWithAnErrorNotACrash) {
  // Digits of the "dynamic" section changed at random: importing and running at a new size
  // gives an error or a run, never a crash (under the sanitizer build, no read out of bounds).
  CompileOptions o;
  o.dynamic = {{0, 0}};
  o.warn = false;
  CompiledFunction f = compile(
      [](const Tensor& x) {
        return (tanh(x) * 2.0 + x).sum({-1}) * arange(x.size(0), DType::Float32);
      },
      o);
  for (int64_t n : {3, 5}) f(ones({n, 3}).requires_grad_(true));
  const std::string path = temp_path("dynamic_damaged.adjoint");
  export_function(f, path);
  io::SafetensorsFile file = io::load_safetensors(path);
  const std::string json = file.metadata.at("adjoint.graph");
  const std::size_t section = json.find("\"dynamic\"");
  ASSERT_NE(section, std::string::npos);
  std::vector<std::size_t> digits;
  for (std::size_t i = section; i < json.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(json[i]))) digits.push_back(i);
  std::mt19937 rng(12);
  int errors = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string damaged = json;
    damaged.replace(digits[rng() % digits.size()], 1,
                    std::to_string(static_cast<int>(rng() % 14) - 2));
    file.metadata.at("adjoint.graph") = damaged;
    io::save_safetensors(path, file.tensors, file.metadata);
    errors += !error_of([&] {
                 const ImportedFunction g = import_function(path);
                 g({ones({6, 3}).requires_grad_(true)})[0].sum().backward();
               }).empty();
  }
  std::remove(path.c_str());
  EXPECT_GT(errors, 20);
}

TEST(Export, ADamagedGraphIsRefusedWithAnErrorNotACrash) {
  // Each damage is caught when the file is read, or at the latest when the graph runs, as an
  // adjoint::Error (the sanitizer build checks that nothing reads out of bounds meanwhile).
  EXPECT_NE(import_error_with("\"tanh\"", "\"no_such_op\"").find("does not know"),
            std::string::npos);
  EXPECT_NE(import_error_with("\"in\":[0],\"op\":\"tanh\"", "\"in\":[0],\"op\":\"add\"")
                .find("takes 2 inputs"),
            std::string::npos);
  EXPECT_NE(import_error_with("\"op\":\"mul_scalar\",", "\"op\":\"mul\",").find("fields"),
            std::string::npos);
  EXPECT_NE(import_error_with("\"in\":[0]", "\"in\":[999]").find("out of range"),
            std::string::npos);
  EXPECT_NE(import_error_with("[\"d\",\"4000000000000000\"]", "[\"i\",2]").find("another type"),
            std::string::npos);
  EXPECT_NE(import_error_with("\"in\":[2,0]", "\"in\":[3,0]").find("before it is made"),
            std::string::npos);
  // The pointwise results (tanh, mul, add) said to be [2, 9]: they would fuse into a loop over
  // [2, 9], reading its [2, 3] input past its end; import's shape pass refuses them first
  // (tanh makes [2, 3] of [2, 3]).
  EXPECT_NE(import_error_with({{"[4,0,0,[2,3],", "[4,0,0,[2,9],"},
                               {"[4,0,1,[2,3],", "[4,0,1,[2,9],"},
                               {"[4,0,2,[2,3],", "[4,0,2,[2,9],"}})
                .find("the file records a float32 value of shape [2, 9]"),
            std::string::npos);
  // Any number of the graph changed at random: an error or a run, never a crash or a hang
  // (under the sanitizer build, no read out of bounds either).
  std::mt19937 rng(11);
  const std::string base = temp_path("base.adjoint");
  const std::string json = exported_file(base).metadata.at("adjoint.graph");
  std::remove(base.c_str());
  std::vector<std::size_t> digits;
  for (std::size_t i = 0; i < json.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(json[i])) &&
        (i == 0 || !std::isalnum(static_cast<unsigned char>(json[i - 1]))))
      digits.push_back(i);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t at = digits[rng() % digits.size()];
    const std::string was(1, json[at]);
    const std::string to = std::to_string(static_cast<int>(rng() % 14) - 2);
    std::string damaged = json;
    damaged.replace(at, 1, to);
    const std::string e = import_error_with({{json, damaged}});
    errors += !e.empty();
  }
  EXPECT_GT(errors, 30);  // most changes are caught
  // Not this format's version.
  const std::string path = temp_path("version.adjoint");
  io::SafetensorsFile file = exported_file(path);
  file.metadata.at("adjoint.export") = "0";  // no version of the format
  io::save_safetensors(path, file.tensors, file.metadata);
  EXPECT_NE(error_of([&] { import_function(path); }).find("version"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
