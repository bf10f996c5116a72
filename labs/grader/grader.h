#pragma once
// The headless grader: builds a submission into a lab's harness, runs every check of the lab's
// rubric (checks.json) in its own child process with time, memory, file-size and process limits,
// and reports each as passed, failed, timeout, crashed or blocked. It knows nothing of any one lab:
// a lab is a folder (see labs/README.md). `scalelab grade` is its command line.
#include <functional>
#include <string>
#include <vector>

namespace scalelab::grade {

enum class Status { passed, failed, timeout, crashed, blocked };
const char* status_name(Status s);

enum class Visibility { visible, hidden, after_due_date };
const char* visibility_name(Visibility v);

// One row of a lab's rubric.
struct CheckSpec {
  std::string name;
  std::string description;
  double points = 0;
  Visibility visibility = Visibility::visible;
  double timeout_s = 10;
  int64_t memory_mb = 2048;
  std::vector<std::string> needs;  // "gpu", "mpi": blocked where absent
  std::vector<std::string> args;   // the harness's command line after its path; default: {name}
  // A numeric question graded by the grader itself, no harness run: the number under `key` in the
  // student's answers file within abs_tol or rel_tol (either suffices) of `expected`.
  struct Answer {
    std::string file = "answers.json", key;
    double expected = 0, abs_tol = 0, rel_tol = 0;
    bool has_expected = false;  // the hand-out's rubric leaves it out: such a check is blocked
  };
  bool is_answer = false;
  Answer answer;
};

struct Lab {
  std::string name;  // the folder's name, e.g. 01-collectives
  std::string dir;
  std::string title;
  std::vector<std::string> student_files;  // relative to the lab folder, e.g. ring.cpp
  std::string harness = "harness.cpp";
  std::vector<CheckSpec> checks;
  // The library's own functions that do what the student writes (the rubric's "library_answers",
  // qualified names such as scalelab::gpipe_schedule): a submission that calls one is refused.
  std::vector<std::string> library_answers;
};

// How the check `builds` begins its output when the submission compiles but is refused (a library
// answer called, a forbidden construct): mutants declared `# caught-by: builds` look for it.
inline constexpr const char* kRefusedHeading = "the submission is refused:";

// The labs shipped beside the sources (or $SCALELAB_LABS): every folder holding a checks.json.
std::string default_labs_dir();
std::vector<std::string> list_labs(const std::string& labs_dir);
// Throws UsageError("grade", ...) for an unknown lab (listing the labs) and Error("grade", ...)
// for a rubric that does not parse (naming the file and the field).
Lab load_lab(const std::string& labs_dir, const std::string& name);

// How the libraries were built: the compiler, its flags and the full link line, written by CMake
// at configure time (grade-toolchain.txt beside the scalelab executable).
struct Toolchain {
  std::string path;  // where it was read from
  std::string cxx;
  std::vector<std::string> compile_flags, include_dirs, definitions, link_flags, link_items;
  bool sanitized = false;  // built with -fsanitize: RLIMIT_AS cannot be used (the shadow memory)
};
// Throws UsageError("grade", ...) saying what to build or install when it is missing.
Toolchain load_toolchain(const std::string& path = "");

struct CheckResult {
  CheckSpec spec;
  Status status = Status::failed;
  double score = 0;
  std::string output;  // what the harness printed, or why it did not run
  double seconds = 0;
};

struct Report {
  std::string lab;
  std::string submission;
  std::vector<CheckResult> checks;  // "builds" first
  double score = 0, max_score = 0;
  double build_seconds = 0, seconds = 0;
  bool all_passed() const;
};

struct Options {
  std::string labs_dir;    // default_labs_dir() when empty
  std::string lab;
  std::string submission;  // a folder holding the student files, or one file; default: the lab's stubs
  std::vector<std::string> only;  // run only these checks (and builds)
  double timeout_s = 0;    // > 0: every check's time limit (instead of the rubric's)
  std::string toolchain;   // default: beside this executable
  std::string cache_dir;   // compiled harnesses, by content; default: beside the toolchain file
  bool keep_scratch = false;
  bool verbose = false;    // print each check's result as it ends (on stderr)
  bool stop_at_first_failure = false;  // the checks after the first that did not pass are not run
};

// Builds and runs the rubric. Throws UsageError/Error("grade", ...) when the grader itself cannot
// run (unknown lab, no compiler, a harness that does not compile); a submission that does not
// compile is a failed `builds` check instead, every other check blocked on it.
Report grade(const Options& options);

// Applies a unified diff (`patch -p1`) to the files in `dir`. Throws UsageError naming the patch
// and patch's own message when it does not apply, or when `patch` is missing.
void apply_patch(const std::string& patch_file, const std::string& dir);

// A lab's shipped mutants (labs/<lab>/mutants/NAME.patch): each a plausible wrong submission, a
// patch on the solution whose header says what is wrong and which check must catch it:
//   # mutant: the all-reduce is waited for inside the hook …
//   # caught-by: overlap
struct MutantResult {
  std::string name, what, caught_by;
  std::string named_check_result;  // the result of the check caught_by names ("absent": no such check)
  double score = 0, max_score = 0;  // of that check alone, the only one run
  bool caught = false;  // the named check did not pass (nor was blocked)
  std::string note;     // what went wrong when not caught
};
std::vector<MutantResult> grade_mutants(const Options& base);

// The rubric's mutation score: simple mutations of the reference solution (labs/grader/mutate.h),
// each graded until its first failing check. Mutants that do not compile are left out.
struct MutationOutcome {
  std::string file, kind, before, after, caught_by;  // caught_by: the first check that did not pass
  int line = 0;
  bool compiled = false, caught = false;
};
struct MutationScore {
  std::vector<MutationOutcome> mutants;
  int compiled = 0, caught = 0;
  double seconds = 0;
};
// progress(k, n, outcome) after each mutant.
MutationScore mutation_score(const Options& base,
                             const std::function<void(size_t, size_t, const MutationOutcome&)>& progress = {});

// Gradescope's results.json; JUnit XML; the terminal table.
std::string results_json(const Report& report);
std::string junit_xml(const Report& report);
// details: also the output of the checks that passed (what they measured).
std::string table(const Report& report, bool details = false);

// The student hand-out: every lab's README, lab.h-style headers, stubs, harness and its public
// checks, labs/common — no solution/, no mutants/, no hidden checks. Written atomically.
void release(const std::string& labs_dir, const std::string& out_tar_gz);

}  // namespace scalelab::grade
