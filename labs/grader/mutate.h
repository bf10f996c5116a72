#pragma once
// The mutation generator of `scalelab grade LAB --mutation-score`: simple source mutations of a lab's
// reference solution, each a whole mutated file for the grader to build and grade. The share of
// mutants the rubric catches says how well the checks pin the solution down. Pure text: no I/O.
#include <string>
#include <vector>

namespace scalelab::grade {

// One automatic mutation of a student file: what changed, where, and the whole mutated text.
struct Mutation {
  std::string file;    // the student file it changes, e.g. "ring.cpp" (as given)
  int line = 0;        // 1-based line of the change (the first line, for a move)
  std::string kind;    // "flip comparison", "arithmetic", "constant", "index", "negate condition",
                       // "drop call", "move wait earlier", "move wait later", "swap statements"
  std::string before;  // the line(s) as they were, each trimmed, joined by '\n' (blank lines left out)
  std::string after;   // the line(s) as they are now, likewise; "(deleted)" for a drop
  std::string text;    // the whole mutated file
};

// Every mutation of `source` (the file `file`), in a fixed order (by line, then by operator in the
// order of the kinds above, then by column), with duplicates (the same resulting text, or the source
// itself) removed. Only code inside a function (or class) body is mutated: never comments, string
// or char literals, preprocessor lines, or signatures. Heuristic by design: the caller builds each
// mutant and drops those that do not compile. Any text gives a (possibly empty) list.
std::vector<Mutation> mutations(const std::string& file, const std::string& source);

}  // namespace scalelab::grade
