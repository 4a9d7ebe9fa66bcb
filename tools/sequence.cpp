// adjoint-sequence: the sequence demo (docs/sequence.md). Trains a byte-level LSTM language model
// on the GPT demo's corpus and prints its loss and a sample; then tells the vanishing-gradient
// story: a tanh RNN of the same size trained on the same batches, and for both the norm of
// dL/dh_t against the distance from the loss on the same long sequences, before and after
// training (gradients.svg and grad_norms.csv), and the bytes each saves for backward per step.
//   adjoint-sequence [--data DIR|FILE] [--out DIR] [--steps 300] [--hidden 256] [--embed 64]
//                    [--layers 1] [--seq 64] [--batch 32] [--lr 3e-3] [--seed 0]
//                    [--grad-length 200] [--forget-bias 1] [--threads 0] [--tiny]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/data/text.h"
#include "adjoint/optim.h"
#include "char_rnn.h"
#include "svg_plot.h"

namespace {

using namespace adjoint;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string data = "/usr/share/common-licenses";
  std::string out = "sequence-out";
  int64_t steps = 300, seq = 64, batch = 32, log_every = 25, grad_length = 200;
  double lr = 3e-3;
  uint64_t seed = 0;
  int threads = 0;
  tools::CharRNNConfig model;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Trains `model` for flags.steps AdamW steps (gradient norm clipped at 1) on batches drawn from
// a generator seeded with the run's seed, so two models see the same batches. Returns the losses.
std::vector<double> train(tools::CharRNN& model, const data::ByteDataset& data, const Flags& f,
                          const char* label) {
  optim::AdamW opt(model.parameters(), {.lr = f.lr, .weight_decay = 0.01});
  Generator batches(f.seed + 1);
  std::vector<double> losses;
  const Clock::time_point t0 = Clock::now();
  for (int64_t step = 1; step <= f.steps; ++step) {
    const data::TextBatch b = data.batch(data::Split::Train, f.batch, f.seq, batches);
    opt.zero_grad();
    Tensor loss = model.loss(b.inputs, b.targets);
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    losses.push_back(loss.item<double>());
    if (step % f.log_every == 0 || step == f.steps) {
      const double s = seconds_since(t0);
      std::printf("%s step %lld/%lld  loss %.3f  (%.1fk chars/s, %.0f s)\n", label,
                  static_cast<long long>(step), static_cast<long long>(f.steps), losses.back(),
                  static_cast<double>(step * f.batch * f.seq) / s / 1000, s);
      std::fflush(stdout);
    }
  }
  return losses;
}

double validation_loss(tools::CharRNN& model, const data::ByteDataset& data, const Flags& f) {
  NoGradGuard no_grad;
  Generator g(f.seed + 2);
  double total = 0;
  constexpr int kBatches = 4;
  for (int i = 0; i < kBatches; ++i) {
    const data::TextBatch b = data.batch(data::Split::Validation, f.batch, f.seq, g);
    total += model.loss(b.inputs, b.targets).item<double>();
  }
  return total / kBatches;
}

// Bytes the recurrent layer saves for backward per time step: the slope between sequences of
// length T and 2T, which leaves out what does not grow with T.
double saved_bytes_per_step(tools::CharRNN& model, const data::ByteDataset& data, const Flags& f) {
  Generator g(f.seed + 3);
  const data::TextBatch a = data.batch(data::Split::Validation, f.batch, f.seq, g);
  const data::TextBatch b = data.batch(data::Split::Validation, f.batch, 2 * f.seq, g);
  const double sa = static_cast<double>(tools::saved_bytes_of_layer(model, a.inputs));
  const double sb = static_cast<double>(tools::saved_bytes_of_layer(model, b.inputs));
  return (sb - sa) / static_cast<double>(f.seq);
}

// One row per distance: the trained models' norms, then the untrained ones'.
void write_csv(const std::string& path, const std::vector<std::vector<double>>& columns) {
  std::ofstream out(path);
  out << "distance,rnn_grad_norm,lstm_grad_norm,rnn_init_grad_norm,lstm_init_grad_norm\n";
  char line[160];
  for (std::size_t d = 0; d < columns[0].size(); ++d) {
    std::snprintf(line, sizeof line, "%zu,%.6e,%.6e,%.6e,%.6e\n", d, columns[0][d], columns[1][d],
                  columns[2][d], columns[3][d]);
    out << line;
  }
  ADJOINT_CHECK(out.good(), IO, "adjoint-sequence", "cannot write ", path);
}

// gradient_norm_by_distance in float64, so that no norm underflows; the model is converted
// back to float32 after (exactly: float32 -> float64 -> float32 is the identity).
std::vector<double> norms_in_float64(tools::CharRNN& model, const data::TextBatch& b,
                                     int64_t length) {
  model.to(DType::Float64);
  std::vector<double> norms =
      tools::gradient_norm_by_distance(model, b.inputs, b.targets.select(1, length - 1));
  model.to(DType::Float32);
  return norms;
}

tools::Series log_series(const char* name, const std::vector<double>& norms, const char* color,
                         bool dashed = false) {
  tools::Series s;
  s.name = name;
  s.color = color;
  s.dashed = dashed;
  for (std::size_t d = 0; d < norms.size(); ++d) {
    s.x.push_back(static_cast<double>(d));
    s.y.push_back(std::log10(norms[d]));  // log10(0) = -inf is skipped by the plot
  }
  return s;
}

// How fast the norm falls far from the loss: decades lost per 10 steps over the second half of
// the distances (the first steps mix in the direct path from h_t to the loss).
double decades_per_10_steps(const std::vector<double>& norms) {
  const std::size_t far = norms.size() - 1, mid = far / 2;
  return 10 * (std::log10(norms[mid]) - std::log10(norms[far])) / static_cast<double>(far - mid);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"adjoint-sequence: a character LSTM, and vanishing gradients in a tanh RNN"};
  Flags f;
  bool tiny = false;
  app.add_option("--data", f.data, "a text file or a folder of them")->capture_default_str();
  app.add_option("--out", f.out, "output folder")->capture_default_str();
  app.add_option("--steps", f.steps, "training steps of each model")->capture_default_str();
  app.add_option("--hidden", f.model.hidden, "hidden size")->capture_default_str();
  app.add_option("--embed", f.model.embed, "byte embedding size")->capture_default_str();
  app.add_option("--layers", f.model.layers, "recurrent layers")->capture_default_str();
  app.add_option("--seq", f.seq, "training sequence length")->capture_default_str();
  app.add_option("--batch", f.batch, "sequences per step")->capture_default_str();
  app.add_option("--lr", f.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the weights and the batches")->capture_default_str();
  app.add_option("--log-every", f.log_every, "steps between loss lines")->capture_default_str();
  app.add_option("--grad-length", f.grad_length,
                 "length of the sequences the gradient norms are measured on")
      ->capture_default_str();
  app.add_option("--forget-bias", f.model.forget_bias,
                 "the LSTM's initial forget-gate bias (0: PyTorch's init)")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_flag("--tiny", tiny,
               "a seconds-long run with small sizes (for tests); flags given keep their value");
  CLI11_PARSE(app, argc, argv);
  try {
    if (tiny) {  // small values for the flags not given
      auto small = [&](const char* flag, int64_t& value, int64_t v) {
        if (app.count(flag) == 0) value = v;
      };
      small("--steps", f.steps, 15);
      small("--seq", f.seq, 16);
      small("--batch", f.batch, 8);
      small("--log-every", f.log_every, 5);
      small("--grad-length", f.grad_length, 60);
      small("--hidden", f.model.hidden, 32);
      small("--embed", f.model.embed, 16);
    }
    ADJOINT_CHECK(f.steps > 0 && f.seq > 0 && f.batch > 0 && f.grad_length > 1 && f.log_every > 0 &&
                      f.model.hidden > 0 && f.model.embed > 0 && f.model.layers > 0,
                  Value, "adjoint-sequence",
                  "--steps, --seq, --batch, --log-every, --hidden, --embed and --layers must be "
                  "positive and --grad-length at least 2");
    if (f.threads > 0) set_num_threads(f.threads);
    std::filesystem::create_directories(f.out);
    const data::ByteDataset data(f.data);
    std::printf("data: %s, %zu files, %lld training and %lld validation bytes\n", f.data.c_str(),
                data.files().size(), static_cast<long long>(data.train_size()),
                static_cast<long long>(data.validation_size()));

    // 0. Both models, and their gradient norms before training on the long sequences.
    Generator init(f.seed), init_rnn(f.seed);
    tools::CharRNN lstm(f.model, init);
    tools::CharRNNConfig rnn_config = f.model;
    rnn_config.cell = tools::CharCell::RNN;
    tools::CharRNN rnn(rnn_config, init_rnn);
    Generator g(f.seed + 5);
    const data::TextBatch longb = data.batch(data::Split::Validation, 16, f.grad_length, g);
    const std::vector<double> rnn_init = norms_in_float64(rnn, longb, f.grad_length);
    const std::vector<double> lstm_init = norms_in_float64(lstm, longb, f.grad_length);

    // 1. The character LSTM.
    std::printf(
        "char LSTM: %lld parameters (embed %lld, hidden %lld, %lld layer(s)), %lld steps "
        "of %lld x %lld bytes\n",
        static_cast<long long>(lstm.num_parameters()), static_cast<long long>(f.model.embed),
        static_cast<long long>(f.model.hidden), static_cast<long long>(f.model.layers),
        static_cast<long long>(f.steps), static_cast<long long>(f.batch),
        static_cast<long long>(f.seq));
    const Clock::time_point t0 = Clock::now();
    const std::vector<double> lstm_losses = train(lstm, data, f, "lstm");
    const double lstm_seconds = seconds_since(t0);
    const double lstm_val = validation_loss(lstm, data, f);
    std::printf(
        "lstm: final training loss %.3f, validation loss %.3f (%.2f bits per byte), %.0f s\n",
        lstm_losses.back(), lstm_val, lstm_val / std::log(2.0), lstm_seconds);
    Generator sampler(f.seed + 4);
    std::printf("sample: %s\n", lstm.generate("The ", tiny ? 20 : 200, 0.8, sampler).c_str());

    // 2. A tanh RNN of the same size on the same batches.
    const std::vector<double> rnn_losses = train(rnn, data, f, "rnn");
    const double rnn_val = validation_loss(rnn, data, f);
    std::printf("rnn: final training loss %.3f, validation loss %.3f\n", rnn_losses.back(),
                rnn_val);

    // 3. What backward keeps per time step.
    const double rnn_saved = saved_bytes_per_step(rnn, data, f);
    const double lstm_saved = saved_bytes_per_step(lstm, data, f);
    std::printf(
        "the layer saves for backward per time step (batch %lld): rnn %.1f KiB, lstm %.1f KiB "
        "(%.0f and %.0f bytes per sequence and step, %.1f and %.1f floats per hidden unit)\n",
        static_cast<long long>(f.batch), rnn_saved / 1024, lstm_saved / 1024,
        rnn_saved / static_cast<double>(f.batch), lstm_saved / static_cast<double>(f.batch),
        rnn_saved / static_cast<double>(f.batch * f.model.hidden * 4),
        lstm_saved / static_cast<double>(f.batch * f.model.hidden * 4));

    // 4. dL/dh_t on the same long sequences after training.
    const std::vector<double> rnn_norms = norms_in_float64(rnn, longb, f.grad_length);
    const std::vector<double> lstm_norms = norms_in_float64(lstm, longb, f.grad_length);
    const std::string csv = f.out + "/grad_norms.csv", svg = f.out + "/gradients.svg";
    write_csv(csv, {rnn_norms, lstm_norms, rnn_init, lstm_init});
    tools::write_svg_plot(svg, "||dL/dh_t|| against the distance from the loss",
                          "distance from the loss (steps)", "log10 ||dL/dh_t||",
                          {log_series("tanh RNN, trained", rnn_norms, "#d62728"),
                           log_series("LSTM, trained", lstm_norms, "#1f77b4"),
                           log_series("tanh RNN, at init", rnn_init, "#d62728", true),
                           log_series("LSTM, at init", lstm_init, "#1f77b4", true)});
    const std::size_t far = rnn_norms.size() - 1, mid = far / 2;
    std::printf(
        "||dL/dh_t|| at distance 0, %zu, %zu: rnn %.2e, %.2e, %.2e; lstm %.2e, %.2e, %.2e\n", mid,
        far, rnn_norms[0], rnn_norms[mid], rnn_norms[far], lstm_norms[0], lstm_norms[mid],
        lstm_norms[far]);
    std::printf(
        "decay far from the loss: rnn %.2f, lstm %.2f decades per 10 steps (at init: %.2f and "
        "%.2f)\n",
        decades_per_10_steps(rnn_norms), decades_per_10_steps(lstm_norms),
        decades_per_10_steps(rnn_init), decades_per_10_steps(lstm_init));
    std::printf("wrote %s and %s\n", svg.c_str(), csv.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
