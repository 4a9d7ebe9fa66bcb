// adjoint-sample: generates text from a checkpoint written by adjoint-train.
//   adjoint-sample --checkpoint out/checkpoint.safetensors [--prompt TEXT] [--length 500]
//                  [--temperature 0.8] [--top-k 40] [--seed 0] [--no-cache-check]
// A Llama generates with its key/value cache; then, unless --no-cache-check, the same text again
// recomputing the whole window for every byte, and stderr says how much faster the cache was in
// this run (and whether both gave the same text: they do up to `context` bytes in all).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "gpt_trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"adjoint-sample: generate text from an adjoint-train checkpoint"};
  std::string checkpoint = "out/checkpoint.safetensors", prompt = "\n";
  int64_t length = 500, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 0;
  bool no_cache_check = false;
  app.add_option("--checkpoint", checkpoint, "checkpoint file")->capture_default_str();
  app.add_option("--prompt", prompt, "text to continue");
  app.add_option("--length", length, "bytes to generate")->capture_default_str();
  app.add_option("--temperature", temperature, "softmax temperature (> 0)")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k likeliest bytes (0: all)")
      ->capture_default_str();
  app.add_option("--seed", seed, "seed of the sampling")->capture_default_str();
  app.add_flag("--no-cache-check", no_cache_check,
               "llama: do not generate again without the cache to time it");
  CLI11_PARSE(app, argc, argv);
  try {
    auto model = adjoint::tools::load_model(checkpoint);
    adjoint::Generator gen(seed);
    const Clock::time_point start = Clock::now();
    const std::string text =
        adjoint::tools::generate(*model, prompt, length, temperature, top_k, gen);
    const double cached_s = seconds_since(start);
    std::printf("%s%s\n", prompt.c_str(), text.c_str());
    if (dynamic_cast<adjoint::nn::Llama*>(model.get()) && !no_cache_check && length > 0) {
      adjoint::Generator again(seed);
      const Clock::time_point restart = Clock::now();
      const std::string plain = adjoint::tools::generate(*model, prompt, length, temperature, top_k,
                                                         again, /*use_cache=*/false);
      const double plain_s = seconds_since(restart);
      std::fprintf(stderr,
                   "kv cache: %lld bytes in %.3f s; recomputing the window for each: %.3f s; "
                   "the cache was %.1fx faster (%s text)\n",
                   static_cast<long long>(length), cached_s, plain_s, plain_s / cached_s,
                   plain == text ? "the same" : "a different");
    }
  } catch (const adjoint::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // allocation and the like: still no terminate()
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
