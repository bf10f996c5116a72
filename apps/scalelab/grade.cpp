// `scalelab grade`: the lab grader's command line. Builds a submission into a lab's harness, runs
// the rubric (labs/<lab>/checks.json), prints a table, and writes Gradescope's results.json and
// JUnit XML on request. Exit 0: every check passed; 1: some did not; 2: the grader could not run.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "apps/scalelab/bench.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "labs/grader/grader.h"

namespace scalelab {

int run_grade(const GradeCliOptions& o) {
  const std::string labs_dir = o.labs_dir.empty() ? grade::default_labs_dir() : o.labs_dir;
  if (!o.release_path.empty()) {
    if (!o.lab.empty()) throw UsageError("grade", "--release packs every lab; drop the lab name '" + o.lab + "'");
    grade::release(labs_dir, o.release_path);
    std::printf("[grade] the student hand-out of %zu lab(s) is in %s (no solutions, mutants or hidden checks)\n",
                grade::list_labs(labs_dir).size(), o.release_path.c_str());
    return 0;
  }
  if (o.lab.empty()) {
    std::string list;
    for (const auto& l : grade::list_labs(labs_dir)) list += "\n  " + l;
    throw UsageError("grade", "name the lab to grade, e.g. `scalelab grade 01-collectives` — the labs in " + labs_dir +
                                  ":" + (list.empty() ? std::string(" (none)") : list));
  }
  grade::Options g;
  g.labs_dir = labs_dir;
  g.lab = o.lab;
  g.submission = o.submission;
  g.only = o.only;
  g.toolchain = o.toolchain;
  g.keep_scratch = o.keep_scratch;
  g.timeout_s = o.timeout_s;
  g.verbose = !o.json && ::isatty(STDERR_FILENO);  // progress on a terminal; logs get the table
  grade::Report r;
  try {
    r = grade::grade(g);
  } catch (const UsageError&) {
    throw;  // exit 2 with its message
  } catch (const Error& e) {
    // A broken lab or harness, a scratch folder that cannot be made: the grader could not run.
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const std::string results = grade::results_json(r);
  if (!o.results_path.empty()) write_file_atomically(o.results_path, results, "grade");
  if (!o.junit_path.empty()) write_file_atomically(o.junit_path, grade::junit_xml(r), "grade");
  if (o.json) std::fputs(results.c_str(), stdout);
  else std::fputs(grade::table(r, o.details).c_str(), stdout);
  std::fprintf(stderr, "[grade] graded %s in %.1f s\n", r.lab.c_str(), r.seconds);
  return r.all_passed() ? 0 : 1;
}

}  // namespace scalelab
