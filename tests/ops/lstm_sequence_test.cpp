// The whole-sequence LSTM op (adjoint/rnn_ops.h) against its oracle, the unrolled loop of
// steps written with ops (nn::detail::lstm_gates on xp[t] + h W_hhᵀ): every step's h and c and
// the gradients of all four inputs, forward and reverse, in float32 and float64 on the
// benchmark's sizes and odd ones; the same on several threads; 16-bit inputs and autocast; and
// the errors. (Finite differences, vmap, compile, export and meta: the registry's
// samples_rnn_sequence.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/rnn_ops.h"
#include "adjoint/threading.h"
#include "nn/rnn_gates.h"

namespace adjoint {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.detach().contiguous().to(DType::Float64).to_vector<double>();
}

// max |got - want| / max |want|: the error on the result's scale.
double max_scaled(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<double> g = values(got), w = values(want);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// The oracle: the steps one by one with ops.
LSTMSequenceOutput unrolled(const Tensor& xp, const Tensor& w, const Tensor& h0, const Tensor& c0,
                            bool reverse) {
  const int64_t steps = xp.size(0);
  std::vector<Tensor> hs(static_cast<std::size_t>(steps)), cs(hs.size());
  Tensor h = h0, c = c0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const nn::LSTMState next = nn::detail::lstm_gates(xp.select(0, t), matmul(h, w.t()), c);
    h = next.h;
    c = next.c;
    hs[static_cast<std::size_t>(t)] = h;
    cs[static_cast<std::size_t>(t)] = c;
  }
  return {stack(hs, 0), stack(cs, 0)};
}

struct Case {
  int64_t steps, batch, hidden;
};

struct Inputs {
  Tensor xp, w, h0, c0;
  Inputs(const Case& k, DType dt, uint64_t seed) {
    Generator gen(seed);
    const int64_t g = 4 * k.hidden;
    xp = randn({k.steps, k.batch, g}, dt, &gen).requires_grad_(true);
    // U(-1/sqrt(H), 1/sqrt(H)) as nn::LSTM draws its weights.
    const double r = 1.0 / std::sqrt(static_cast<double>(k.hidden));
    w = ((rand({g, k.hidden}, dt, &gen) * 2.0 - 1.0) * r).detach().requires_grad_(true);
    h0 = randn({k.batch, k.hidden}, dt, &gen).requires_grad_(true);
    c0 = randn({k.batch, k.hidden}, dt, &gen).requires_grad_(true);
  }
};

// Every step's h and c, and the gradients of a loss on both (all four inputs).
std::vector<Tensor> results(const Inputs& in, const LSTMSequenceOutput& s, uint64_t seed) {
  Generator gen(seed);
  const Tensor uh = randn(s.h.shape(), s.h.dtype(), &gen),
               uc = randn(s.c.shape(), s.c.dtype(), &gen);
  const Tensor loss = (s.h * uh).sum() + (s.c * uc).sum();
  std::vector<Tensor> out = autograd::grad({loss}, {in.xp, in.w, in.h0, in.c0});
  out.insert(out.begin(), {s.h, s.c});
  return out;
}

// The fused kernel's product adds h W_hhᵀ onto xp where the oracle rounds the product first,
// and its vectorised nonlinearities differ from the composite's by an ulp or two; over T steps
// the recurrence carries those differences on, so the bound is a few hundred ulps for float32.
double tolerance(DType dt) { return dt == DType::Float64 ? 1e-12 : 2e-5; }

TEST(LstmSequence, MatchesTheUnrolledLoopForwardAndBackward) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const Case& k : {Case{64, 32, 512}, Case{5, 3, 7}, Case{1, 1, 1}, Case{9, 4, 33}}) {
      if (dt == DType::Float64 && k.hidden == 512) continue;  // float32 covers the big case
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(std::string(to_string(dt)) + " T " + std::to_string(k.steps) + " B " +
                     std::to_string(k.batch) + " H " + std::to_string(k.hidden) +
                     (reverse ? " reverse" : ""));
        const Inputs in(k, dt, 7);
        const std::vector<Tensor> got =
            results(in, lstm_sequence(in.xp, in.w, in.h0, in.c0, reverse), 8);
        const std::vector<Tensor> want =
            results(in, unrolled(in.xp, in.w, in.h0, in.c0, reverse), 8);
        for (std::size_t i = 0; i < got.size(); ++i)
          EXPECT_LE(max_scaled(got[i], want[i]), tolerance(dt)) << "result " << i;
      }
    }
  }
}

// The kernel splits each step's hidden units over the pool: one thread and two agree with the
// oracle alike (each element is one product over all of H, whichever piece computes it).
TEST(LstmSequence, SameResultOnOneThreadAndTwo) {
  const Inputs in(Case{6, 8, 96}, DType::Float64, 11);
  const int before = get_num_threads();
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    runs.push_back(results(in, lstm_sequence(in.xp, in.w, in.h0, in.c0), 12));
  }
  set_num_threads(before);
  const std::vector<Tensor> want = results(in, unrolled(in.xp, in.w, in.h0, in.c0, false), 12);
  for (const std::vector<Tensor>& run : runs)
    for (std::size_t i = 0; i < run.size(); ++i)
      EXPECT_LE(max_scaled(run[i], want[i]), tolerance(DType::Float64)) << "result " << i;
}

TEST(LstmSequence, SixteenBitInputsComputeInFloat32AndAutocastRunsItInFloat32) {
  const Inputs in(Case{4, 3, 8}, DType::Float32, 13);
  const Tensor xb = in.xp.detach().to(DType::BFloat16), wb = in.w.detach().to(DType::BFloat16),
               hb = in.h0.detach().to(DType::BFloat16), cb = in.c0.detach().to(DType::BFloat16);
  const LSTMSequenceOutput got = lstm_sequence(xb, wb, hb, cb);
  EXPECT_EQ(got.h.dtype(), DType::BFloat16);
  // The float32 result on the same rounded inputs, rounded once.
  const LSTMSequenceOutput want = lstm_sequence(xb.to(DType::Float32), wb.to(DType::Float32),
                                                hb.to(DType::Float32), cb.to(DType::Float32));
  EXPECT_EQ(values(got.h), values(want.h.to(DType::BFloat16)));
  EXPECT_EQ(values(got.c), values(want.c.to(DType::BFloat16)));
  Autocast autocast(DType::BFloat16);
  const LSTMSequenceOutput cast = lstm_sequence(xb, in.w, in.h0, in.c0);
  EXPECT_EQ(cast.h.dtype(), DType::Float32);
  EXPECT_EQ(values(cast.h), values(lstm_sequence(xb.to(DType::Float32), in.w, in.h0, in.c0).h));
}

TEST(LstmSequence, ErrorsNameTheOpShapesAndDtypes) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor xp = zeros({3, 2, 8}), w = zeros({8, 2}), s = zeros({2, 2});
  const std::string width = message([&] { lstm_sequence(zeros({3, 2, 7}), w, s, s); });
  EXPECT_NE(width.find("lstm_sequence"), std::string::npos) << width;
  EXPECT_NE(width.find("[3, 2, 7]"), std::string::npos) << width;
  const std::string state = message([&] { lstm_sequence(xp, w, zeros({3, 2}), s); });
  EXPECT_NE(state.find("[3, 2]"), std::string::npos) << state;
  const std::string empty = message([&] { lstm_sequence(zeros({0, 2, 8}), w, s, s); });
  EXPECT_NE(empty.find("T, H >= 1"), std::string::npos) << empty;
  const std::string ints = message([&] { lstm_sequence(xp, w, s, zeros({2, 2}, DType::Int64)); });
  EXPECT_NE(ints.find("floating"), std::string::npos) << ints;
  EXPECT_NE(ints.find("int64"), std::string::npos) << ints;
  const std::string undefined = message([&] { lstm_sequence(xp, Tensor(), s, s); });
  EXPECT_NE(undefined.find("undefined"), std::string::npos) << undefined;
}

}  // namespace
}  // namespace adjoint
