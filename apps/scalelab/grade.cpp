// `scalelab grade`: the lab grader's command line. Builds a submission into a lab's harness, runs
// the rubric (labs/<lab>/checks.json), prints a table, and writes Gradescope's results.json and
// JUnit XML on request. Exit 0: every check passed; 1: some did not; 2: the grader could not run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/scalelab/bench.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "labs/grader/grader.h"

namespace scalelab {

namespace {

namespace fs = std::filesystem;

// A field of grades.csv: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string points_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// An instructor's folder of submissions: each student's entry graded in turn (the lab's harness
// compiled once, then cached), a line of progress per student, each student's results.json,
// results.xml and report.txt under OUT/<student>/, and OUT/grades.csv (one row per student, a
// column per check) with a summary of how many students passed each check. A submission the
// grader cannot take (a file for a lab of several files) is a row with its reason, not the end of
// the class. Exit 0 when every submission was graded, whatever its score.
int grade_class(const GradeCliOptions& o, const grade::Options& base) {
  std::error_code ec;  // filesystem calls with an error code: their exceptions carry no [component]
  if (!fs::is_directory(o.class_dir, ec))
    throw UsageError("grade", "--submissions " + o.class_dir + ": not a folder — give a folder with one sub-folder per student");
  if (!o.submission.empty() || !o.results_path.empty() || !o.junit_path.empty() || o.json)
    throw UsageError("grade", "--submissions grades a whole folder: drop --submission, --results, --junit and --json "
                              "(each student's reports go to --out)");
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(o.class_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code kind;  // a symlink loop or a FIFO among the submissions is no submission
    if (e.is_directory(kind) || e.is_regular_file(kind)) entries.push_back(e.path());
  }
  if (ec) throw UsageError("grade", "--submissions " + o.class_dir + ": cannot list it (" + ec.message() + ")");
  std::sort(entries.begin(), entries.end());
  if (entries.empty()) throw UsageError("grade", "--submissions " + o.class_dir + " holds no submissions (no sub-folders or files)");
  const grade::Lab lab = grade::load_lab(base.labs_dir, base.lab);
  const fs::path out = o.out_dir.empty() ? fs::path("grades-" + lab.name) : fs::path(o.out_dir);
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out, ec))
    throw UsageError("grade", "--out " + out.string() + ": cannot create it as a folder" + (ec ? " (" + ec.message() + ")" : "") +
                                  " — give a folder path that can be created");

  std::string csv = "student,score,max_score,builds";
  for (const auto& c : lab.checks) csv.append(",").append(csv_field(c.name));
  csv += ",note\n";
  std::map<std::string, int> passed;  // check → students who passed it
  const auto t0 = std::chrono::steady_clock::now();
  size_t k = 0;
  for (const fs::path& entry : entries) {
    ++k;
    // A folder is named for its student whole ("alice.v2"); a one-file submission without its .cpp.
    const std::string student = fs::is_directory(entry) ? entry.filename().string() : entry.stem().string();
    grade::Options g = base;
    g.submission = entry.string();
    g.verbose = false;
    std::string row = csv_field(student);
    try {
      const grade::Report r = grade::grade(g);
      const fs::path dir = out / student;
      fs::create_directories(dir, ec);  // a failure shows as the write's own error below
      write_file_atomically((dir / "results.json").string(), grade::results_json(r), "grade");
      write_file_atomically((dir / "results.xml").string(), grade::junit_xml(r), "grade");
      write_file_atomically((dir / "report.txt").string(), grade::table(r, false), "grade");
      row.append(",").append(points_text(r.score)).append(",").append(points_text(r.max_score));
      for (const auto& c : r.checks) {
        const bool points = c.status == grade::Status::passed && c.spec.name != "builds";  // builds is worth 0
        row.append(",").append(points ? points_text(c.score) : grade::status_name(c.status));
        if (c.status == grade::Status::passed) ++passed[c.spec.name];
      }
      // Why a submission scored nothing at all, in a word an instructor can act on: its files were
      // not found, or it did not build (the report has the compiler's errors).
      std::string note;
      if (!r.checks.empty() && r.checks.front().status != grade::Status::passed) {
        const std::string& why = r.checks.front().output;
        note = why.substr(0, why.find('\n'));
      }
      row += "," + csv_field(note) + "\n";
      std::fprintf(stderr, "[grade] %zu/%zu %-24s %6s / %s  (%.1f s)\n", k, entries.size(), student.c_str(),
                   points_text(r.score).c_str(), points_text(r.max_score).c_str(), r.seconds);
    } catch (const UsageError& e) {
      // This submission cannot be graded as handed in; the next one may.
      double max_score = 0;
      for (const auto& c : lab.checks) max_score += c.points;
      row += ",0," + points_text(max_score) + std::string(lab.checks.size() + 1, ',') + "," + csv_field(e.message()) + "\n";
      std::fprintf(stderr, "[grade] %zu/%zu %-24s not graded: %s\n", k, entries.size(), student.c_str(), e.what());
    }
    csv += row;
  }
  write_file_atomically((out / "grades.csv").string(), csv, "grade");
  std::printf("%-28s passed by\n", "check");
  for (const std::string& name : [&] {
         std::vector<std::string> v{"builds"};
         for (const auto& c : lab.checks) v.push_back(c.name);
         return v;
       }())
    std::printf("%-28s %d / %zu\n", name.c_str(), passed[name], entries.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[grade] %zu submission%s of %s graded in %.1f s: %s (one row each), and each student's results.json, "
              "results.xml and report.txt under %s/\n",
              entries.size(), entries.size() == 1 ? "" : "s", lab.name.c_str(), seconds, (out / "grades.csv").string().c_str(),
              out.string().c_str());
  return 0;
}

// `--mutants`: every shipped mutant graded, a row each; exit 0 when each is caught by its check.
int grade_shipped_mutants(const GradeCliOptions& o, const grade::Options& base) {
  const std::vector<grade::MutantResult> all = grade::grade_mutants(base);
  int caught = 0;
  nlohmann::json j = nlohmann::json::array();
  if (!o.json) std::printf("%-34s %9s  %-22s %s\n", "mutant", "score", "caught by", "result");
  for (const auto& m : all) {
    caught += m.caught;
    j.push_back({{"mutant", m.name}, {"what", m.what}, {"caught_by", m.caught_by}, {"result", m.named_check_result},
                 {"score", m.score}, {"max_score", m.max_score}, {"caught", m.caught}, {"note", m.note}});
    if (o.json) continue;
    const std::string pts = points_text(m.score) + "/" + points_text(m.max_score);
    std::printf("%-34s %9s  %-22s %s\n", m.name.c_str(), pts.c_str(), m.caught_by.c_str(),
                m.caught ? ("caught (" + m.named_check_result + ")").c_str() : ("NOT CAUGHT: " + m.note).c_str());
  }
  if (o.json) std::printf("%s\n", j.dump(2).c_str());
  std::fprintf(stderr, "[grade] %s: %d of %zu mutants caught by the check each names\n", base.lab.c_str(), caught, all.size());
  return caught == static_cast<int>(all.size()) ? 0 : 1;
}

// `--mutation-score`: the solution mutated automatically; the share the rubric catches and the
// survivors, which the lab's README lists as known gaps or proven equivalent. Exit 0 once scored.
int grade_mutation_score(const GradeCliOptions& o, const grade::Options& base) {
  const grade::MutationScore s = grade::mutation_score(base, [&](size_t k, size_t n, const grade::MutationOutcome& m) {
    std::fprintf(stderr, "[mutation] %zu/%zu %s:%d %-18s %s\n", k, n, m.file.c_str(), m.line, m.kind.c_str(),
                 !m.compiled ? "does not compile (left out)" : m.caught ? ("caught by " + m.caught_by).c_str() : "SURVIVED");
  });
  const double pct = s.compiled > 0 ? 100.0 * s.caught / s.compiled : 0;
  if (o.json) {
    nlohmann::json survivors = nlohmann::json::array();
    for (const auto& m : s.mutants)
      if (m.compiled && !m.caught)
        survivors.push_back({{"file", m.file}, {"line", m.line}, {"kind", m.kind}, {"before", m.before}, {"after", m.after}});
    nlohmann::json j{{"lab", base.lab}, {"mutants", s.mutants.size()}, {"compiled", s.compiled}, {"caught", s.caught},
                     {"score", s.compiled > 0 ? static_cast<double>(s.caught) / s.compiled : 0.0},
                     {"seconds", s.seconds}, {"survivors", survivors}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("mutation score of %s: %d of %d mutants caught (%.0f %%); %zu made, %zu did not compile (left out); %.0f s\n",
              base.lab.c_str(), s.caught, s.compiled, pct, s.mutants.size(), s.mutants.size() - s.compiled, s.seconds);
  // A change of several lines (a swap, a move) on one line of the report: its lines joined by " ⏎ ".
  auto one_line = [](std::string t) {
    for (size_t at = t.find('\n'); at != std::string::npos; at = t.find('\n', at)) t.replace(at, 1, " ⏎ ");
    return t;
  };
  for (const auto& m : s.mutants)
    if (m.compiled && !m.caught)
      std::printf("  survived  %s:%d  %s:  %s  →  %s\n", m.file.c_str(), m.line, m.kind.c_str(), one_line(m.before).c_str(),
                  one_line(m.after).c_str());
  return 0;
}

}  // namespace

int run_grade(const GradeCliOptions& o) {
  const std::string labs_dir = o.labs_dir.empty() ? grade::default_labs_dir() : o.labs_dir;
  for (const std::string* out : {&o.results_path, &o.junit_path})
    if (!out->empty()) check_output_path(*out, "grade");  // before the grading, not after
  check_distinct_paths({{"--results", o.results_path, true},
                        {"--junit", o.junit_path, true},
                        {"--release", o.release_path, true},
                        {"--out", o.out_dir, true},
                        {"--submission", o.submission, false},
                        {"--submissions", o.class_dir, false}},
                       "grade");
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
    if (o.mutants || o.mutation_score) {
      if (o.mutants && o.mutation_score) throw UsageError("grade", "--mutants and --mutation-score: give one at a time");
      if (!o.submission.empty() || !o.class_dir.empty() || !o.results_path.empty() || !o.junit_path.empty())
        throw UsageError("grade", std::string(o.mutants ? "--mutants" : "--mutation-score") +
                                      " grades the lab's own solution, mutated: drop --submission(s), --results and --junit");
      return o.mutants ? grade_shipped_mutants(o, g) : grade_mutation_score(o, g);
    }
    if (!o.class_dir.empty()) return grade_class(o, g);
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
