// write_html: the page's embedded JSON against the engine's gradients and hand-derived values,
// and the page run in headless Chromium (skipped, saying so, where it is not installed): its
// #autotest mode presses "step" through the run, and what it highlighted and showed is compared
// with the JSON and with .grad.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adjoint/nn.h"
#include "debug/graph_test_util.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

json page_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"adjoint-graph\">";
  const std::size_t a = page.find(open) + open.size();
  return json::parse(page.substr(a, page.find("</script>", a) - a));
}

std::vector<double> json_values(const json& t) {
  std::vector<double> v;
  for (const json& x : t.at("values"))
    v.push_back(x.is_string() ? std::stod(x.get<std::string>()) : x.get<double>());
  return v;
}

std::vector<double> text_numbers(const std::string& s) {
  std::vector<double> v;
  const std::string head = s.substr(0, s.find(" ("));  // drop "(n values, norm ...)"
  const std::regex num(R"([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|NaN|Infinity))");
  for (std::sregex_iterator it(head.begin(), head.end(), num), end; it != end; ++it)
    v.push_back(std::strtod(it->str().c_str(), nullptr));
  return v;
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() /
         ("adjoint_html_test_" + std::to_string(::getpid()) + "_" + name);
}

// Chromium from Debian ($ADJOINT_CHROMIUM overrides), or empty.
std::string chromium() {
  if (const char* env = std::getenv("ADJOINT_CHROMIUM")) return env;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(c)) return c;
  return "";
}

// Loads the page with #autotest in headless Chromium and returns what it reported.
json run_in_browser(const fs::path& page) {
  const fs::path profile = temp_path("profile");
  const std::string cmd =
      "timeout 120 " + chromium() +
      " --headless --disable-gpu --no-sandbox --user-data-dir=" + profile.string() +
      " --virtual-time-budget=5000 --dump-dom 'file://" + page.string() + "#autotest' 2>/dev/null";
  std::string dom;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) dom.append(buf, n);
    ::pclose(p);
  }
  std::error_code ec;
  fs::remove_all(profile, ec);
  const std::string open = "<pre id=\"autotest-result\">";
  const std::size_t a = dom.find(open);
  if (a == std::string::npos) {
    ADD_FAILURE() << "no autotest result in the page's DOM:\n" << dom.substr(0, 2000);
    return json::array();
  }
  std::string text = dom.substr(a + open.size(), dom.find("</pre>", a) - a - open.size());
  // The DOM serialiser escapes text: undo &lt; &gt; &amp; (in that order, &amp; last).
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}})
    for (std::size_t at; (at = text.find(from)) != std::string::npos;)
      text.replace(at, from.size(), to);
  return json::parse(text);
}

TEST(GraphHtml, PageIsSelfContainedAndCarriesTheEngineGradients) {
  TwoLayerExample ex;
  GraphRecorder rec;
  ex.forward();
  ex.loss.backward();
  GraphOptions o;
  o.names = ex.names();
  o.recording = &rec;
  const fs::path path = temp_path("two_layer.html");
  write_html({ex.loss}, path.string(), o);
  const std::string page = read_file(path);
  fs::remove(path);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  std::string without_ns = page;
  for (std::size_t at; (at = without_ns.find("http://www.w3.org/2000/svg")) != std::string::npos;)
    without_ns.erase(at, 26);
  EXPECT_EQ(without_ns.find("http"), std::string::npos) << "the page must fetch nothing";

  const json data = page_data(page);
  const WalkedGraph g = walk(ex.loss);
  ASSERT_EQ(data["nodes"].size(), g.nodes.size());
  EXPECT_EQ(data["edges"].size(), g.edges.size());
  EXPECT_EQ(data["num_forward"], g.nodes.size());
  EXPECT_EQ(data["num_backward"], g.nodes.size());  // one backward, every node ran once
  EXPECT_EQ(data["steps"].size(), 2 * g.nodes.size());
  // A leaf's backward step carries what went into its .grad (zero before: the whole .grad);
  // the VJP pieces sent to it add up to the same.
  for (const auto& [name, leaf] : ex.names()) {
    const std::string id = node_id(autograd::gradient_edge(leaf).node.get());
    std::size_t index = 0;
    while (data["nodes"][index]["id"] != id) ++index;
    EXPECT_EQ(data["nodes"][index]["name"], name);
    std::vector<double> sum(static_cast<std::size_t>(leaf.numel()), 0.0);
    int leaf_steps = 0;
    for (const json& s : data["steps"]) {
      if (s["phase"] != "backward") continue;
      if (s["node"] == index) {
        ++leaf_steps;
        const std::vector<double> got = json_values(s["grads_in"][0]);
        const std::vector<double> want = leaf.grad().to_vector<double>();
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << name;
      }
      for (const json& v : s["vjp"])
        if (v["to"] == index) {
          const std::vector<double> piece = json_values(v["grad"]);
          for (std::size_t i = 0; i < piece.size(); ++i) sum[i] += piece[i];
        }
    }
    EXPECT_EQ(leaf_steps, 1) << name;
    const std::vector<double> want = leaf.grad().to_vector<double>();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(sum[i], want[i], 1e-12) << name;
  }
}

TEST(GraphHtml, BrowserStepsShowTheEngineValues) {
  if (chromium().empty()) GTEST_SKIP() << "Chromium is not installed (package chromium)";
  TwoLayerExample ex;
  GraphRecorder rec;
  ex.forward();
  ex.loss.backward();
  GraphOptions o;
  o.names = ex.names();
  o.recording = &rec;
  const fs::path path = temp_path("browser.html");
  write_html({ex.loss}, path.string(), o);
  const json data = page_data(read_file(path));
  const json shown = run_in_browser(path);
  fs::remove(path);
  ASSERT_EQ(shown.size(), data["steps"].size());
  for (std::size_t k = 0; k < shown.size(); ++k) {
    const json& s = data["steps"][k];
    const json& node = data["nodes"][s["node"].get<std::size_t>()];
    const json& v = shown[k];
    SCOPED_TRACE("step " + std::to_string(k + 1) + " " + node["id"].get<std::string>());
    EXPECT_EQ(v["step"], k + 1);
    EXPECT_EQ(v["phase"], s["phase"]);
    EXPECT_EQ(v["highlighted"], node["id"]);
    if (s["phase"] == "forward") {
      expect_close_4(text_numbers(v["value"]), json_values(node["value"]), "value");
    } else {
      expect_close_4(text_numbers(v["grad_in"]), json_values(s["grads_in"][0]), "grad in");
      ASSERT_EQ(v["vjp"].size(), s["vjp"].size());
      for (std::size_t i = 0; i < s["vjp"].size(); ++i)
        expect_close_4(text_numbers(v["vjp"][i]["grad"]), json_values(s["vjp"][i]["grad"]), "vjp");
    }
  }
  // The last backward steps are leaves: what the page showed is the engine's .grad.
  for (const auto& [name, leaf] : ex.names()) {
    const std::string id = node_id(autograd::gradient_edge(leaf).node.get());
    for (std::size_t k = data["num_forward"]; k < shown.size(); ++k)
      if (shown[k]["node"] == id)
        expect_close_4(text_numbers(shown[k]["grad_in"]), leaf.grad().to_vector<double>(), name);
  }
}

TEST(GraphHtml, WithoutARecordingThePageRecordsItsOwnBackward) {
  SumSinExample ex;
  ex.forward();
  const fs::path path = temp_path("own.html");
  write_html({ex.f}, path.string(), {.names = {{"x", ex.x}, {"y", ex.y}}});
  const json data = page_data(read_file(path));
  fs::remove(path);
  EXPECT_FALSE(ex.x.grad().defined()) << "write_html must leave .grad alone";
  EXPECT_EQ(data["num_backward"], 5);
  const double x = 0.7, y = -1.9;
  for (const json& s : data["steps"]) {
    if (s["phase"] != "backward") continue;
    const json& node = data["nodes"][s["node"].get<std::size_t>()];
    const double got = json_values(s["grads_in"][0])[0];
    if (node["name"] == "x") {
      EXPECT_NEAR(got, std::sin(x) + (x + y) * std::cos(x), 1e-12);
    } else if (node["name"] == "y") {
      EXPECT_NEAR(got, std::sin(x), 1e-12);
    }
  }
  // The graph is kept: a real backward still works and agrees.
  ex.f.backward();
  EXPECT_NEAR(ex.x.grad().item<double>(), std::sin(x) + (x + y) * std::cos(x), 1e-12);
}

TEST(GraphHtml, FreedGraphGivesAForwardOnlyPageWithANote) {
  SumSinExample ex;
  ex.forward();
  ex.f.backward();
  const fs::path path = temp_path("freed.html");
  write_html({ex.f}, path.string());
  const json data = page_data(read_file(path));
  fs::remove(path);
  EXPECT_EQ(data["num_backward"], 0);
  EXPECT_EQ(data["num_forward"], 5);
  EXPECT_NE(data["note"].get<std::string>().find("GraphRecorder"), std::string::npos);
}

TEST(GraphHtml, LargeGraphsAreGroupedByModule) {
  Generator gen(5);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 4, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 4, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 1, true, &gen)});
  GraphRecorder rec;
  Tensor loss = (*model)(randn({3, 4}, {}, &gen)).sum();
  loss.backward();
  GraphOptions o;
  o.names = model->named_parameters();
  o.recording = &rec;
  o.max_nodes = 5;
  const fs::path path = temp_path("grouped.html");
  write_html({loss}, path.string(), o);
  const json data = page_data(read_file(path));
  EXPECT_TRUE(data["grouped"].get<bool>());
  // Every parameter's node sits in its module's group ("0", "2", "4").
  std::set<std::string> groups;
  for (const json& n : data["nodes"])
    if (n["leaf"].get<bool>()) {
      const std::string name = n["name"];
      EXPECT_EQ(n["group"], name.substr(0, name.find('.'))) << name;
      groups.insert(n["group"].get<std::string>());
    }
  EXPECT_EQ(groups, (std::set<std::string>{"0", "2", "4"}));
  if (!chromium().empty()) {
    const json shown = run_in_browser(path);
    ASSERT_EQ(shown.size(), data["steps"].size());
    for (const json& v : shown) EXPECT_EQ(v["highlighted"].get<std::string>()[0], 'g');
  }
  fs::remove(path);
}

TEST(GraphHtml, BadInputNamesTheFunctionAndLeavesNoFile) {
  SumSinExample ex;
  ex.forward();
  expect_error([] { write_html({}, "/tmp/never.html"); }, ErrorKind::Value, {"[write_html]"});
  expect_error([] { write_html({ones({2})}, "/tmp/never.html"); }, ErrorKind::Value,
               {"[write_html]", "no autograd graph"});
  const std::string bad = "/nonexistent-adjoint-dir/page.html";
  expect_error([&] { write_html({ex.f}, bad); }, ErrorKind::IO, {"write_html", bad});
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(fs::exists("/tmp/never.html"));
}

}  // namespace
}  // namespace adjoint::testing
