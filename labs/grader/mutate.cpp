#include "labs/grader/mutate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <unordered_set>

namespace scalelab::grade {

namespace {

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (is_space(s[b]) || s[b] == '\n')) ++b;
  while (e > b && (is_space(s[e - 1]) || s[e - 1] == '\n')) --e;
  return s.substr(b, e - b);
}

// The source with everything that is not code blanked (comments, the insides of string and char
// literals, whole preprocessor lines) and newlines kept: operators look for their patterns here and
// edit the source at the same offsets, so a `<` in a comment or a "1" in a string is never touched.
std::string code_only(const std::string& s) {
  std::string m = s;
  const size_t n = s.size();
  bool line_start = true;  // only blanks so far on this line: a '#' here starts a directive
  size_t i = 0;
  auto blank = [&](size_t k) {
    if (m[k] != '\n') m[k] = ' ';
  };
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a directive, with its backslash continuations
      while (i < n && !(s[i] == '\n' && (i == 0 || s[i - 1] != '\\'))) blank(i++);
      continue;
    }
    if (!is_space(c)) line_start = false;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') blank(i++);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? n : end + 2;
      while (i < stop) blank(i++);
      continue;
    }
    if (c == '"' && i > 0 && s[i - 1] == 'R' && (i < 2 || !is_ident(s[i - 2]) || s[i - 2] == '8' ||
                                                 s[i - 2] == 'u' || s[i - 2] == 'U' || s[i - 2] == 'L')) {
      // R"delim( ... )delim": its end is the first `)delim"`.
      const size_t open = s.find('(', i + 1);
      if (open == std::string::npos || s.find('\n', i) < open) {
        ++i;
        continue;
      }
      const std::string close = ")" + s.substr(i + 1, open - i - 1) + "\"";
      const size_t end = s.find(close, open);
      const size_t stop = end == std::string::npos ? n : end + close.size() - 1;
      for (size_t k = i + 1; k < stop; ++k) blank(k);
      i = stop + 1;
      continue;
    }
    if (c == '\'') {
      // A digit separator (1'000) when the token it is in starts with a digit; else a char literal.
      size_t t = i;
      while (t > 0 && (is_ident(s[t - 1]) || s[t - 1] == '\'')) --t;
      if (t < i && is_digit(s[t])) {
        ++i;
        continue;
      }
    }
    if (c == '"' || c == '\'') {  // a literal: its quotes stay, its inside goes (to the line's end at worst)
      size_t k = i + 1;
      while (k < n && s[k] != c && s[k] != '\n') k += s[k] == '\\' ? 2 : 1;
      const size_t stop = std::min(k, n);
      for (size_t j = i + 1; j < stop; ++j) blank(j);
      i = stop < n && s[stop] == c ? stop + 1 : stop;
      continue;
    }
    ++i;
  }
  return m;
}

enum class BraceKind { name_space, block, type, init };

// The identifier that ends just before `end` in `m` (empty if none).
std::string word_before(const std::string& m, size_t end) {
  size_t b = end;
  while (b > 0 && is_ident(m[b - 1])) --b;
  return m.substr(b, end - b);
}

bool has_word(const std::string& text, const std::string& w) {
  for (size_t at = text.find(w); at != std::string::npos; at = text.find(w, at + 1)) {
    const bool left = at == 0 || !is_ident(text[at - 1]);
    const bool right = at + w.size() >= text.size() || !is_ident(text[at + w.size()]);
    if (left && right) return true;
  }
  return false;
}

// What the `{` at `at` opens, from what precedes it: a namespace (transparent: its contents are
// declarations, not code), a block of statements (a function, lambda, if, loop), a class body, or a
// braced initializer.
BraceKind brace_kind(const std::string& m, size_t at) {
  size_t from = at;
  while (from > 0 && m[from - 1] != ';' && m[from - 1] != '{' && m[from - 1] != '}') --from;
  const std::string prefix = m.substr(from, at - from);
  if (has_word(prefix, "namespace") || has_word(prefix, "extern")) return BraceKind::name_space;
  size_t j = at;
  while (j > 0 && (is_space(m[j - 1]) || m[j - 1] == '\n')) --j;
  if (j == 0) return BraceKind::block;
  const char p = m[j - 1];
  if (p == ')' || p == ']' || p == ';' || p == '{' || p == '}' || p == ':') return BraceKind::block;
  for (const char* w : {"struct", "class", "union", "enum"})
    if (has_word(prefix, w)) return BraceKind::type;
  const std::string w = word_before(m, j);
  for (const char* k : {"else", "try", "do", "const", "noexcept", "override", "final", "mutable"})
    if (w == k) return BraceKind::block;
  return BraceKind::init;
}

// What a line of the source looks like to the statement operators.
struct Line {
  size_t begin = 0, end = 0;  // offsets of the line in the source, end at its '\n'
  std::string code;           // the line as code_only has it, trimmed ("" for no code)
  int depth_begin = 0, depth_end = 0;        // braces open at its start and its end
  long brace_begin = -1, brace_end = -1;     // offset of the innermost open brace there (-1: none)
  BraceKind kind_begin = BraceKind::name_space;
  int paren_begin = 0, paren_end = 0;  // ( and [ open at its start and end, within that brace
};

std::string first_word(const std::string& t) {
  size_t e = 0;
  while (e < t.size() && is_ident(t[e])) ++e;
  return t.substr(0, e);
}

bool is_one_of(const std::string& w, std::initializer_list<const char*> words) {
  for (const char* k : words)
    if (w == k) return true;
  return false;
}

bool is_jump(const std::string& w) { return is_one_of(w, {"return", "break", "continue", "throw", "goto", "co_return"}); }

bool is_keyword_start(const std::string& w) {
  return is_jump(w) || is_one_of(w, {"if", "for", "while", "switch", "do", "try", "else", "catch", "case", "default",
                                     "using", "typedef", "static_assert", "delete", "new", "co_await", "co_yield"});
}

// The names a one-statement declaration introduces (`const int n = 1, r = 2;` → n, r; `Segment s;`
// → s); empty for anything else. A heuristic: at least two words before the first top-level `=`,
// `(`, `[`, `{` or `;`, template arguments, `&` and `*` aside.
std::vector<std::string> declared_names(const std::string& t) {
  if (is_keyword_start(first_word(t))) return {};
  size_t stop = t.size();
  for (size_t k = 0; k < t.size(); ++k) {
    const char c = t[k];
    if (c == '(' || c == '[' || c == '{' || c == ';') {
      stop = k;
      break;
    }
    if (c == '=') {
      if (k + 1 < t.size() && t[k + 1] == '=') return {};
      if (k > 0 && std::string("+-*/%&|^<>!").find(t[k - 1]) != std::string::npos) return {};
      stop = k;
      break;
    }
  }
  std::string prefix;
  int angle = 0;
  for (size_t k = 0; k < stop; ++k) {
    const char c = t[k];
    if (c == '<') ++angle;
    if (angle == 0) prefix += (c == '&' || c == '*') ? ' ' : c;
    if (c == '>' && angle > 0) --angle;
  }
  std::vector<std::string> words;
  std::istringstream in(prefix);
  for (std::string w; in >> w;) words.push_back(w);
  if (words.size() < 2) return {};
  const std::string& name = words.back();
  if (name.empty() || is_digit(name[0]) || !std::all_of(name.begin(), name.end(), is_ident)) return {};
  std::vector<std::string> names{name};
  // Further declarators: `, name =`, `, name(`, `, name{`, `, name;` at the top level.
  int depth = 0;
  for (size_t k = stop; k < t.size(); ++k) {
    const char c = t[k];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c != ',' || depth != 0) continue;
    size_t b = k + 1;
    while (b < t.size() && is_space(t[b])) ++b;
    size_t e = b;
    while (e < t.size() && is_ident(t[e])) ++e;
    size_t after = e;
    while (after < t.size() && is_space(t[after])) ++after;
    if (e > b && after < t.size() && std::string("=({;,").find(t[after]) != std::string::npos)
      names.push_back(t.substr(b, e - b));
  }
  return names;
}

// Whether `t` names `w` itself (not a member `x.w`, `x->w` or a qualified `n::w`).
bool uses(const std::string& t, const std::string& w) {
  for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
    if (at > 0 && is_ident(t[at - 1])) continue;
    if (at + w.size() < t.size() && is_ident(t[at + w.size()])) continue;
    if (at > 0 && (t[at - 1] == '.' || (at > 1 && t[at - 1] == '>' && t[at - 2] == '-') ||
                   (at > 1 && t[at - 1] == ':' && t[at - 2] == ':')))
      continue;
    return true;
  }
  return false;
}

bool uses_any(const std::string& t, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& w) { return uses(t, w); });
}

// A statement of a block, whole lines only: one line, or a call or loop over several.
struct Statement {
  int first = 0, last = 0;  // 0-based line indices
  long block = -1;          // the brace it is in
  std::string indent;       // its first line's leading blanks
  std::string code;         // its code, lines joined by a blank
  std::string head;         // its first word
  std::vector<std::string> declares;
};

bool is_call(const Statement& s) {
  const std::string& t = s.code;
  if (is_keyword_start(s.head) || !s.declares.empty()) return false;
  if (t.size() < 2 || t.compare(t.size() - 2, 2, ");") != 0) return false;
  int depth = 0;
  for (size_t k = 0; k < t.size(); ++k) {  // an assignment at the top level is no call statement
    const char c = t[k];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c != '=' || depth != 0) continue;
    const bool comparison =
        (k + 1 < t.size() && t[k + 1] == '=') || (k > 0 && std::string("=!<>").find(t[k - 1]) != std::string::npos);
    if (!comparison) return false;
  }
  return true;
}

// Whether the statement calls something named like a wait: wait, join, synchronize, barrier.
bool calls_wait(const std::string& t) {
  for (size_t k = 0; k < t.size();) {
    if (!is_ident(t[k]) || (k > 0 && is_ident(t[k - 1]))) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < t.size() && is_ident(t[e])) ++e;
    std::string name = t.substr(k, e - k);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    size_t after = e;
    while (after < t.size() && is_space(t[after])) ++after;
    if (after < t.size() && t[after] == '(')
      for (const char* w : {"wait", "join", "synchronize", "barrier"})
        if (name.find(w) != std::string::npos) return true;
    k = e;
  }
  return false;
}

// The names a statement uses itself: identifiers not after `.`, `->` or `::` nor before `::`, keywords aside.
std::vector<std::string> root_names(const std::string& t) {
  std::vector<std::string> out;
  for (size_t k = 0; k < t.size();) {
    if (!is_ident(t[k]) || is_digit(t[k])) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < t.size() && is_ident(t[e])) ++e;
    const std::string w = t.substr(k, e - k);
    const bool member = k > 0 && (t[k - 1] == '.' || (k > 1 && t[k - 1] == '>' && t[k - 2] == '-') ||
                                  (k > 1 && t[k - 1] == ':' && t[k - 2] == ':'));
    const bool qualifier = e + 1 < t.size() && t[e] == ':' && t[e + 1] == ':';  // Phase::fwd names no variable
    const bool keyword =
        is_keyword_start(w) || is_one_of(w, {"static_cast", "const", "auto", "true", "false", "nullptr", "this"});
    if (!member && !qualifier && !keyword) out.push_back(w);
    k = e;
  }
  return out;
}

bool shares_name(const std::string& a, const std::string& b) { return uses_any(b, root_names(a)); }

// Whether the statement calls a function: a name then `(`, casts aside.
bool makes_call(const std::string& t) {
  for (size_t k = 1; k < t.size(); ++k) {
    if (t[k] != '(') continue;
    size_t e = k;
    while (e > 0 && is_space(t[e - 1])) --e;
    const std::string w = word_before(t, e);
    if (!w.empty() && !is_keyword_start(w) && !is_one_of(w, {"static_cast", "sizeof", "decltype", "alignof"}) &&
        !(w.size() > 5 && w.compare(w.size() - 5, 5, "_cast") == 0))
      return true;
    if (e > 0 && t[e - 1] == '>') return true;  // a template's call, f<T>(x)
  }
  return false;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e = s.find('\n'); e != std::string::npos; e = s.find('\n', b)) {
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  out.push_back(s.substr(b));  // "" after a final newline: joining gives the text back exactly
  return out;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) out += (k ? "\n" : "") + lines[k];
  return out;
}

// Lines lo..hi (0-based, inclusive), each trimmed, blank ones left out, joined by '\n'.
std::string excerpt(const std::vector<std::string>& lines, int lo, int hi) {
  std::string out;
  for (int k = std::max(lo, 0); k <= hi && k < static_cast<int>(lines.size()); ++k) {
    const std::string t = trim(lines[static_cast<size_t>(k)]);
    if (!t.empty()) out += (out.empty() ? "" : "\n") + t;
  }
  return out;
}

// The kinds, in the order they are listed for one line.
enum Rank { flip, arithmetic, constant, index, negate, drop, move_earlier, move_later, swap };
const char* kind_name(Rank r) {
  switch (r) {
    case flip: return "flip comparison";
    case arithmetic: return "arithmetic";
    case constant: return "constant";
    case index: return "index";
    case negate: return "negate condition";
    case drop: return "drop call";
    case move_earlier: return "move wait earlier";
    case move_later: return "move wait later";
    case swap: return "swap statements";
  }
  return "";
}

struct Candidate {
  Rank rank;
  Mutation m;
};

class Generator {
 public:
  Generator(const std::string& file, const std::string& source)
      : file_(file), src_(source), code_(code_only(source)), lines_(split_lines(source)) {
    scan();
  }

  std::vector<Mutation> run() {
    expression_operators();
    statement_operators();
    std::stable_sort(out_.begin(), out_.end(), [](const Candidate& a, const Candidate& b) {
      return a.m.line != b.m.line ? a.m.line < b.m.line : a.rank < b.rank;
    });
    std::vector<Mutation> result;
    std::unordered_set<std::string> seen{src_};
    for (Candidate& c : out_)
      if (seen.insert(c.m.text).second) result.push_back(std::move(c.m));
    return result;
  }

 private:
  // Braces and parentheses, char by char: which chars are code to mutate (inside a body), and
  // the state at every line's start and end.
  void scan() {
    struct Open {
      size_t at;
      BraceKind kind;
      int saved_paren;
    };
    std::vector<Open> stack;
    int paren = 0, bodies = 0;  // bodies: open braces other than namespaces
    in_body_.assign(src_.size(), false);
    size_t line_begin = 0;
    auto state = [&](int& depth, long& brace, int& p) {
      depth = static_cast<int>(stack.size());
      brace = stack.empty() ? -1 : static_cast<long>(stack.back().at);
      p = paren;
    };
    Line cur;
    state(cur.depth_begin, cur.brace_begin, cur.paren_begin);
    cur.kind_begin = stack.empty() ? BraceKind::name_space : stack.back().kind;
    for (size_t i = 0; i <= src_.size(); ++i) {
      if (i == src_.size() || src_[i] == '\n') {
        cur.begin = line_begin;
        cur.end = i;
        cur.code = trim(code_.substr(line_begin, i - line_begin));
        state(cur.depth_end, cur.brace_end, cur.paren_end);
        info_.push_back(cur);
        cur = Line();
        line_begin = i + 1;
        state(cur.depth_begin, cur.brace_begin, cur.paren_begin);
        cur.kind_begin = stack.empty() ? BraceKind::name_space : stack.back().kind;
        continue;
      }
      const char c = code_[i];
      in_body_[i] = bodies > 0;
      if (c == '(' || c == '[') ++paren;
      if ((c == ')' || c == ']') && paren > 0) --paren;
      if (c == '{') {
        const BraceKind kind = brace_kind(code_, i);
        stack.push_back({i, kind, paren});
        paren = 0;
        bodies += kind != BraceKind::name_space;
      }
      if (c == '}' && !stack.empty()) {
        paren = stack.back().saved_paren;
        bodies -= stack.back().kind != BraceKind::name_space;
        stack.pop_back();
      }
    }
  }

  int line_of(size_t offset) const {
    return static_cast<int>(std::count(src_.begin(), src_.begin() + static_cast<long>(offset), '\n'));
  }

  // A mutation replacing [at, at + len) of the source with `with`. One per line for each change of
  // the same text into the same text (`512` → `513` twice on a line, `[j]` → `[j + 1]`): to a
  // check they are the same fault, and each mutant costs a build and a run.
  void edit(Rank rank, size_t at, size_t len, const std::string& with, const std::string& what = "") {
    const std::string key = std::to_string(line_of(at)) + '\n' + std::to_string(rank) + '\n' +
                            (what.empty() ? src_.substr(at, len) : what) + '\n' + with;
    if (!done_.insert(key).second) return;
    Mutation m;
    m.file = file_;
    m.kind = kind_name(rank);
    m.text = src_.substr(0, at) + with + src_.substr(at + len);
    const int lo = line_of(at), hi = line_of(at + len);
    m.line = lo + 1;
    m.before = excerpt(lines_, lo, hi);
    m.after = excerpt(split_lines(m.text), lo, hi);
    out_.push_back({rank, std::move(m)});
  }

  // A mutation giving the file new lines; lines lo..hi of before and after are reported.
  void relines(Rank rank, const std::vector<std::string>& lines, int lo, int hi) {
    Mutation m;
    m.file = file_;
    m.kind = kind_name(rank);
    m.line = lo + 1;
    m.text = join_lines(lines);
    m.before = excerpt(lines_, lo, hi);
    m.after = excerpt(lines, lo, hi);
    out_.push_back({rank, std::move(m)});
  }

  // The first char other than a blank from `k` on (step +1) or before `k` (step -1).
  char neighbour(size_t k, int step) const {
    for (long j = static_cast<long>(k) + (step < 0 ? -1 : 0); j >= 0 && j < static_cast<long>(code_.size()); j += step) {
      const char c = code_[static_cast<size_t>(j)];
      if (!is_space(c) && c != '\n') return c;
    }
    return '\0';
  }

  bool body(size_t k) const { return k < code_.size() && in_body_[k]; }
  char at(size_t k) const { return k < code_.size() ? code_[k] : '\0'; }

  void expression_operators() {
    const size_t n = code_.size();
    // flip comparison, and arithmetic: operators written with a blank on each side.
    static const std::pair<const char*, const char*> flips[] = {
        {"<", "<="}, {"<=", "<"}, {">", ">="}, {">=", ">"}, {"==", "!="}, {"!=", "=="}};
    static const std::pair<const char*, const char*> ariths[] = {{"+", "-"},   {"-", "+"},   {"*", "/"},  {"/", "*"},
                                                                 {"+=", "-="}, {"-=", "+="}, {"*=", "/="}, {"/=", "*="}};
    for (size_t i = 1; i < n; ++i) {
      if (!body(i) || at(i - 1) != ' ') continue;
      size_t e = i;
      while (e < n && std::string("<>=!+-*/").find(code_[e]) != std::string::npos) ++e;
      if (e == i || at(e) != ' ') continue;
      const std::string op = code_.substr(i, e - i);
      for (const auto& [from, to] : flips)
        if (op == from) edit(flip, i, op.size(), to);
      // `"name " + x` joins strings: its `-` would not compile.
      if (op == "+" && (neighbour(i, -1) == '"' || neighbour(e, +1) == '"')) continue;
      for (const auto& [from, to] : ariths)
        if (op == from) edit(arithmetic, i, op.size(), to);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!body(i) || !is_digit(code_[i])) continue;
      if (i > 0 && (is_ident(code_[i - 1]) || code_[i - 1] == '.' || code_[i - 1] == '\'')) continue;
      size_t e = i;
      while (e < n && (is_ident(code_[e]) || code_[e] == '.' || code_[e] == '\'' ||
                       ((code_[e] == '+' || code_[e] == '-') && std::string("eE").find(code_[e - 1]) != std::string::npos)))
        ++e;
      numeric_literal(i, src_.substr(i, e - i));
      i = e;
    }
    // index: `[expr]` after a name, `)` or `]` (not a lambda's capture, not an attribute).
    for (size_t i = 1; i < n; ++i) {
      if (!body(i) || code_[i] != '[' || !(is_ident(code_[i - 1]) || code_[i - 1] == ')' || code_[i - 1] == ']')) continue;
      int depth = 0;
      size_t close = std::string::npos;
      for (size_t k = i; k < n && code_[k] != '\n'; ++k) {
        if (code_[k] == '[') ++depth;
        if (code_[k] == ']' && --depth == 0) {
          close = k;
          break;
        }
      }
      if (close == std::string::npos) continue;
      const std::string expr = trim(code_.substr(i + 1, close - i - 1));
      const bool literal = !expr.empty() && std::all_of(expr.begin(), expr.end(), is_digit);
      if (expr.empty() || literal) continue;  // a literal index is the constant operator's
      edit(index, close, 0, " + 1", code_.substr(i, close - i + 1));
    }
    // negate condition: `if (cond)` → `if (!(cond))`.
    for (size_t i = 0; i + 2 < n; ++i) {
      if (!body(i) || code_.compare(i, 2, "if") != 0 || (i > 0 && is_ident(code_[i - 1])) || is_ident(at(i + 2)))
        continue;
      size_t open = i + 2;
      while (open < n && (is_space(code_[open]) || code_[open] == '\n')) ++open;
      if (code_.compare(open, 9, "constexpr") == 0) open += 9;
      while (open < n && (is_space(code_[open]) || code_[open] == '\n')) ++open;
      if (at(open) != '(') continue;
      int depth = 0;
      size_t close = std::string::npos;
      for (size_t k = open; k < n; ++k) {
        if (code_[k] == '(') ++depth;
        if (code_[k] == ')' && --depth == 0) {
          close = k;
          break;
        }
      }
      if (close == std::string::npos) continue;
      const std::string cond = code_.substr(open + 1, close - open - 1);
      if (cond.find(';') != std::string::npos || trim(cond).empty()) continue;  // an init-statement
      if (single_equality(cond)) continue;  // flipping its == or != is this very mutant
      edit(negate, open + 1, close - open - 1, "!(" + src_.substr(open + 1, close - open - 1) + ")");
    }
  }

  // Whether `cond` is one `==` or `!=` and nothing else that combines or compares.
  static bool single_equality(const std::string& cond) {
    int equalities = 0;
    for (size_t k = 0; k + 1 < cond.size(); ++k) {
      const std::string two = cond.substr(k, 2);
      if (two == "&&" || two == "||" || cond[k] == '?') return false;
      if (two == "==" || two == "!=") ++equalities;
      if ((two == "<=" || two == ">=" || two == " <" || two == " >") && k + 2 < cond.size() && cond[k + 2] == ' ')
        return false;
    }
    return equalities == 1;
  }

  // constant: an integer c → c + 1 (and 1 → 0); a floating literal x → 2x.
  void numeric_literal(size_t at, const std::string& token) {
    if (token.size() > 1 && token[0] == '0' && std::string("xXbB").find(token[1]) != std::string::npos) return;
    const bool floating = token.find_first_of(".eE") != std::string::npos;
    size_t body_end = token.size();
    const std::string suffixes = floating ? "fFlL" : "uUlLzZ";
    while (body_end > 0 && suffixes.find(token[body_end - 1]) != std::string::npos) --body_end;
    std::string digits;
    for (size_t k = 0; k < body_end; ++k)
      if (token[k] != '\'') digits += token[k];
    const std::string suffix = token.substr(body_end);
    if (digits.empty()) return;
    if (!floating) {
      if (!std::all_of(digits.begin(), digits.end(), is_digit)) return;
      if ((digits.size() > 1 && digits[0] == '0') || digits.size() > 17) return;  // octal, or too large
      const int64_t c = std::stoll(digits);
      edit(constant, at, token.size(), std::to_string(c + 1) + suffix);
      // c − 1 too only for 1 (→ 0): elsewhere a check that catches c + 1 catches c − 1 as well, and
      // each mutant costs a build and a run.
      if (c == 1) edit(constant, at, token.size(), std::to_string(c - 1) + suffix);
      return;
    }
    for (char ch : digits)
      if (!is_digit(ch) && std::string(".eE+-").find(ch) == std::string::npos) return;
    char* end = nullptr;
    const double x = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str() + digits.size() || x == 0 || !std::isfinite(2 * x)) return;
    std::ostringstream s;
    s << std::setprecision(15) << 2 * x;
    std::string twice = s.str();
    if (twice.find_first_of(".e") == std::string::npos) twice += ".0";
    edit(constant, at, token.size(), twice + suffix);
  }

  // The statements of every block (function body, loop, lambda …), as whole lines.
  std::vector<Statement> statements() const {
    std::vector<Statement> out;
    const int count = static_cast<int>(info_.size());
    auto next_code = [&](int from) {
      int k = from;
      while (k < count && info_[static_cast<size_t>(k)].code.empty()) ++k;
      return k;
    };
    int previous = -1;  // the last line with code before the current one
    for (int i = 0; i < count; previous = info_[static_cast<size_t>(i)].code.empty() ? previous : i, ++i) {
      const Line& l = info_[static_cast<size_t>(i)];
      if (l.code.empty() || l.kind_begin != BraceKind::block || l.paren_begin != 0 || previous < 0) continue;
      const char before = info_[static_cast<size_t>(previous)].code.back();
      if (before != ';' && before != '{' && before != '}') continue;  // a continuation, or a loop's body
      const std::string head = first_word(l.code);
      if (l.code[0] == '}' || head == "else" || head == "catch") continue;
      // Its end: back at this depth in this block, no parenthesis open, a `;` or `}` last, and
      // nothing (else, catch, a do's while) to follow.
      int last = -1;
      for (int j = i; j < count; ++j) {
        const Line& e = info_[static_cast<size_t>(j)];
        if (e.depth_end < l.depth_begin) break;
        if (e.code.empty() || e.depth_end != l.depth_begin || e.brace_end != l.brace_begin || e.paren_end != 0) continue;
        if (e.code.back() != ';' && e.code.back() != '}') continue;
        const int after = next_code(j + 1);
        const std::string then = after < count ? first_word(info_[static_cast<size_t>(after)].code) : "";
        if (then == "else" || then == "catch" || (then == "while" && head == "do")) continue;
        last = j;
        break;
      }
      if (last < 0) continue;
      Statement s;
      s.first = i;
      s.last = last;
      s.block = l.brace_begin;
      const std::string& text = lines_[static_cast<size_t>(i)];
      s.indent = text.substr(0, text.find_first_not_of(" \t"));
      for (int k = i; k <= last; ++k) {
        const std::string& code = info_[static_cast<size_t>(k)].code;
        if (!code.empty()) s.code += (s.code.empty() ? "" : " ") + code;
      }
      s.head = head;
      s.declares = declared_names(s.code);
      out.push_back(s);
      // A statement's inner lines (a loop's body) are found as statements of their own blocks.
    }
    return out;
  }

  void statement_operators() {
    const std::vector<Statement> all = statements();
    // The statement after `s` in its block, if any (blank and comment lines may lie between).
    auto next_of = [&](size_t s) -> const Statement* {
      for (size_t k = s + 1; k < all.size(); ++k) {
        if (all[k].first <= all[s].last) continue;
        bool only_blank = true;
        for (int j = all[s].last + 1; j < all[k].first; ++j)
          only_blank = only_blank && info_[static_cast<size_t>(j)].code.empty();
        return only_blank && all[k].block == all[s].block && all[k].indent == all[s].indent ? &all[k] : nullptr;
      }
      return nullptr;
    };
    for (size_t k = 0; k < all.size(); ++k) {
      const Statement& s = all[k];
      const Statement* next = next_of(k);
      if (is_call(s)) {  // drop call
        std::vector<std::string> lines = lines_;
        lines.erase(lines.begin() + s.first, lines.begin() + s.last + 1);
        Mutation m;
        m.file = file_;
        m.kind = kind_name(drop);
        m.line = s.first + 1;
        m.text = join_lines(lines);
        m.before = excerpt(lines_, s.first, s.last);
        m.after = "(deleted)";
        out_.push_back({drop, std::move(m)});
      }
      if (!next) continue;
      const Statement& t = *next;
      // move wait: a one-line statement that waits, one statement earlier or later in its block.
      // Not past a jump (the wait would be dead), not before what declares a name it uses.
      if (t.first == t.last && calls_wait(t.code) && !is_jump(t.head) && !is_jump(s.head) && !uses_any(t.code, s.declares))
        relines(move_earlier, moved(t.first, s.first), s.first, t.last);
      if (s.first == s.last && calls_wait(s.code) && !is_jump(s.head) && !is_jump(t.head) && !uses_any(t.code, s.declares))
        relines(move_later, moved(s.first, t.last), s.first, t.last);
      // swap statements: two one-liners on consecutive lines, neither a jump nor a declaration (a
      // declaration swapped with what does not use it changes nothing; with what does, it does not compile).
      // Nor two that share no name or make no call (`open.clear(); open_bytes = 0;`, `s.a = a; s.b = b;`):
      // their order is very likely not observable.
      if (s.first == s.last && t.first == s.last + 1 && t.first == t.last && !is_jump(s.head) && !is_jump(t.head) &&
          s.declares.empty() && t.declares.empty() && shares_name(s.code, t.code) &&
          (makes_call(s.code) || makes_call(t.code))) {
        std::vector<std::string> lines = lines_;
        std::swap(lines[static_cast<size_t>(s.first)], lines[static_cast<size_t>(t.first)]);
        relines(swap, lines, s.first, t.first);
      }
    }
  }

  // The source's lines with line `from` taken out and put back: before line `to` when `to` < `from`,
  // else after it (indices as in the source: after the removal, index `to` is just past that line).
  std::vector<std::string> moved(int from, int to) const {
    std::vector<std::string> lines = lines_;
    const std::string line = lines[static_cast<size_t>(from)];
    lines.erase(lines.begin() + from);
    lines.insert(lines.begin() + to, line);
    return lines;
  }

  std::string file_, src_, code_;
  std::vector<std::string> lines_;
  std::vector<Line> info_;
  std::vector<bool> in_body_;
  std::vector<Candidate> out_;
  std::unordered_set<std::string> done_;  // the expression edits made: line, kind, from, to
};

}  // namespace

std::vector<Mutation> mutations(const std::string& file, const std::string& source) {
  return Generator(file, source).run();
}

}  // namespace scalelab::grade
