// adjoint-train: trains a small byte-level GPT, or Llama (--arch llama), from C++ (what `make
// demo` runs). Shows a
// progress bar on stderr, evaluates the validation loss every --eval-every steps, logs every
// step to loss.csv as it goes, checkpoints every --save-every steps, and writes the
// checkpoint, the loss curve (loss.svg), the gradient health plot (grads.svg) and a generated
// sample at the end. A NaN or infinite gradient stops the run with the parameter's name.
//   adjoint-train [--arch gpt|llama] [--kv-heads 0] [--layers 4] [--width 128] [--heads 4]
//   [--context 64] [--batch 32]
//                 [--steps 1000] [--lr 3e-3] [--seed 0] [--data DIR|FILE] [--out DIR]
//                 [--save-every N] [--stop-after STEP] [--resume CHECKPOINT]
//                 [--grad-every 10] [--grad-vanish 1e-6] [--grad-vanish-records 5]
//                 [--grad-explode 1e2] [--profile N] [--detect-anomaly] [--zero 0|1|2]
// Under `mpirun -np N adjoint-train ...` the ranks train data-parallel, each on 1/N of every
// batch (--zero 1|2 shards the optimizer state, and the gradients); rank 0 alone prints and
// writes the checkpoint, plots and sample.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "gpt_trainer.h"
#include "gradient_health.h"
#include "loss_log.h"
#include "memory_estimate.h"
#include "run_state.h"
#include "svg_plot.h"
#include "train_flags.h"

namespace {

using namespace adjoint;
using Clock = std::chrono::steady_clock;

using tools::format_duration;

// One line, redrawn in place: [=====>    ] step 120/1000 loss 2.345 | 9.8k tok/s | ETA 1m40s
// The bar and the ETA are computed in floating point: step counts near int64's range must
// neither overflow kBar * step nor an int of seconds.
void progress(int64_t step, int64_t steps, double loss, double tokens_per_s, double eta,
              const std::string& extra) {
  constexpr int kBar = 24;
  const double done = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, steps));
  const int filled = static_cast<int>(kBar * std::clamp(done, 0.0, 1.0));
  std::string bar(filled, '=');
  if (filled < kBar) bar += '>' + std::string(kBar - filled - 1, ' ');
  char rate[32] = "--";
  if (std::isfinite(tokens_per_s)) std::snprintf(rate, sizeof rate, "%.1fk", tokens_per_s / 1000);
  std::fprintf(stderr, "\r[%s] step %lld/%lld  loss %.3f%s | %s tok/s | ETA %s   ", bar.c_str(),
               static_cast<long long>(step), static_cast<long long>(steps), loss, extra.c_str(),
               rate, format_duration(eta).c_str());
  std::fflush(stderr);
}

// fp16's loss scale and skipped steps, for the progress line ("" otherwise).
std::string scaler_status(const tools::Trainer& t) {
  if (t.config().precision != "fp16") return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "  scale %g, %lld skipped", t.loss_scale(),
                static_cast<long long>(t.skipped_steps()));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"adjoint-train: train a byte-level GPT or Llama on a text corpus"};
  tools::TrainFlags flags;
  tools::TrainConfig& c = flags.config;
  std::string& out_dir = flags.out_dir;
  std::string& resume = flags.resume;
  c.data = "/usr/share/common-licenses";
  int64_t& sample_length = flags.sample_length;
  int64_t& stop_after = flags.stop_after;
  int& threads = flags.threads;
  int& zero = flags.zero;
  tools::GradientHealthOptions& health_options = flags.health;
  app.add_option("--arch", c.arch,
                 "gpt (GPT-2: learned positions, LayerNorm, GELU) or llama (RoPE, RMSNorm, "
                 "SwiGLU, grouped-query attention)")
      ->capture_default_str();
  app.add_option("--kv-heads", c.kv_heads,
                 "llama: key/value heads, dividing --heads (0: as many as --heads)")
      ->capture_default_str();
  app.add_option("--attention", c.attention,
                 "the attention core: math (matmul, masked softmax, matmul: keeps the "
                 "[batch, heads, context, context] probabilities for backward) or fused (one "
                 "scaled_dot_product_attention kernel, which keeps none); left out: a GPT's "
                 "math, a Llama's fused (it has no math path). Not recorded in checkpoints")
      ->check(CLI::IsMember({"math", "fused"}));
  app.add_option("--layers", c.model.layers, "transformer blocks")->capture_default_str();
  app.add_option("--width", c.model.d_model, "model width (d_model)")->capture_default_str();
  app.add_option("--heads", c.model.heads, "attention heads")->capture_default_str();
  app.add_option("--context", c.model.context, "context length in bytes")->capture_default_str();
  app.add_option("--batch", c.batch, "sequences per step")->capture_default_str();
  app.add_option("--steps", c.steps, "training steps")->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (AdamW)")->capture_default_str();
  app.add_option("--min-lr", c.min_lr,
                 "final learning rate of the cosine decay, at most --lr (when left out: "
                 "3e-4, or --lr if that is lower)")
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the initialisation and the batches")
      // An unsigned option would read -1 as 2^64 - 1.
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.starts_with('-') ? "must be an integer >= 0, got " + v : std::string();
          },
          "UINT"))
      ->capture_default_str();
  app.add_option("--data", c.data, "a text file or a folder of them")->capture_default_str();
  app.add_option("--out", out_dir, "output folder")->capture_default_str();
  app.add_option("--resume", resume,
                 "checkpoint to continue the same run from: flags left out take the "
                 "checkpoint's values; the ones that shape the run must agree with it");
  app.add_option("--save-every", c.save_every,
                 "steps between checkpoints during the run (0: only at the end); a killed run "
                 "loses at most this many steps")
      ->capture_default_str();
  app.add_option("--stop-after", stop_after,
                 "stop (and save) after this step, to --resume later: the schedule still "
                 "spans --steps (0: run to --steps)")
      ->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "steps between validation losses")
      ->capture_default_str();
  app.add_option("--sample-length", sample_length, "bytes of text generated at the end")
      ->capture_default_str();
  app.add_option("--threads", threads,
                 "CPU threads (0: all cores, shared among the ranks under mpirun; with --resume: "
                 "the checkpoint's count, at most the cores)");
  app.add_option("--checkpoint", c.checkpoint,
                 "activation checkpointing of the blocks: none, block (each block), sqrt "
                 "(ceil(sqrt(layers)) segments) or budget=BYTES (e.g. budget=64M: the blocks to "
                 "checkpoint are planned so that their saved activations fit; the plan is "
                 "printed)")
      ->capture_default_str();
  app.add_option("--grad-every", health_options.every,
                 "steps between records of each parameter's gradient norm and update/weight "
                 "ratio, drawn in grads.svg (0: none; NaN/Inf gradients are caught every step)")
      ->capture_default_str();
  app.add_option("--grad-vanish", health_options.vanish_below,
                 "warn when a layer's gradient norm stays below this for --grad-vanish-records "
                 "records in a row")
      ->capture_default_str();
  app.add_option("--grad-vanish-records", health_options.vanish_records,
                 "records in a row below --grad-vanish before a layer counts as vanished")
      ->capture_default_str();
  app.add_option("--grad-explode", health_options.explode_above,
                 "warn when a layer's gradient norm rises above this")
      ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "fp32; bf16 (autocast: float32 weights, bfloat16 matmuls); or fp16 (autocast "
                 "with dynamic loss scaling: a step whose gradients overflow is skipped)")
      ->capture_default_str();
  app.add_option("--loss-scale", c.init_loss_scale,
                 "fp16's initial loss scale; it halves on every overflow and doubles after "
                 "2000 good steps")
      ->capture_default_str();
  app.add_flag("--master-weights", c.master_weights,
               "with --precision bf16 or fp16: 16-bit weights (half the parameter memory), "
               "updated through float32 master copies");
  bool& detect_anomaly = flags.detect_anomaly;
  app.add_flag("--detect-anomaly", detect_anomaly,
               "run the steps in anomaly mode (slow): a NaN or infinite gradient stops the run "
               "at the backward node that made it, naming its op's source line and module "
               "(with --precision fp16, also the first loss-scale overflow)");
  int64_t& profile_step = flags.profile_step;
  app.add_option("--profile", profile_step,
                 "profile step N: its Chrome trace (chrome://tracing, Perfetto) to trace.json "
                 "and its per-op table to profile.txt (0: none)")
      ->capture_default_str();
  app.add_option("--zero", zero,
                 "under mpirun: 0 data parallel (every rank keeps all optimizer state), 1 ZeRO "
                 "stage 1 (optimizer state sharded over the ranks), 2 stage 2 (gradients too)")
      ->capture_default_str();
  bool estimate = false;
  app.add_option("--vocab", c.model.vocab,
                 "with --estimate: the vocabulary to plan for (training reads bytes: 256)")
      ->capture_default_str();
  app.add_option("--mlp-width", c.mlp_width,
                 "with --estimate and --arch llama: the SwiGLU width (0: about 8/3 of --width)")
      ->capture_default_str();
  app.add_flag("--estimate", estimate,
               "print the memory one training step of this model would take (measured on the "
               "meta device), whether it fits this machine, and what would make it fit; no "
               "training, no data read");
  CLI11_PARSE(app, argc, argv);
  auto given = [&](std::string_view flag) {
    return flag.starts_with("--") && app.count(std::string(flag)) > 0;
  };

  // One process without mpirun (world size 1, no MPI); the ranks of the job under it.
  dist::Environment env;
  dist::ProcessGroup& group = env.group();
  const bool lead = group.rank() == 0;  // prints, plots and writes
  try {
    // Every flag's range before anything starts (a bad value is named now, not steps later).
    tools::settle_defaults(flags, given);
    tools::check_flags(flags);
    // Resuming continues the same run: what the flags leave out comes from the checkpoint,
    // and what they give must agree with it (Trainer::resume checks again, with the data).
    std::optional<tools::RunState> stored;
    if (!resume.empty()) {
      stored = tools::read_run_state(resume);
      tools::adopt_run_config(c, stored->config, given, resume);
    }
    // Ranks on one machine share its cores; a resume keeps the checkpoint's count.
    threads =
        tools::threads_for_run(given("--threads") ? std::optional<int>(threads) : std::nullopt,
                               stored ? std::optional<int64_t>(stored->threads) : std::nullopt,
                               std::thread::hardware_concurrency(), group.world_size());
    if (threads > 0) set_num_threads(threads);
    ADJOINT_CHECK(estimate || (c.model.vocab == 256 && c.mlp_width == 0), Value, "train",
                  "--vocab and --mlp-width plan other models with --estimate; training reads "
                  "bytes (vocabulary 256)");
    ADJOINT_CHECK(c.model.vocab >= 1 && c.mlp_width >= 0, Value, "train",
                  "--vocab must be positive and --mlp-width >= 0");
    if (estimate) {
      if (lead) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        const std::size_t machine =
            pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page : 0;
        std::fputs(tools::estimate_report(c, machine).c_str(), stdout);
      }
      return 0;
    }
    // Where this invocation stops; the run itself (its schedule) always spans c.steps.
    const int64_t end = stop_after > 0 ? std::min(stop_after, c.steps) : c.steps;
    data::ByteDataset data(c.data);
    if (lead)
      std::fprintf(stderr, "data: %s, %zu files, %lld training and %lld validation bytes\n",
                   c.data.c_str(), data.files().size(), static_cast<long long>(data.train_size()),
                   static_cast<long long>(data.validation_size()));
    const bool parallel = group.world_size() > 1 || zero > 0;
    tools::Trainer trainer(c, data, {.group = parallel ? &group : nullptr, .zero = zero});
    if (lead && parallel)
      std::fprintf(stderr, "data parallel: %d ranks, %lld sequences each, %d threads each%s\n",
                   group.world_size(), static_cast<long long>(c.batch / group.world_size()),
                   get_num_threads(),
                   zero > 0 ? (zero == 1 ? ", ZeRO stage 1" : ", ZeRO stage 2") : "");
    if (!resume.empty()) {
      trainer.resume(resume);
      if (lead)
        std::fprintf(stderr, "resumed from %s at step %lld of %lld with %d thread%s\n",
                     resume.c_str(), static_cast<long long>(trainer.step()),
                     static_cast<long long>(c.steps), get_num_threads(),
                     get_num_threads() == 1 ? "" : "s");
      // Reductions are split per thread, so only the same count promises the same bits.
      // Without --threads the resume takes the checkpoint's count, unless this machine has
      // fewer cores (per rank).
      if (lead && stored->threads != get_num_threads())
        std::fprintf(stderr,
                     "note: the checkpoint was written with %lld threads, this run has %d%s: it "
                     "continues, but float sums may round differently than in one go\n",
                     static_cast<long long>(stored->threads), get_num_threads(),
                     given("--threads") ? "" : " (the cores it may use)");
    }
    if (lead)
      std::fprintf(stderr,
                   "model: %lld layers, width %lld, %lld heads, context %lld: %lld "
                   "parameters\n",
                   static_cast<long long>(c.model.layers), static_cast<long long>(c.model.d_model),
                   static_cast<long long>(c.model.heads), static_cast<long long>(c.model.context),
                   static_cast<long long>(trainer.model().num_parameters()));
    const std::string ckpt = out_dir + "/checkpoint.safetensors";
    if (lead) {
      std::filesystem::create_directories(out_dir);
      // A run killed while writing one of these leaves its temporary: drop it now (the
      // checkpoint's are also dropped by every save).
      for (const char* name : {"checkpoint.safetensors", "loss.svg", "memory.svg", "memory.csv",
                               "grads.svg", "grads.csv", "trace.json", "profile.txt"})
        io::remove_stale_temporaries(out_dir + "/" + name);
    }

    tools::Series train_curve{"train loss", {}, {}, "#1f77b4"};
    tools::Series val_curve{"validation loss", {}, {}, "#d62728", true};
    // fp16: the steps the GradScaler skipped (a gradient overflowed), as dots on the curve.
    tools::Series skipped_curve{"skipped step (fp16 overflow)", {}, {}, "#ff7f0e", true};
    double last_val = NAN;
    const std::string csv_path = out_dir + "/loss.csv";
    std::optional<tools::LossLog> log;  // rank 0's
    if (lead) {
      log.emplace(resume.empty() ? tools::LossLog::create(csv_path)
                                 : tools::LossLog::resume(csv_path, trainer.step()));
      if (!log->note().empty()) std::fprintf(stderr, "%s\n", log->note().c_str());
    }
    for (const tools::LossRow& row : log ? log->kept() : std::vector<tools::LossRow>{}) {
      train_curve.x.push_back(static_cast<double>(row.step));
      train_curve.y.push_back(row.train_loss);
      if (!row.val_loss) continue;
      val_curve.x.push_back(static_cast<double>(row.step));
      val_curve.y.push_back(*row.val_loss);
      last_val = *row.val_loss;
    }
    const auto start = Clock::now();
    const int64_t first = trainer.step();
    // The first step of the run is recorded op by op: memory.svg shows what the forward
    // saves and how backward frees it (compare --checkpoint none and block).
    std::unique_ptr<MemoryTimeline> timeline;
    // Gradient norms and update ratios of this invocation's steps (a resumed run starts anew).
    tools::GradientHealth health(trainer.model().named_parameters(), health_options);
    auto write_health = [&] {
      if (!lead || health.records().empty()) return;
      tools::write_gradient_csv(health, out_dir + "/grads.csv");
      tools::write_gradient_svg(health, out_dir + "/grads.svg", "adjoint-train");
    };
    while (trainer.step() < end) {
      // --profile N: step N (counted from 1) op by op. Made before the timeline, which
      // train_step stops first, so each leaves the observer chain as it found it.
      std::unique_ptr<Profiler> profiler;
      if (lead && trainer.step() + 1 == profile_step) profiler = std::make_unique<Profiler>();
      if (lead && trainer.step() == first) timeline = std::make_unique<MemoryTimeline>();
      double loss = 0;
      try {
        const DetectAnomaly anomaly(detect_anomaly);
        loss = trainer.train_step(timeline.get(), &health);
      } catch (const Error&) {
        write_health();  // what led up to a NaN is the interesting part
        throw;
      }
      if (profiler) {
        profiler->stop();
        profiler->write_chrome_trace(out_dir + "/trace.json");
        const std::string table = profiler->table(25);
        io::write_text_file_atomic(out_dir + "/profile.txt", table, "train");
        std::fprintf(stderr, "\rprofile of step %lld (%s/trace.json, %s/profile.txt):%20s\n%s",
                     static_cast<long long>(profile_step), out_dir.c_str(), out_dir.c_str(), "",
                     table.c_str());
      }
      for (const std::string& w : health.take_warnings())
        if (lead) std::fprintf(stderr, "\rwarning: %s%20s\n", w.c_str(), "");
      if (timeline) {
        timeline->write_csv(out_dir + "/memory.csv");
        timeline->write_svg(
            out_dir + "/memory.svg",
            "adjoint-train: memory during one step (--checkpoint " + c.checkpoint + ", --context " +
                std::to_string(c.model.context) + ", " +
                (c.attention.empty() ? (c.arch == "gpt" ? "math" : "fused") : c.attention) +
                " attention)");
        timeline.reset();
      }
      const int64_t step = trainer.step();
      train_curve.x.push_back(static_cast<double>(step));
      train_curve.y.push_back(loss);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double per_step = elapsed / static_cast<double>(step - first);
      if (lead)
        progress(step, c.steps, loss, c.batch * c.model.context / per_step,
                 per_step * static_cast<double>(end - step), scaler_status(trainer));
      if (trainer.last_step_skipped()) {
        skipped_curve.x.push_back(static_cast<double>(step));
        skipped_curve.y.push_back(loss);
      }
      std::optional<double> val;
      if (lead && (step % c.eval_every == 0 || step == c.steps)) {
        last_val = trainer.evaluate(data::Split::Validation);
        val_curve.x.push_back(static_cast<double>(step));
        val_curve.y.push_back(last_val);
        std::fprintf(stderr, "\rstep %5lld  train loss %.4f  validation loss %.4f%s  (%s)%20s\n",
                     static_cast<long long>(step), loss, last_val, scaler_status(trainer).c_str(),
                     format_duration(elapsed).c_str(), "");
        val = last_val;
      }
      if (log) log->append(step, loss, val);  // flushed: a kill keeps every row written so far
      // The final step is saved below, after the loop.
      if (c.save_every > 0 && step % c.save_every == 0 && step < end) trainer.save(ckpt);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    trainer.save(ckpt);  // every rank (ZeRO gathers its state); rank 0 writes
    if (!lead) return 0;
    tools::write_svg_plot(out_dir + "/loss.svg",
                          trainer.config().arch == "llama" ? "adjoint-train: byte-level Llama"
                                                           : "adjoint-train: byte-level GPT",
                          "step", "loss (nats per byte)",
                          skipped_curve.x.empty()
                              ? std::vector<tools::Series>{train_curve, val_curve}
                              : std::vector<tools::Series>{train_curve, val_curve, skipped_curve});
    write_health();
    std::printf(
        "trained %lld steps in %s (%s); validation loss %.4f nats per byte (uniform: "
        "5.545)%s\n",
        static_cast<long long>(trainer.step() - first), format_duration(seconds).c_str(),
        c.precision.c_str(), last_val, scaler_status(trainer).c_str());
    const std::string grads = health.records().empty() ? "" : " and " + out_dir + "/grads.svg";
    std::printf("wrote %s, %s/loss.svg, %s/loss.csv, %s/memory.svg%s\n", ckpt.c_str(),
                out_dir.c_str(), out_dir.c_str(), out_dir.c_str(), grads.c_str());
    Generator gen(c.seed + 7);
    const std::string prompt = "This program is ";
    std::printf("\nsample (temperature 0.8, top-k 40):\n%s%s\n", prompt.c_str(),
                tools::generate(trainer.model(), prompt, sample_length, 0.8, 40, gen).c_str());
  } catch (const std::exception& e) {  // adjoint::Error, std::filesystem, allocation
    // The other ranks may wait for this one in a collective: end the whole job.
    if (group.world_size() > 1) group.abort(std::string("error: ") + e.what());
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
  return 0;
}
