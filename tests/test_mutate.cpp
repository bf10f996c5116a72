// The mutation generator of `scalelab grade --mutation-score`: each operator on a tiny snippet gives
// exactly the expected text; comments, strings, directives and signatures stay untouched; duplicates
// go; the order is fixed; and every lab's reference solution gives mutants to grade.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "labs/grader/mutate.h"

using scalelab::grade::Mutation;
using scalelab::grade::mutations;

namespace {

std::vector<Mutation> of_kind(const std::vector<Mutation>& all, const std::string& kind) {
  std::vector<Mutation> out;
  for (const Mutation& m : all)
    if (m.kind == kind) out.push_back(m);
  return out;
}

std::vector<std::string> texts(const std::vector<Mutation>& ms) {
  std::vector<std::string> out;
  for (const Mutation& m : ms) out.push_back(m.text);
  return out;
}

std::vector<std::string> texts_of(const std::string& source, const std::string& kind) {
  return texts(of_kind(mutations("f.cpp", source), kind));
}

TEST(Mutate, FlipComparison) {
  const std::string src = "bool f(int a, int b) {\n  return a < b && a >= 0 && a == b;\n}\n";
  EXPECT_EQ(texts_of(src, "flip comparison"),
            (std::vector<std::string>{"bool f(int a, int b) {\n  return a <= b && a >= 0 && a == b;\n}\n",
                                      "bool f(int a, int b) {\n  return a < b && a > 0 && a == b;\n}\n",
                                      "bool f(int a, int b) {\n  return a < b && a >= 0 && a != b;\n}\n"}));
  const std::vector<Mutation> flips = of_kind(mutations("f.cpp", src), "flip comparison");
  ASSERT_EQ(flips.size(), 3u);
  EXPECT_EQ(flips[0].file, "f.cpp");
  EXPECT_EQ(flips[0].line, 2);
  EXPECT_EQ(flips[0].before, "return a < b && a >= 0 && a == b;");
  EXPECT_EQ(flips[0].after, "return a <= b && a >= 0 && a == b;");
}

TEST(Mutate, TemplatesShiftsAndArrowsAreNoComparisons) {
  const std::string src =
      "void f() {\n"
      "  std::vector<int> v = static_cast<std::vector<int>>(w);\n"
      "  out << a >> b;\n"
      "  p->x = q->y;\n"
      "}\n";
  const std::vector<Mutation> all = mutations("f.cpp", src);
  EXPECT_TRUE(of_kind(all, "flip comparison").empty());
  EXPECT_TRUE(of_kind(all, "arithmetic").empty());
}

TEST(Mutate, Arithmetic) {
  const std::string src = "void f(int& a, int b) {\n  a += b * x - b / y + c;\n}\n";
  EXPECT_EQ(texts_of(src, "arithmetic"),
            (std::vector<std::string>{"void f(int& a, int b) {\n  a -= b * x - b / y + c;\n}\n",
                                      "void f(int& a, int b) {\n  a += b / x - b / y + c;\n}\n",
                                      "void f(int& a, int b) {\n  a += b * x + b / y + c;\n}\n",
                                      "void f(int& a, int b) {\n  a += b * x - b * y + c;\n}\n",
                                      "void f(int& a, int b) {\n  a += b * x - b / y - c;\n}\n"}));
  // A `+` that joins a string literal has no `-` that compiles.
  EXPECT_TRUE(texts_of("void f() {\n  s = \"a \" + t;\n}\n", "arithmetic").empty());
}

TEST(Mutate, Constant) {
  const std::string src = "int f() {\n  return 0 + 7 * x1 + 1 + 2.5 + 1'000u;\n}\n";
  EXPECT_EQ(texts_of(src, "constant"),
            (std::vector<std::string>{"int f() {\n  return 1 + 7 * x1 + 1 + 2.5 + 1'000u;\n}\n",
                                      "int f() {\n  return 0 + 8 * x1 + 1 + 2.5 + 1'000u;\n}\n",
                                      "int f() {\n  return 0 + 7 * x1 + 2 + 2.5 + 1'000u;\n}\n",
                                      "int f() {\n  return 0 + 7 * x1 + 0 + 2.5 + 1'000u;\n}\n",
                                      "int f() {\n  return 0 + 7 * x1 + 1 + 5.0 + 1'000u;\n}\n",
                                      "int f() {\n  return 0 + 7 * x1 + 1 + 2.5 + 1001u;\n}\n"}));
  // 0.0f doubled is itself: no mutant; 0.5f → 1.0f.
  EXPECT_EQ(texts_of("float f() {\n  return 0.0f + 0.5f;\n}\n", "constant"),
            (std::vector<std::string>{"float f() {\n  return 0.0f + 1.0f;\n}\n"}));
}

TEST(Mutate, Index) {
  const std::string src = "void f(int* v, int i) {\n  v[i] = v[0] + w[i * 2];\n  g([&] { return 1; });\n}\n";
  // v[0] is the constant operator's; a lambda's capture is no index.
  EXPECT_EQ(texts_of(src, "index"),
            (std::vector<std::string>{"void f(int* v, int i) {\n  v[i + 1] = v[0] + w[i * 2];\n  g([&] { return 1; });\n}\n",
                                      "void f(int* v, int i) {\n  v[i] = v[0] + w[i * 2 + 1];\n  g([&] { return 1; });\n}\n"}));
}

TEST(Mutate, NegateCondition) {
  const std::string src =
      "void f(int a) {\n"
      "  if (a) g();\n"
      "  if (a == 1) g();\n"
      "  if (a > 1 && a < 3) g();\n"
      "}\n";
  // `if (a == 1)` negated is its own flip: left to that operator.
  EXPECT_EQ(texts_of(src, "negate condition"),
            (std::vector<std::string>{"void f(int a) {\n  if (!(a)) g();\n  if (a == 1) g();\n  if (a > 1 && a < 3) g();\n}\n",
                                      "void f(int a) {\n  if (a) g();\n  if (a == 1) g();\n  if (!(a > 1 && a < 3)) g();\n}\n"}));
}

TEST(Mutate, DropCall) {
  const std::string src =
      "void f(P& pg) {\n"
      "  pg.send(out, to);\n"
      "  int x = g(1);\n"
      "  x = h(2);\n"
      "  return k(x);\n"
      "}\n";
  const std::vector<Mutation> drops = of_kind(mutations("f.cpp", src), "drop call");
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].text, "void f(P& pg) {\n  int x = g(1);\n  x = h(2);\n  return k(x);\n}\n");
  EXPECT_EQ(drops[0].line, 2);
  EXPECT_EQ(drops[0].before, "pg.send(out, to);");
  EXPECT_EQ(drops[0].after, "(deleted)");
  // A call over several lines goes whole; the body of a loop without braces stays.
  EXPECT_EQ(texts_of("void f() {\n  a(1,\n    2);\n  for (;;)\n    b();\n}\n", "drop call"),
            (std::vector<std::string>{"void f() {\n  for (;;)\n    b();\n}\n"}));
}

TEST(Mutate, SwapStatements) {
  const std::string src =
      "void f() {\n"
      "  a.x(1);\n"
      "  a.y();\n"
      "  b = c(a);\n"
      "  int x = c();\n"
      "  use(x);\n"
      "}\n";
  // a.y(); b = c(a); share a; a declaration is never swapped.
  const std::vector<Mutation> swaps = of_kind(mutations("f.cpp", src), "swap statements");
  ASSERT_EQ(swaps.size(), 2u);
  EXPECT_EQ(swaps[0].text, "void f() {\n  a.y();\n  a.x(1);\n  b = c(a);\n  int x = c();\n  use(x);\n}\n");
  EXPECT_EQ(swaps[0].line, 2);
  EXPECT_EQ(swaps[0].before, "a.x(1);\na.y();");
  EXPECT_EQ(swaps[0].after, "a.y();\na.x(1);");
  EXPECT_EQ(swaps[1].text, "void f() {\n  a.x(1);\n  b = c(a);\n  a.y();\n  int x = c();\n  use(x);\n}\n");
  EXPECT_EQ(swaps[1].line, 3);
  // Two that share no name: their order is not observable.
  EXPECT_TRUE(texts_of("void f() {\n  open.clear();\n  bytes = 0;\n}\n", "swap statements").empty());
}

TEST(Mutate, MoveWait) {
  const std::string src = "void f() {\n  a(w);\n  work->wait();\n  b(w);\n}\n";
  const std::vector<Mutation> all = mutations("f.cpp", src);
  ASSERT_EQ(of_kind(all, "move wait earlier").size(), 1u);
  ASSERT_EQ(of_kind(all, "move wait later").size(), 1u);
  const Mutation earlier = of_kind(all, "move wait earlier")[0], later = of_kind(all, "move wait later")[0];
  EXPECT_EQ(earlier.text, "void f() {\n  work->wait();\n  a(w);\n  b(w);\n}\n");
  EXPECT_EQ(earlier.line, 2);
  EXPECT_EQ(later.text, "void f() {\n  a(w);\n  b(w);\n  work->wait();\n}\n");
  EXPECT_EQ(later.line, 3);
  // The swaps of the wait with its neighbours are these very texts: listed once, as moves.
  EXPECT_TRUE(of_kind(all, "swap statements").empty());

  // Past a whole if block; not out of a loop's braces, nor before what it needs.
  const std::string block = "void f(int r) {\n  if (r == 0) {\n    write();\n  }\n  pg.barrier();\n}\n";
  const std::vector<Mutation> moves = of_kind(mutations("f.cpp", block), "move wait earlier");
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].text, "void f(int r) {\n  pg.barrier();\n  if (r == 0) {\n    write();\n  }\n}\n");
  EXPECT_EQ(moves[0].line, 2);
  EXPECT_EQ(moves[0].before, "if (r == 0) {\nwrite();\n}\npg.barrier();");
  EXPECT_EQ(moves[0].after, "pg.barrier();\nif (r == 0) {\nwrite();\n}");
  EXPECT_TRUE(of_kind(mutations("f.cpp", block), "move wait later").empty());
  const std::string loop = "void f() {\n  for (;;) {\n    t.join();\n    a(t);\n  }\n  Thread& u = x();\n  u.join();\n}\n";
  const std::vector<Mutation> loop_all = mutations("f.cpp", loop);
  EXPECT_TRUE(of_kind(loop_all, "move wait earlier").empty());
  EXPECT_EQ(texts(of_kind(loop_all, "move wait later")),
            (std::vector<std::string>{"void f() {\n  for (;;) {\n    a(t);\n    t.join();\n  }\n  Thread& u = x();\n  u.join();\n}\n"}));
}

TEST(Mutate, CommentsStringsDirectivesAndSignaturesStayUntouched) {
  const std::string src =
      "#include <vector>\n"
      "#define N 3 + 4\n"
      "// if (a < b) x = 1 + 2;\n"
      "const char* s = \"a < b + 1\";\n"
      "int f(int a = 1, int b[2]) {\n"
      "  /* 1 + 2 < 3 */ g(\"x == 1 + 2\", 'a', R\"(y < 1)\");\n"
      "}\n";
  const std::vector<Mutation> all = mutations("f.cpp", src);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].kind, "drop call");
  EXPECT_EQ(all[0].line, 6);
  // A function on one line still has its body mutated.
  EXPECT_EQ(texts_of("namespace n {\nint g() { return 4; }\n}\n", "constant"),
            (std::vector<std::string>{"namespace n {\nint g() { return 5; }\n}\n"}));
}

TEST(Mutate, DuplicatesRemovedAndOrderFixed) {
  // Dropping either a(); gives the same text: once, the first line's. Swapping them gives the source.
  const std::vector<Mutation> same = mutations("f.cpp", "void f() {\n  a();\n  a();\n}\n");
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].kind, "drop call");
  EXPECT_EQ(same[0].line, 2);

  const std::string src = "int f(int n) {\n  int s = 0;\n  for (int i = 0; i < n; ++i) s += g(i);\n  return s * 2;\n}\n";
  const std::vector<Mutation> all = mutations("f.cpp", src);
  std::vector<std::string> got;
  for (const Mutation& m : all) got.push_back(std::to_string(m.line) + " " + m.kind);
  EXPECT_EQ(got, (std::vector<std::string>{"2 constant", "3 flip comparison", "3 arithmetic", "3 constant", "4 arithmetic",
                                           "4 constant"}));
  std::set<std::string> distinct;
  for (const Mutation& m : all) {
    EXPECT_NE(m.text, src);
    EXPECT_TRUE(distinct.insert(m.text).second);
  }
  // The same input, the same list.
  EXPECT_EQ(texts(mutations("f.cpp", src)), texts(all));
}

TEST(Mutate, OddInputGivesAListNoThrow) {
  for (const std::string s : {"", "}", "}}}{{{", "\"unterminated", "/* open", "if (", "void f() { if (", "R\"x(",
                              "void f() {\n  x[;\n  1'", "#", "\n\n\n", "void f() {\n  a();\n  b();"}) {
    EXPECT_NO_THROW(mutations("f.cpp", s)) << s;
  }
  EXPECT_TRUE(mutations("f.cpp", "").empty());
  // No final newline: the texts have none either.
  const std::vector<Mutation> all = mutations("f.cpp", "void f() {\n  a(x);\n  b(x);\n}");
  ASSERT_FALSE(all.empty());
  for (const Mutation& m : all) EXPECT_NE(m.text.back(), '\n') << m.kind;
}

TEST(Mutate, EveryLabSolutionGivesMutants) {
  namespace fs = std::filesystem;
  const fs::path labs = fs::path(SCALELAB_SOURCE_DIR) / "labs";
  int files = 0;
  for (const fs::directory_entry& lab : fs::directory_iterator(labs)) {
    const fs::path solution = lab.path() / "solution";
    if (!fs::is_directory(solution)) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(solution)) {
      if (f.path().extension() != ".cpp") continue;
      std::ifstream in(f.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string source = text.str();
      const std::string name = f.path().filename().string();
      const std::vector<Mutation> all = mutations(name, source);
      const int lines = static_cast<int>(std::count(source.begin(), source.end(), '\n')) + 1;
      std::cout << lab.path().filename().string() << "/" << name << ": " << all.size() << " mutants\n";
      EXPECT_GE(all.size(), 10u) << f.path();
      std::set<std::string> distinct;
      for (const Mutation& m : all) {
        EXPECT_NE(m.text, source) << f.path() << ":" << m.line << " " << m.kind;
        EXPECT_TRUE(distinct.insert(m.text).second) << f.path() << ":" << m.line;
        EXPECT_EQ(m.file, name);
        EXPECT_GE(m.line, 1);
        EXPECT_LE(m.line, lines);
        EXPECT_FALSE(m.before.empty());
        EXPECT_FALSE(m.after.empty());
      }
      ++files;
    }
  }
  EXPECT_GE(files, 9);
}

}  // namespace
