// import_function on damaged files (issue 36): each edit of an exported MLP's graph that once
// crashed the importer's kernels (a permute's dims, an expand's input or target, a value's
// shape, a double field, an integer written as a double) is an adjoint::Error naming the op,
// found by import's shape pass (Note [Checking an imported graph] in src/export/import.cpp).
// Oracle for the mutation loop: every edit gives a function that runs, or an adjoint::Error;
// under the sanitizer build (-DADJOINT_SANITIZE=ON) nothing reads or writes out of bounds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/io/safetensors.h"

namespace {

using namespace adjoint;
using nlohmann::json;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "adjoint_import_damaged_" + std::to_string(::getpid()) + "_" + name;
}

// linear -> gelu -> permute -> matmul -> permute, + an expanded bias, -> cross_entropy.
struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp() {
    Generator gen(3);
    auto param = [&](const Shape& s) {
      return (randn(s, DType::Float32, &gen) * 0.3).detach().requires_grad_(true);
    };
    w1 = param({16, 8});
    b1 = param({16});
    w2 = param({4, 16});
    b2 = param({4});
  }
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    const Tensor h = gelu(linear(in[0], w1, b1)) * 0.5;           // [5, 16]
    const Tensor s = matmul(w2, h.permute({1, 0}));               // [4, 5]
    const Tensor logits = s.permute({1, 0}) + b2.expand({5, 4});  // [5, 4]
    return {logits, cross_entropy(logits, in[1])};
  }
};

struct Exported {
  io::SafetensorsFile file;
  json graph;
  Tensor x, t;
};

const Exported& exported() {
  static const Exported e = [] {
    const Mlp model;
    CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return model(in); });
    Generator gen(4);
    Exported out;
    out.x = randn({5, 8}, DType::Float32, &gen);
    out.t = randint(0, 4, {5}, &gen);
    f({out.x.detach().requires_grad_(true), out.t});
    const std::string path = temp_path("mlp.adjoint");
    export_function(f, path);
    out.file = io::load_safetensors(path);
    std::remove(path.c_str());
    out.graph = json::parse(out.file.metadata.at("adjoint.graph"));
    return out;
  }();
  return e;
}

/// The node of the exported graph running `op` (the first, or the `nth`).
json& node_of(json& graph, const std::string& op, int nth = 0) {
  for (json& n : graph.at("nodes"))
    if (n.at("op") == op && nth-- == 0) return n;
  throw std::runtime_error("no node " + op);
}

/// Imports the graph `text` (in place of the exported one), calls the function on the exported
/// signature's inputs and runs backward. Returns the adjoint::Error's message, "" for a run;
/// any other exception escapes and fails the test.
std::string run_graph(const std::string& text, ErrorKind* kind = nullptr) {
  const Exported& e = exported();
  io::SafetensorsFile file = e.file;
  file.metadata.at("adjoint.graph") = text;
  const std::string path = temp_path("damaged.adjoint");
  io::save_safetensors(path, file.tensors, file.metadata);
  std::string what;
  try {
    const ImportedFunction g = import_function(path);
    const std::vector<Tensor> out = g({e.x.detach().requires_grad_(true), e.t});
    out[1].backward();
  } catch (const Error& err) {
    what = err.what();
    if (kind) *kind = err.kind();
  }
  std::remove(path.c_str());
  return what;
}

std::string run_edited(const std::function<void(json&)>& edit, ErrorKind* kind = nullptr) {
  json graph = exported().graph;
  edit(graph);
  return run_graph(graph.dump(), kind);
}

void expect_error_naming(const std::string& what, const std::string& op) {
  EXPECT_FALSE(what.empty()) << "the damaged file ran";
  EXPECT_NE(what.find("import_function"), std::string::npos) << what;
  EXPECT_NE(what.find(op), std::string::npos) << what;
}

TEST(ImportDamaged, TheUndamagedFileRuns) { EXPECT_EQ(run_graph(exported().graph.dump()), ""); }

TEST(ImportDamaged, APermutesDimsThatAreNoPermutationOfItsInputAreRefused) {
  for (const json& dims : {json::array({1, 65535}), json::array({1, 0, 0}), json::array({0}),
                           json::array({1, 1}), json::array({-1, 0})}) {
    ErrorKind kind{};
    const std::string what =
        run_edited([&](json& g) { node_of(g, "permute").at("fields").at(0).at(1) = dims; }, &kind);
    expect_error_naming(what, "permute");
    EXPECT_TRUE(kind == ErrorKind::Shape || kind == ErrorKind::Index || kind == ErrorKind::Value)
        << what;
  }
}

TEST(ImportDamaged, AnExpandOfAnotherInputOrTargetThanTheRecordedIsRefused) {
  // Its input made the first value (the argument x, [5, 8]), which does not expand to [5, 4].
  expect_error_naming(run_edited([](json& g) { node_of(g, "expand").at("in") = {0}; }), "expand");
  // A target of fewer dims than its input has, and one its input expands to but that is not
  // the shape the file records for the result.
  for (const json& target : {json::array({4}), json::array({3, 4}), json::array({1, 5, 4}),
                             json::array({int64_t{93863796585456}, 4})})
    expect_error_naming(
        run_edited([&](json& g) { node_of(g, "expand").at("fields").at(0).at(1) = target; }),
        "expand");
}

TEST(ImportDamaged, ProductsAndLossesGivenShapesTheyDoNotTakeAreRefused) {
  // The matmul reads the [5, 16] hidden value instead of its [16, 5] permutation.
  json graph = exported().graph;
  const int hidden = node_of(graph, "permute").at("in").at(0);
  expect_error_naming(run_edited([&](json& g) { node_of(g, "matmul").at("in").at(1) = hidden; }),
                      "matmul");
  // linear's weight read as its bias; cross_entropy's targets as the logits.
  expect_error_naming(run_edited([](json& g) {
                        json& in = node_of(g, "linear").at("in");
                        in.at(1) = in.at(2);
                      }),
                      "linear");
  expect_error_naming(run_edited([](json& g) {
                        json& in = node_of(g, "cross_entropy").at("in");
                        in.at(1) = in.at(0);
                      }),
                      "cross_entropy");
  // The first linear's result recorded as float64: linear makes float32 of float32 operands.
  expect_error_naming(run_edited([](json& g) {
                        const int out = node_of(g, "linear").at("out").at(0);
                        g.at("values").at(out).at(4) = "float64";
                      }),
                      "linear");
}

TEST(ImportDamaged, ShapesOutOfRangeAreRefusedBeforeTheAllocatorSeesThem) {
  // Every value's shape in turn set to [93863796585456, 8], and to [-3, 8]: refused when read.
  const std::size_t n_values = exported().graph.at("values").size();
  for (std::size_t v = 0; v < n_values; ++v)
    for (const json& shape : {json::array({int64_t{93863796585456}, 8}), json::array({-3, 8})}) {
      const std::string what = run_edited([&](json& g) { g.at("values").at(v).at(3) = shape; });
      EXPECT_NE(what.find("import_function"), std::string::npos) << v << ": " << what;
    }
}

TEST(ImportDamaged, NumbersThatDoNotParseAreErrorsNotOtherExceptions) {
  // A double field that is not 16 hex digits (std::stoull threw std::invalid_argument): the
  // first node with one (the scalar multiply's 0.5).
  std::string with_double;
  for (const json& n : exported().graph.at("nodes"))
    for (const json& f : n.at("fields"))
      if (with_double.empty() && f.at(0) == "d") with_double = n.at("op");
  ASSERT_FALSE(with_double.empty());
  for (const char* hex : {"zzzzzzzzzzzzzzzz", "-000000000000001", "0x00000000000001", ""})
    expect_error_naming(run_edited([&](json& g) {
                          for (json& f : node_of(g, with_double).at("fields"))
                            if (f.at(0) == "d") f.at(1) = hex;
                        }),
                        with_double);
  // Integers written as doubles (a float-to-int cast out of range), and integers past int.
  for (const json& n :
       {json(1e23), json(2.5), json(-1e300), json(uint64_t{1} << 63), json(int64_t{1} << 40)}) {
    const std::string what = run_edited([&](json& g) { node_of(g, "linear").at("generator") = n; });
    expect_error_naming(what, "linear");
    EXPECT_NE(what.find(n.is_number_float() ? "integer" : "out of range"), std::string::npos)
        << what;
    EXPECT_FALSE(run_edited([&](json& g) { node_of(g, "linear").at("in").at(0) = n; }).empty());
    EXPECT_FALSE(run_edited([&](json& g) { g.at("values").at(0).at(3).at(0) = n; }).empty());
    EXPECT_FALSE(run_edited([&](json& g) { g.at("constants") = n; }).empty());
  }
  // An integer field holding a double.
  expect_error_naming(
      run_edited([](json& g) { node_of(g, "cross_entropy").at("fields").at(1).at(1) = 1e23; }),
      "cross_entropy");
}

TEST(ImportDamaged, TheCallIsCheckedAgainstTheRecordedSignature) {
  const Exported& e = exported();
  const std::string path = temp_path("signature.adjoint");
  io::save_safetensors(path, e.file.tensors, e.file.metadata);
  const ImportedFunction g = import_function(path);
  std::remove(path.c_str());
  auto error_of = [&](const std::vector<Tensor>& in) {
    try {
      g(in);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({randn({5, 9}), e.t}).find("input 0"), std::string::npos);
  EXPECT_NE(error_of({e.x, e.t.to(DType::Float32)}).find("input 1"), std::string::npos);
  EXPECT_NE(error_of({e.x}).find("takes 2 inputs"), std::string::npos);
}

TEST(ImportDamaged, EverySingleByteOrFieldEditRunsOrIsAnError) {
  // Deterministic edits of the graph's text: each byte position in turn (a stride through the
  // text) given another digit, bracket, sign or letter, and each number field of each node
  // set to values around its own and past the ranges. Each is a run or an adjoint::Error; any
  // other exception fails here, and a crash or sanitizer report ends the test binary.
  const std::string text = exported().graph.dump();
  const std::string replacements = "0123456789-[]{},\"e.:aZ";
  std::mt19937 rng(36);
  int runs = 0, errors = 0;
  for (std::size_t at = 0; at < text.size(); at += 1 + text.size() / 250) {
    std::string damaged = text;
    damaged[at] = replacements[rng() % replacements.size()];
    (run_graph(damaged).empty() ? runs : errors)++;
  }
  const json& graph = exported().graph;
  for (std::size_t k = 0; k < graph.at("nodes").size(); ++k)
    for (const char* part : {"in", "out"})
      for (std::size_t i = 0; i < graph.at("nodes").at(k).at(part).size(); ++i)
        for (int64_t to : {-2, -1, 0, 1, 2, 5, 1000}) {
          const std::string what = run_edited([&](json& g) {
            json& id = g.at("nodes").at(k).at(part).at(i);
            id = to < 5 ? id.get<int64_t>() + to : to;
          });
          (what.empty() ? runs : errors)++;
        }
  EXPECT_GT(errors, 100);
  EXPECT_GT(runs, 0);  // some edits (an id to itself, a digit of a double) leave a function
}

}  // namespace
