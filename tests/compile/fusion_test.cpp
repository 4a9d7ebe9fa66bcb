// compile's pointwise fusion and memory plan. The oracle is eager code, op by op: a fused group
// computes every element with the op's own per-element function, so on contiguous operands
// (broadcast ones included) it equals the unfused ops bit for bit; the allocator's counts show
// that a fused chain makes no intermediate buffers, and its peak matches the plan's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "adjoint/adjoint.h"
#include "backend/cpu/simd_math.h"
#include "compile/fused_loop.h"

namespace {

using namespace adjoint;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::isnan(a[i]) && std::isnan(b[i]))) {
      ASSERT_EQ(a[i], b[i]) << what << " at " << i;
    }
  }
}

// A random program of pointwise ops over a [rows, cols] argument and broadcast operands (a
// scalar, a row, a column), reduced to a sum so that it has a gradient.
// With `casts`, steps may also cast a value to bfloat16, to float16 or back to float32, so that
// ops run on 16-bit values and on mixes of them (promoted to float32).
struct RandomProgram {
  uint64_t seed;
  bool casts = false;
  Tensor operator()(const std::vector<Tensor>& in) const {
    std::mt19937_64 rng(seed);
    std::vector<Tensor> pool = {in[0], in[1], in[2], in[3]};
    for (int step = 0; step < 14; ++step) {
      const Tensor a = pool[rng() % pool.size()], b = pool[rng() % pool.size()];
      Tensor r;
      const uint64_t pick = rng() % (casts ? 16 : 13);
      switch (pick) {
        case 13:
          r = a.to(DType::BFloat16);
          break;
        case 14:
          r = a.to(DType::Float16);
          break;
        case 15:
          r = a.to(DType::Float32);
          break;
        case 0:
          r = a + b;
          break;
        case 1:
          r = a * b;
          break;
        case 2:
          r = a - b * 0.5;
          break;
        case 3:
          r = tanh(a);
          break;
        case 4:
          r = sigmoid(a) * b;
          break;
        case 5:
          r = exp(a * 0.1);
          break;
        case 6:
          r = a / (b * b + 1.0);
          break;
        case 7:
          r = pow(a, 3.0) * 0.01 + 1.0;
          break;
        case 8:
          r = sqrt(a * a + 1.0);
          break;
        case 9:
          r = relu(a) - b;
          break;
        case 10:
          r = 2.0 - a;
          break;
        case 11:  // a bool condition read by the fused loop; its backward is two wheres
          r = where(gt(a, b), a * 0.5, b);
          break;
        default:
          r = maximum(a, b);
          break;
      }
      pool.push_back(r);
    }
    Tensor out = pool.back();
    for (std::size_t k = pool.size() - 4; k < pool.size() - 1; ++k) out = out + pool[k];
    return out.to(in[0].dtype()).sum();
  }
};

TEST(Fusion, RandomPointwiseProgramsEqualEagerBitwise) {
  int merged = 0;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (uint64_t seed = 1; seed <= 25; ++seed) {
      Generator gen(seed);
      auto leaf = [&](const Shape& s) { return randn(s, dtype, &gen).requires_grad_(true); };
      std::vector<Tensor> in = {leaf({37, 70}), leaf({}), leaf({70}), leaf({37, 1})};
      const RandomProgram f{seed};
      CompiledFunction c =
          compile([f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; });
      for (double scale : {1.0, 0.5}) {
        std::vector<Tensor> xe, xc;
        for (const Tensor& x : in) {
          xe.push_back((x.detach() * scale).requires_grad_(true));
          xc.push_back((x.detach() * scale).requires_grad_(true));
        }
        const std::string what =
            "seed " + std::to_string(seed) + " " + std::string(to_string(dtype));
        Tensor ye = f(xe), yc = c(xc)[0];
        // The sum that ends the program is folded into the fused loop, which adds the eager
        // reduction's chunks in its order: the same bits in float64 too.
        expect_same(yc, ye, what + ": value");
        const std::vector<Tensor> ge = autograd::grad({ye}, xe, {}, {}, false, true);
        const std::vector<Tensor> gc = autograd::grad({yc}, xc, {}, {}, false, true);
        for (std::size_t i = 0; i < ge.size(); ++i) {
          ASSERT_EQ(gc[i].defined(), ge[i].defined());
          if (ge[i].defined()) expect_same(gc[i], ge[i], what + ": gradient " + std::to_string(i));
        }
      }
      EXPECT_GT(c.plan().fused_away, 0) << "seed " << seed;
      const std::string dump = c.dump();
      for (std::size_t at = dump.find(", then "); at != std::string::npos;
           at = dump.find(", then ", at + 1))
        ++merged;
    }
  }
  EXPECT_GT(merged, 20);  // epilogues (Note [Epilogues]) ran in these programs
}

// Casts between float32 and the 16-bit floats fuse, and so do ops on 16-bit values: a group
// computes in float32 and rounds each 16-bit result as that op's kernel does (Note [Fusing 16-bit
// values and casts]), so values and gradients equal eager code bit for bit.
TEST(Fusion, RandomProgramsWithCastsAnd16BitValuesEqualEagerBitwise) {
  int fused_casts = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Generator gen(seed);
    auto leaf = [&](const Shape& s) { return randn(s, DType::Float32, &gen).requires_grad_(true); };
    std::vector<Tensor> in = {leaf({37, 70}), leaf({}), leaf({70}), leaf({37, 1})};
    const RandomProgram f{seed, true};
    CompiledFunction c =
        compile([f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; });
    std::vector<Tensor> xe, xc;
    for (const Tensor& x : in) {
      xe.push_back(x.detach().requires_grad_(true));
      xc.push_back(x.detach().requires_grad_(true));
    }
    const std::string what = "seed " + std::to_string(seed);
    Tensor ye = f(xe), yc = c(xc)[0];
    expect_same(yc, ye, what + ": value");
    const std::vector<Tensor> ge = autograd::grad({ye}, xe, {}, {}, false, true);
    const std::vector<Tensor> gc = autograd::grad({yc}, xc, {}, {}, false, true);
    for (std::size_t i = 0; i < ge.size(); ++i) {
      ASSERT_EQ(gc[i].defined(), ge[i].defined());
      if (ge[i].defined()) expect_same(gc[i], ge[i], what + ": gradient " + std::to_string(i));
    }
    const std::string dump = c.dump();
    for (std::size_t at = dump.find("fused["); at != std::string::npos;
         at = dump.find("fused[", at + 1))
      if (dump.substr(at, dump.find(']', at) - at).find("to") != std::string::npos) ++fused_casts;
  }
  EXPECT_GT(fused_casts, 10);
}

// An autocast-style chain: bfloat16 casts, a bfloat16 product's pointwise epilogue and the cast
// back run as one loop that writes only its float32 result. (The bias row's cast has its own
// shape, so it runs before the loop, which reads its bfloat16 result.)
TEST(Fusion, ACastChainRunsInOneLoopWithoutIntermediateBuffers) {
  auto f = [](const std::vector<Tensor>& in) {
    const Tensor h = in[0].to(DType::BFloat16) * in[1].to(DType::BFloat16);
    return std::vector<Tensor>{(gelu(h + 1.0).to(DType::Float32) * 0.5)};
  };
  const Tensor x = randn({64, 512}), b = randn({512});
  CompiledFunction c = compile(f);
  c({x, b});
  const uint64_t before = memory_stats().allocations;
  const Tensor got = c({x, b})[0];
  EXPECT_EQ(memory_stats().allocations - before, 2u) << c.dump();  // the row's cast, the result
  expect_same(got, f({x, b})[0], "value");
  EXPECT_NE(c.dump().find("fused[to, mul, add, gelu, to, mul]"), std::string::npos) << c.dump();
}

// A two-layer MLP under bfloat16 autocast, compiled: the casts autocast records fuse with the
// 16-bit epilogues, and the backward recomputes the weights' casts; value and every gradient
// equal eager code bit for bit.
TEST(Fusion, AnAutocastMlpCompiledEqualsEagerBitwise) {
  Generator gen(21);
  auto param = [&](const Shape& s) {
    return (randn(s, DType::Float32, &gen) * 0.1).requires_grad_(true);
  };
  const Tensor w1 = param({256, 128}), b1 = param({256}), w2 = param({10, 256}), b2 = param({10});
  const Tensor x = randn({64, 128}, DType::Float32, &gen);
  const Tensor target = randint(0, 10, {64}, &gen);
  auto f = [&](const std::vector<Tensor>& in) {
    Autocast amp(DType::BFloat16);
    const Tensor h = gelu(linear(in[0], w1, b1)) * 0.5 + 0.25;
    return std::vector<Tensor>{cross_entropy(linear(h, w2, b2), target)};
  };
  CompiledFunction c = compile(f);
  c({x});  // traced
  const Tensor got = c({x})[0];
  const auto gc = autograd::grad({got}, {w1, b1, w2, b2});
  const Tensor want = f({x})[0];
  const auto ge = autograd::grad({want}, {w1, b1, w2, b2});
  expect_same(got, want, "loss");
  for (std::size_t i = 0; i < ge.size(); ++i)
    expect_same(gc[i], ge[i], "gradient " + std::to_string(i));
  const std::string dump = c.dump();
  EXPECT_NE(dump.find("fused["), std::string::npos) << dump;
}

TEST(Fusion, StridedOperandsAgreeWithinAFewUlps) {
  // Where eager code takes a strided loop (a transposed argument; gelu's gradient of a
  // broadcast cotangent) it uses the scalar functions, and the fused group its vectorised
  // ones on the gathered block: transcendental kinds then agree to a few ulps, not bits.
  auto f = [](const Tensor& x) { return (gelu(tanh(exp(x * 0.3) + x)) * 2.0).sum(); };
  CompiledFunction c = compile(f);
  Tensor x = randn({50, 40}).t().requires_grad_(true);
  Tensor xe = x.detach().requires_grad_(true);
  Tensor got = c(x), want = f(xe);
  EXPECT_LE(std::abs(got.item<float>() - want.item<float>()), 1e-6f * std::abs(want.item<float>()));
  const Tensor gc = autograd::grad({got}, {x})[0], ge = autograd::grad({want}, {xe})[0];
  EXPECT_LE((gc - ge).abs().max().item<float>(), 4 * 1.2e-7f * ge.abs().max().item<float>());
  EXPECT_GT(c.plan().fused_away, 0);
}

TEST(Fusion, AFusedChainMakesNoIntermediateBuffers) {
  auto f = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 10; ++i) y = tanh(y * 0.9 + 0.1);
    return y;
  };
  Tensor x = randn({4096});
  CompiledFunction fused = compile(f);
  CompileOptions off;
  off.fuse_pointwise = false;
  CompiledFunction unfused = compile(f, off);
  fused(x);
  unfused(x);
  auto allocations = [&](const CompiledFunction& c) {
    const uint64_t before = memory_stats().allocations;
    Tensor y = c(x);
    return memory_stats().allocations - before;
  };
  EXPECT_EQ(allocations(fused), 1u);     // the result
  EXPECT_EQ(allocations(unfused), 30u);  // every op's
  expect_same(fused(x), f(x), "value");
  EXPECT_NE(fused.dump().find("fused[mul, add, tanh, mul, add, tanh"), std::string::npos);
  EXPECT_EQ(fused.plan().fused_away, 29);
}

// A fused node fetches its instructions' vectorised kernels once; pinning another instruction
// set must not leave it running the old ones. tanh rounds some values differently with and
// without FMA, so each target's compiled result must be that target's eager result, and some
// two targets must disagree (else this test could not see stale kernels).
TEST(Fusion, AFusedLoopRunsTheKernelsOfThePinnedInstructionSet) {
  auto f = [](const Tensor& x) { return tanh(x * 0.7 + 0.1) * x; };
  Generator gen(4);
  const Tensor x = randn({4096}, DType::Float32, &gen) * 3.0;
  CompiledFunction fused = compile(f);
  fused(x);  // traced and fused on the best instruction set
  const std::vector<std::string> targets = kernels::simd_targets();
  struct Unpin {  // the best instruction set again, whatever happens below
    ~Unpin() { kernels::simd_pin_target_for_test(-1); }
  } unpin;
  std::vector<std::vector<float>> results;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    kernels::simd_pin_target_for_test(static_cast<int>(t));
    SCOPED_TRACE(targets[t]);
    const std::vector<float> got = fused(x).to_vector<float>(), want = f(x).to_vector<float>();
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    results.push_back(got);
  }
  EXPECT_EQ(fused.stats().traces, 1);
  // With FMA (AVX2, AVX-512) and without (SSE4 and below: every x86-64 has those).
  const bool fma_and_not = std::find_if(targets.begin(), targets.end(), [](const std::string& t) {
                             return t == "AVX2" || t == "AVX3";
                           }) != targets.end();
  bool some_differ = false;
  for (const std::vector<float>& r : results) some_differ = some_differ || r != results[0];
  if (fma_and_not) {
    EXPECT_TRUE(some_differ);
  }
}

// A mul or add by a constant that alone reads the value before it runs in that value's pass
// (an epilogue); one whose operand is read again runs in the pass of the add or multiply that
// reads its result (a prologue) (Note [Epilogues] in merge_scalar_steps.cpp). Values and
// gradients equal eager code bit for bit.
TEST(Fusion, AMulOrAddByAConstantRunsInTheNextOrPreviousPass) {
  auto f = [](const Tensor& x) {
    const Tensor cube = x * x * 3.0;  // the product alone reads x * x: an epilogue
    const Tensor e = exp(x);
    const Tensor twice = e * 2.0 + e;  // exp's value is read twice: a prologue of the add
    return ((cube + twice) + 1.0).sum();
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(to_string(dtype));
    const Tensor x = (randn({300, 70}, dtype) * 0.5).requires_grad_(true);
    CompiledFunction c = compile(f);
    const Tensor got = c(x), want = f(x);
    expect_same(got, want, "value");
    expect_same(autograd::grad({got}, {x})[0], autograd::grad({want}, {x})[0], "gradient");
    const std::string dump = c.dump();
    EXPECT_NE(dump.find(" r0, r0, then mul_scalar[3]\n"), std::string::npos) << dump;
    EXPECT_NE(dump.find(" = exp r0\n"), std::string::npos) << dump;
    EXPECT_NE(dump.find(" = add (r2 * 2), r2\n"), std::string::npos) << dump;
    EXPECT_NE(dump.find(", then add_scalar[1]\n"), std::string::npos) << dump;
    EXPECT_EQ(dump.find("mul_scalar[2]"), std::string::npos) << dump;  // no pass of its own
  }
}

// Hand-made programs check the guards that fusion's own register allocation never needs: an
// epilogue moves the instruction's write to the step's register, a prologue makes the reader
// read the step's operand, so neither may happen when another instruction in between reads
// the one or overwrites the other.
TEST(Fusion, AScalarStepIsNotMergedOverAnotherUseOfTheRegistersItMoves) {
  using detail::PointwiseKernel;
  using kernels::Binary;
  using kernels::ScalarStep;
  using kernels::Unary;
  auto program = [](std::vector<detail::Instr> code, int output) {
    detail::Program p;
    p.dtype = DType::Float32;
    p.shape = Shape{8};
    p.num_registers = 5;
    p.input_register = {0};
    p.input_dtype = {DType::Float32};
    p.code = std::move(code);
    p.output_register = {output};
    p.output_dtype = {DType::Float32};
    return p;
  };
  const PointwiseKernel exp_k = PointwiseKernel::of(Unary::Exp),
                        neg_k = PointwiseKernel::of(Unary::Neg),
                        twice = PointwiseKernel::of(Unary::MulScalar, 2.0),
                        add_k = PointwiseKernel::of(Binary::Add),
                        sub_k = PointwiseKernel::of(Binary::Sub);
  // An epilogue: exp's only reader is the step, which writes r2; the sub between reads r2's
  // old value (the neg), and r2 + (that) is a sub, which takes no prologue.
  detail::Program reads_r2 = program(
      {{neg_k, 2, 0, -1}, {exp_k, 1, 0, -1}, {add_k, 3, 2, 0}, {twice, 2, 1, -1}, {sub_k, 3, 3, 2}},
      3);
  EXPECT_EQ(detail::merge_scalar_steps(reads_r2), 0);
  EXPECT_EQ(reads_r2.code.size(), 5u);
  detail::Program epilogue = reads_r2;
  epilogue.code[2].src0 = 0;  // nothing reads r2's old value now
  ASSERT_EQ(detail::merge_scalar_steps(epilogue), 1);
  ASSERT_EQ(epilogue.code.size(), 4u);
  EXPECT_EQ(epilogue.code[1].dst, 2);  // exp writes the step's register
  EXPECT_EQ(epilogue.code[1].epilogue, ScalarStep::MulScalar);
  EXPECT_EQ(epilogue.code[1].epilogue_value, 2.0);
  // A prologue: exp's value is read twice, so the step stays out of exp's pass; its reader
  // (an add) would read r1 instead of r2, but the neg between overwrites r1.
  detail::Program overwrites_r1 = program(
      {{exp_k, 1, 0, -1}, {twice, 2, 1, -1}, {add_k, 3, 1, 0}, {neg_k, 1, 0, -1}, {add_k, 3, 3, 2}},
      3);
  EXPECT_EQ(detail::merge_scalar_steps(overwrites_r1), 0);
  detail::Program prologue = overwrites_r1;
  prologue.code[3].dst = 4;  // the neg writes elsewhere now
  ASSERT_EQ(detail::merge_scalar_steps(prologue), 1);
  ASSERT_EQ(prologue.code.size(), 4u);
  const detail::Instr& user = prologue.code[3];
  EXPECT_EQ(user.prologue, ScalarStep::MulScalar);
  EXPECT_EQ(user.prologue_operand, 1);
  EXPECT_EQ(user.src1, 1);  // reads exp's value, times 2
  EXPECT_EQ(user.prologue_value, 2.0);
  // A step that has taken an epilogue itself is two steps: it stays (leaky_relu's backward,
  // mask * 0.99 + 0.01, read by a multiply).
  detail::Program two_steps = program({{PointwiseKernel::of(Unary::MulScalar, 0.99), 2, 0, -1},
                                       {PointwiseKernel::of(Unary::AddScalar, 0.01), 2, 2, -1},
                                       {PointwiseKernel::of(Binary::Mul), 3, 0, 2}},
                                      3);
  ASSERT_EQ(detail::merge_scalar_steps(two_steps), 1);
  ASSERT_EQ(two_steps.code.size(), 2u);
  EXPECT_EQ(two_steps.code[0].epilogue, ScalarStep::AddScalar);
  EXPECT_EQ(two_steps.code[1].prologue, ScalarStep::None);
}

TEST(Fusion, WhereJoinsTheFusedLoopWithItsBoolCondition) {
  // A leaky relu written by hand: the comparison makes a bool tensor (not fused), where reads it
  // inside the group, and the backward's two wheres (where(c, g, 0), where(c, 0, g)) fuse too.
  auto f = [](const Tensor& x) {
    const Tensor y = x * 1.5 + 0.25;
    return (where(gt(y, 0.0), y, y * 0.01) * 2.0).sum();
  };
  Tensor x = randn({64, 33}, DType::Float64).requires_grad_(true);
  CompiledFunction fused = compile(f);
  const Tensor got = fused(x);
  // The forward's groups end at the comparison, which reads y; the backward is one group.
  const std::string dump = fused.dump();
  EXPECT_NE(dump.find("fused[where, mul, sum]"), std::string::npos) << dump;
  EXPECT_NE(dump.find("fused[mul, where, where, mul, add, mul]"), std::string::npos) << dump;
  // (the fused sum adds in its own order: a few ulps)
  const double want = f(x).item<double>();
  EXPECT_NEAR(got.item<double>(), want, 1e-13 * std::abs(want));
  const Tensor g_got = autograd::grad({fused(x)}, {x})[0];
  const Tensor g_want = autograd::grad({f(x)}, {x})[0];
  expect_same(g_got, g_want, "gradient");
  // A condition broadcast into the group (a row of bools) and a scalar branch.
  auto h = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(in[1], tanh(in[0]), 0.5) + in[0]};
  };
  const Tensor a = randn({5, 7});
  const Tensor mask = gt(randn({7}), 0.0);
  CompiledFunction hc = compile(h);
  expect_same(hc({a, mask})[0], h({a, mask})[0], "broadcast condition");
  EXPECT_NE(hc.dump().find("fused["), std::string::npos);
}

TEST(Fusion, ASumEndsTheFusedLoopWithoutWritingWhatItSums) {
  auto f = [](const Tensor& x) { return (tanh(x * 0.5) * x + 1.0).sum(); };
  CompiledFunction c = compile(f);
  for (const Shape& shape : {Shape{100000}, Shape{3, 7}, Shape{}, Shape{0, 4}}) {
    Tensor x = randn(shape);
    c(x);
    const uint64_t before = memory_stats().allocations;
    Tensor got = c(x);
    EXPECT_EQ(memory_stats().allocations - before, 1u);  // the 0-d result alone
    const Tensor want = f(x);
    // float32 values summed in double: the blocks' order changes no float32 result here.
    expect_same(got, want, "sum");
    EXPECT_NE(c.dump().find("sum]"), std::string::npos) << c.dump();
  }
}

// A sum over the trailing dims (rows of 128 elements or more) ends the loop too: each row is
// summed in element order in one double, as the eager reduction sums a contiguous row, so values
// equal eager code bit for bit in float32 and float64.
// A reduction f({x, w}) compiled, on x of `shape` and a row w (random, requiring grad).
struct CompiledReduction {
  CompiledFunction c;
  Tensor x, w;
};

// Compiles f, whose one result is a reduction, and expects its value and the gradients of
// (result * r).sum() with respect to x and w to be eager code's bits.
CompiledReduction expect_reduction_as_eager(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f, const Shape& shape,
    DType dtype, uint64_t seed) {
  const std::string what = std::string(to_string(dtype)) + " " + to_string(shape);
  Generator gen(seed);
  const Tensor x = randn(shape, dtype, &gen).requires_grad_(true);
  const Tensor w = randn({shape.back()}, dtype, &gen).requires_grad_(true);
  CompiledFunction c = compile(f);
  const Tensor got = c({x, w})[0];
  const Tensor xe = x.detach().requires_grad_(true), we = w.detach().requires_grad_(true);
  const Tensor want = f({xe, we})[0];
  expect_same(got, want, what + ": value");
  const Tensor r = randn(want.shape(), want.dtype(), &gen);
  const auto gc = autograd::grad({(got * r).sum()}, {x, w});
  const auto ge = autograd::grad({(want * r).sum()}, {xe, we});
  expect_same(gc[0], ge[0], what + ": gradient of x");
  expect_same(gc[1], ge[1], what + ": gradient of w");
  return {std::move(c), x, w};
}

TEST(Fusion, ARowSumEndsTheFusedLoopAndEqualsEagerBitwise) {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  for (DType dtype : {DType::Float32, DType::Float64})
    for (const Case& k : {Case{{37, 300}, {-1}, false}, Case{{37, 300}, {1}, true},
                          Case{{4, 5, 200}, {1, 2}, false}, Case{{3, 4, 129}, {2}, true},
                          Case{{0, 200}, {1}, false}}) {
      auto f = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{(tanh(in[0] * in[1] + 1.0) * in[0]).sum(k.dims, k.keepdim)};
      };
      auto [c, x, w] = expect_reduction_as_eager(f, k.shape, dtype, 7);
      EXPECT_NE(c.dump().find("mul, add, tanh, mul, sum]"), std::string::npos) << c.dump();
      // Without grad the loop writes only the sums.
      NoGradGuard no_grad;
      c({x, w});
      const uint64_t before = memory_stats().allocations;
      c({x, w});
      EXPECT_EQ(memory_stats().allocations - before, 1u) << to_string(k.shape);
    }
  // Rows shorter than 128 elements leave the sum on its own, and a mean is a fused sum and a
  // division.
  auto short_rows = [](const Tensor& x) { return (x * x + 1.0).sum({1}); };
  CompiledFunction s = compile(short_rows);
  const Tensor x = randn({50, 20});
  expect_same(s(x), short_rows(x), "short rows");
  EXPECT_EQ(s.dump().find("sum]"), std::string::npos) << s.dump();
  auto mean_rows = [](const Tensor& x) { return (x * x + 1.0).mean({1}); };
  CompiledFunction m = compile(mean_rows);
  const Tensor y = randn({50, 200});
  expect_same(m(y), mean_rows(y), "mean");
  EXPECT_NE(m.dump().find("fused[mul, add, sum]"), std::string::npos) << m.dump();
}

// A sum over leading dims (a bias gradient) ends the loop too, each column summed in one double
// per chunk of 256 rows, row by row, then the chunks in order, as the eager reduction does: the
// same bits. One chunk runs in stripes of columns over threads (512 columns leave a short last
// one at 1000); more chunks run over threads, as blocks of whole rows (900 rows of 130) or of
// pieces of a row (2100 columns).
TEST(Fusion, AColumnSumEndsTheFusedLoopAndEqualsEagerBitwise) {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  for (DType dtype : {DType::Float32, DType::Float64})
    for (const Case& k :
         {Case{{37, 300}, {0}}, Case{{5, 7, 1000}, {0, 1}}, Case{{3, 2, 20, 10}, {0, 1}},
          Case{{0, 300}, {0}}, Case{{600, 2100}, {0}}, Case{{3, 300, 130}, {0, 1}}}) {
      auto f = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{(tanh(in[0] * 0.5 + in[1]) * in[0]).sum(k.dims)};
      };
      const CompiledFunction c = expect_reduction_as_eager(f, k.shape, dtype, 8).c;
      EXPECT_NE(c.dump().find(" down columns of "), std::string::npos) << c.dump();
    }
}

// A value that is written and also summed (an exp both divided and summed in a softmax written
// with primitives; a layer's gradient that its bias's gradient sums) is written and summed in
// the same pass. The network below has both; its loss and gradients equal eager's bit for bit.
TEST(Fusion, AWrittenValueIsSummedInTheSamePass) {
  auto f = [](const std::vector<Tensor>& v) {
    const Tensor h = tanh(matmul(v[0], v[1]) + v[2]);
    const Tensor e = exp(h - h.amax({-1}, true));
    const Tensor y = e / e.sum({-1}, true);
    return std::vector<Tensor>{(y * y).sum()};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Generator gen(9);
    std::vector<Tensor> in = {randn({64, 300}, dtype, &gen), randn({300, 200}, dtype, &gen) * 0.1,
                              randn({200}, dtype, &gen)};
    std::vector<Tensor> ine;
    for (Tensor& t : in) {
      t.requires_grad_(true);
      ine.push_back(t.detach().requires_grad_(true));
    }
    CompiledFunction c = compile(f);
    const Tensor got = c(in)[0], want = f(ine)[0];
    expect_same(got, want, "loss");
    const auto gc = autograd::grad({got}, in), ge = autograd::grad({want}, ine);
    for (std::size_t i = 0; i < in.size(); ++i)
      expect_same(gc[i], ge[i], "gradient " + std::to_string(i));
    const std::string dump = c.dump();
    // exp's value is written (the division reads it) and summed over rows; the bias gradient
    // sums the tanh backward's value, which the products read too.
    EXPECT_NE(dump.find("-> output 0 " + std::string(to_string(dtype)) +
                        "[64, 200]\n        sum r3 over rows of 200 -> output 1"),
              std::string::npos)
        << dump;
    EXPECT_NE(dump.find("max r3 over rows of 200 -> output 1"), std::string::npos) << dump;
    EXPECT_NE(dump.find("sum r6 down columns of 64 -> output 1 " + std::string(to_string(dtype)) +
                        "[200]"),
              std::string::npos)
        << dump;
  }
}

// A max or min (amax, amin, max(), min()) ends the loop too, over every dim, rows or columns,
// with eager code's rules bit for bit: the first NaN met stays (payload and sign included), and
// of -0 and +0 the first met stays, also when a full max or min, or one down columns of 700
// rows, runs in chunks over threads.
TEST(Fusion, AMaxOrMinEndsTheFusedLoopWithEagersNaNAndZeroRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Generator gen(10);
  std::vector<float> v = randn({700, 300}, DType::Float32, &gen).to_vector<float>();
  v[3 * 300 + 7] = -nan, v[3 * 300 + 9] = nan;                          // row 3: a NaN of each sign
  for (int j = 0; j < 300; ++j) v[5 * 300 + j] = j % 2 ? 0.0f : -0.0f;  // row 5: -0 first
  for (int i = 0; i < 700; ++i) v[i * 300 + 20] = i % 3 ? 0.0f : -0.0f;  // column 20: -0 first
  v[400 * 300 + 30] = nan, v[600 * 300 + 30] = -nan;  // column 30: NaNs in later chunks
  v[650 * 300 + 1] = -nan;                            // a late NaN for the full max
  const Tensor x = tensor(v, Shape{700, 300});
  const Tensor w = ones({300});
  auto bits = [](const Tensor& t) {
    const std::vector<float> f = t.to_vector<float>();
    std::vector<uint32_t> b(f.size());
    std::memcpy(b.data(), f.data(), f.size() * sizeof(float));
    return b;
  };
  using Fn = std::function<Tensor(const Tensor&)>;
  struct Case {
    std::string name;
    Shape shape;  // x viewed as
    Fn reduce;
  };
  const std::vector<Case> cases = {
      {"amax rows", {700, 300}, [](const Tensor& y) { return y.amax({-1}, true); }},
      {"amin rows", {700, 300}, [](const Tensor& y) { return y.amin({1}); }},
      {"amax columns", {700, 300}, [](const Tensor& y) { return y.amax({0}); }},
      {"amin columns of 7 rows", {7, 100, 300}, [](const Tensor& y) { return y.amin({0}, true); }},
      {"max", {700, 300}, [](const Tensor& y) { return y.max(); }},
      {"min", {700, 300}, [](const Tensor& y) { return y.min(); }}};
  for (const auto& [name, shape, reduce] : cases) {
    auto f = [&](const std::vector<Tensor>& in) {
      // (two ops, so that they make a group)
      return std::vector<Tensor>{reduce(in[0].reshape(shape) * in[1] * 1.0)};
    };
    CompiledFunction c = compile(f);
    const Tensor got = c({x, w})[0], want = f({x, w})[0];
    EXPECT_EQ(bits(got), bits(want)) << name;
    const std::string tag = name.find("max") != std::string::npos ? "max r" : "min r";
    EXPECT_NE(c.dump().find(tag), std::string::npos) << name << c.dump();
    // And with a row of ties and no NaN, the gradients (split among ties) as eager's.
    const Tensor xs = where(eq(x, x), x, 0.0).requires_grad_(true);
    const Tensor xe = xs.detach().requires_grad_(true);
    const Tensor gc = autograd::grad({c({xs, w})[0].sum()}, {xs})[0];
    const Tensor ge = autograd::grad({f({xe, w})[0].sum()}, {xe})[0];
    expect_same(gc, ge, name + ": gradient");
  }
  // The first NaN's bits, and -0 from the row that starts with it.
  const Tensor rows = compile([](const Tensor& y) { return (y * 1.0).amax({-1}); })(x);
  const std::vector<uint32_t> r = bits(rows);
  EXPECT_EQ(r[3], bits(tensor(std::vector<float>{-nan}))[0]);
  EXPECT_EQ(r[5], 0x80000000u);
}

// Under vmap or jvp a fused node runs its members one by one through the stack, the reductions
// that end it and its written values included: the same values as eager code.
TEST(Fusion, FusedReductionsComposeWithVmapAndJvp) {
  auto f = [](const Tensor& x) {
    const Tensor h = tanh(x * 0.5 + 1.0);
    const Tensor e = exp(h - h.amax({-1}, true));
    return (e / e.sum({-1}, true)).sum({0}) * 2.0;
  };
  CompiledFunction c = compile(f);
  Generator gen(13);
  const Tensor x = randn({4, 200}, DType::Float64, &gen), t = randn({4, 200}, DType::Float64, &gen);
  expect_same(c(x), f(x), "value");
  EXPECT_NE(c.dump().find("max r2 over rows of 200"), std::string::npos) << c.dump();
  const Tensor xs = randn({3, 4, 200}, DType::Float64, &gen);
  expect_same(vmap([&](const Tensor& v) { return c(v); })(xs), vmap(f)(xs), "vmap");
  const auto jc = jvp([&](const Tensor& v) { return c(v); }, x, t);
  const auto je = jvp(f, x, t);
  expect_same(jc.outputs, je.outputs, "jvp value");
  expect_same(jc.tangents, je.tangents, "jvp tangent");
}

TEST(Fusion, TheBackwardRecomputesPointwiseValuesInsteadOfKeepingThem) {
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = in[0];
    for (int i = 0; i < 5; ++i) y = tanh(y * 0.9 + 0.1);
    return std::vector<Tensor>{y.sum()};
  };
  Tensor x = randn({1000}).requires_grad_(true);
  CompiledFunction recompute = compile(f);
  CompileOptions keep;
  keep.recompute_pointwise = false;
  CompiledFunction saving = compile(f, keep);
  Tensor xe = x.detach().requires_grad_(true);
  auto g1 = autograd::grad({recompute({x})[0]}, {x});
  auto g2 = autograd::grad({saving({x})[0]}, {x});
  auto ge = autograd::grad({f({xe})[0]}, {xe});
  expect_same(g1[0], ge[0], "recomputed");
  expect_same(g2[0], ge[0], "kept");
  EXPECT_EQ(recompute.plan().saved_bytes, 0u);  // only the argument, which the node holds
  EXPECT_EQ(saving.plan().saved_bytes, 5 * detail::block_bytes(1000 * 4));  // each tanh
  EXPECT_EQ(recompute.plan().recomputed, 15);
}

TEST(Fusion, ThePlannedPeakIsWhatTheAllocatorMeasures) {
  for (bool fuse : {true, false}) {
    CompileOptions o;
    o.fuse_pointwise = fuse;
    auto f = [](const std::vector<Tensor>& in) {
      Tensor h = in[0] * in[1] + 1.0;  // [300, 200] by a row
      Tensor a = sigmoid(h), b = tanh(h);
      Tensor y = (a * b + exp(h * 0.01)).sum({1}, true);  // [300, 1]
      return std::vector<Tensor>{y * y, (y + 1.0).sum()};
    };
    CompiledFunction c = compile(f, o);
    Tensor x = randn({300, 200}).requires_grad_(true), w = randn({200}).requires_grad_(true);
    c({x, w});  // traced
    const std::size_t base = memory_stats().current_bytes;
    reset_peak_memory_stats();
    std::vector<Tensor> out = c({x, w});
    EXPECT_EQ(memory_stats().peak_bytes - base, c.plan().forward_peak_bytes) << "fuse " << fuse;
    const std::size_t before_backward = memory_stats().current_bytes;
    reset_peak_memory_stats();
    auto g = autograd::grad({(out[0].sum() + out[1])}, {x, w});
    // The engine's own seeds and sums of the two outputs' gradients come on top.
    const std::size_t measured = memory_stats().peak_bytes - before_backward;
    EXPECT_GE(measured, c.plan().backward_peak_bytes) << "fuse " << fuse;
    EXPECT_LE(measured, c.plan().backward_peak_bytes + 4 * 1024) << "fuse " << fuse;
  }
}

}  // namespace
