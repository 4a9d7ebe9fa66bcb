// adjoint-sample: generates text from a checkpoint written by adjoint-train.
//   adjoint-sample --checkpoint out/checkpoint.safetensors [--prompt TEXT] [--length 500]
//                  [--temperature 0.8] [--top-k 40] [--seed 0]
#include <CLI/CLI.hpp>

#include <cstdio>

#include "gpt_trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"adjoint-sample: generate text from an adjoint-train checkpoint"};
  std::string checkpoint = "out/checkpoint.safetensors", prompt = "\n";
  int64_t length = 500, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 0;
  app.add_option("--checkpoint", checkpoint, "checkpoint file")->capture_default_str();
  app.add_option("--prompt", prompt, "text to continue");
  app.add_option("--length", length, "bytes to generate")->capture_default_str();
  app.add_option("--temperature", temperature, "softmax temperature (> 0)")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k likeliest bytes (0: all)")
      ->capture_default_str();
  app.add_option("--seed", seed, "seed of the sampling")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto model = adjoint::tools::load_model(checkpoint);
    adjoint::Generator gen(seed);
    std::printf("%s%s\n", prompt.c_str(),
                adjoint::tools::generate(*model, prompt, length, temperature, top_k, gen).c_str());
  } catch (const adjoint::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // allocation and the like: still no terminate()
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
