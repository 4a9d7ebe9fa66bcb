// render_svg and write_svg through Graphviz's dot program: skipped, saying so, where dot is
// not installed (scripts/install-deps.sh graphviz, which make test runs, installs it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "debug/graph_test_util.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(GraphSvg, RendersEveryNodeAndEdge) {
  if (!graphviz_available()) GTEST_SKIP() << "Graphviz's dot is not installed (package graphviz)";
  TwoLayerExample ex;
  GraphRecorder rec;
  ex.forward();
  ex.loss.backward();
  GraphOptions o;
  o.names = ex.names();
  o.recording = &rec;
  const std::string svg = render_svg(to_dot({ex.loss}, o));
  ASSERT_NE(svg.find("<svg"), std::string::npos);
  const WalkedGraph g = walk(ex.loss);
  // Graphviz writes one <g class="node"> per node and one <g class="edge"> per edge.
  EXPECT_EQ(count(svg, "class=\"node\""), g.nodes.size());
  EXPECT_EQ(count(svg, "class=\"edge\""), g.edges.size());
  EXPECT_NE(svg.find(">W1</text>"), std::string::npos);
}

TEST(GraphSvg, WriteSvgWritesTheFileAtomically) {
  if (!graphviz_available()) GTEST_SKIP() << "Graphviz's dot is not installed (package graphviz)";
  SumSinExample ex;
  ex.forward();
  const auto path = std::filesystem::temp_directory_path() / "adjoint_graph_svg_test.svg";
  write_svg({ex.f}, path.string());
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  std::filesystem::remove(path);
  expect_error([] { write_svg({}, "/tmp/never.svg"); }, ErrorKind::Value, {"[write_svg]"});
}

TEST(GraphSvg, MissingGraphvizIsAClearError) {
  ::setenv("ADJOINT_DOT", "/nonexistent/dot", 1);
  EXPECT_FALSE(graphviz_available());
  expect_error([] { render_svg("digraph { a -> b }"); }, ErrorKind::NotImplemented,
               {"[render_svg]", "graphviz"});
  ::unsetenv("ADJOINT_DOT");
}

TEST(GraphSvg, InvalidDotIsAValueError) {
  if (!graphviz_available()) GTEST_SKIP() << "Graphviz's dot is not installed (package graphviz)";
  expect_error([] { render_svg("digraph { a -> "); }, ErrorKind::Value,
               {"[render_svg]", "rejected"});
}

}  // namespace
}  // namespace adjoint::testing
