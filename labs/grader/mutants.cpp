// The rubric graded against wrong submissions: the lab's shipped mutants (patches on the solution,
// each naming the check that must catch it) and automatic mutations of the solution (the mutation
// score). Both grade copies of solution/ in a scratch folder, one at a time.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/io/file_check.h"
#include "labs/grader/grader.h"
#include "labs/grader/mutate.h"

namespace fs = std::filesystem;

namespace scalelab::grade {

namespace {

// A scratch folder removed when it goes out of scope.
struct TempDir {
  std::string dir;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "scalelab-mutant-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw Error("grade", "cannot make a scratch folder: " + std::string(std::strerror(errno)));
    dir = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

std::string read_text(const std::string& path) {
  return read_regular_file(path, "grade", int64_t{16} << 20, "a lab's files are regular files");
}

// A copy of the lab's solution/ in `dir`: what a mutant changes.
void copy_solution(const Lab& lab, const std::string& dir) {
  const fs::path solution = fs::path(lab.dir) / "solution";
  if (!fs::is_directory(solution))
    throw UsageError("grade", "lab " + lab.name + " has no solution/ folder — mutants are patches on it");
  fs::copy(solution, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

// The header of a mutant patch: "# mutant: …" (continued on "#   …" lines) and "# caught-by: CHECK".
void read_header(const std::string& text, MutantResult& m) {
  std::istringstream in(text);
  std::string line;
  bool in_what = false;
  while (std::getline(in, line)) {
    if (line.rfind("---", 0) == 0) break;
    if (line.rfind("# mutant:", 0) == 0) {
      m.what = line.substr(9);
      in_what = true;
    } else if (line.rfind("# caught-by:", 0) == 0) {
      std::istringstream w(line.substr(12));
      w >> m.caught_by;
      in_what = false;
    } else if (in_what && line.rfind("#  ", 0) == 0) {
      m.what += " " + line.substr(1);
    } else {
      in_what = false;
    }
  }
  const size_t a = m.what.find_first_not_of(' ');
  m.what = a == std::string::npos ? "" : m.what.substr(a);
  std::string squeezed;
  for (char c : m.what)
    if (!(c == ' ' && !squeezed.empty() && squeezed.back() == ' ')) squeezed += c;
  m.what = squeezed;
}

}  // namespace

std::vector<MutantResult> grade_mutants(const Options& base) {
  const Lab lab = load_lab(base.labs_dir.empty() ? default_labs_dir() : base.labs_dir, base.lab);
  std::vector<fs::path> patches;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(lab.dir) / "mutants", ec)) {
    if (e.path().extension() == ".patch") patches.push_back(e.path());
    else if (e.is_regular_file() || e.is_directory())
      throw UsageError("grade", e.path().string() + ": a mutant is a .patch on the solution (diff -u against solution/)");
  }
  if (patches.empty())
    throw UsageError("grade", "lab " + lab.name + " has no mutants (mutants/*.patch) — write a few wrong submissions first");
  std::sort(patches.begin(), patches.end());
  std::vector<MutantResult> out;
  for (const fs::path& patch : patches) {
    MutantResult m;
    m.name = patch.stem().string();
    read_header(read_text(patch.string()), m);
    // "builds" names the grader's own first check: a mutant the build must refuse (a call to one
    // of the lab's library_answers), caught when that refusal, and nothing else, stops it.
    const bool by_build = m.caught_by == "builds";
    const bool known = by_build || std::any_of(lab.checks.begin(), lab.checks.end(),
                                               [&](const CheckSpec& c) { return c.name == m.caught_by; });
    TempDir tmp;
    copy_solution(lab, tmp.dir);
    apply_patch(patch.string(), tmp.dir);
    Options o = base;
    o.submission = tmp.dir;
    o.verbose = false;
    if (known && !by_build) o.only = {m.caught_by};  // whether it is caught is that check's word alone
    const Report r = grade(o);
    m.score = r.score;
    m.max_score = r.max_score;
    m.named_check_result = "absent";
    for (const CheckResult& c : r.checks)
      if (c.spec.name == m.caught_by) m.named_check_result = status_name(c.status);
    const bool builds = !r.checks.empty() && r.checks.front().status == Status::passed;
    const std::string build_output = r.checks.empty() ? "" : r.checks.front().output;
    const bool refused = build_output.rfind(kRefusedHeading, 0) == 0;
    if (by_build) m.caught = !builds && refused;
    else m.caught = builds && known && m.named_check_result != "passed" && m.named_check_result != "blocked";
    if (m.caught_by.empty()) m.note = "its header names no check (# caught-by: CHECK)";
    else if (!known) m.note = "caught-by names '" + m.caught_by + "', which is not a check of " + lab.name;
    else if (by_build && !m.caught)
      m.note = builds ? "it builds: the rubric's library_answers do not refuse it"
                      : "it does not build, but not by a refusal: " + build_output.substr(0, 300);
    else if (by_build) m.note = "refused by the build: " + build_output.substr(0, 200);
    else if (!builds) m.note = "it does not build: " + build_output.substr(0, 300);
    else if (!m.caught) m.note = m.caught_by + " " + m.named_check_result;
    out.push_back(m);
  }
  return out;
}

MutationScore mutation_score(const Options& base,
                             const std::function<void(size_t, size_t, const MutationOutcome&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const Lab lab = load_lab(base.labs_dir.empty() ? default_labs_dir() : base.labs_dir, base.lab);
  struct Todo {
    std::string file;
    Mutation m;
  };
  std::vector<Todo> todo;
  for (const std::string& f : lab.student_files) {
    const std::string ext = fs::path(f).extension().string();
    if (ext != ".cpp" && ext != ".cc" && ext != ".cxx") continue;  // answers files, headers
    const fs::path source = fs::path(lab.dir) / "solution" / f;
    for (Mutation& m : mutations(f, read_text(source.string()))) todo.push_back({f, std::move(m)});
  }
  MutationScore score;
  for (size_t k = 0; k < todo.size(); ++k) {
    const Mutation& m = todo[k].m;
    MutationOutcome out;
    out.file = m.file;
    out.line = m.line;
    out.kind = m.kind;
    out.before = m.before;
    out.after = m.after;
    TempDir tmp;
    copy_solution(lab, tmp.dir);
    {
      std::ofstream f(fs::path(tmp.dir) / todo[k].file, std::ios::trunc);
      f << m.text;
      if (!f) throw Error("grade", "cannot write a mutant into " + tmp.dir);
    }
    Options o = base;
    o.submission = tmp.dir;
    o.verbose = false;
    o.only.clear();
    o.stop_at_first_failure = true;  // caught is caught: the first failing check settles it
    const Report r = grade(o);
    out.compiled = !r.checks.empty() && r.checks.front().status == Status::passed;
    for (const CheckResult& c : r.checks)
      if (c.spec.name != "builds" && c.status != Status::passed && c.status != Status::blocked && out.caught_by.empty())
        out.caught_by = c.spec.name;
    out.caught = out.compiled && !out.caught_by.empty();
    score.compiled += out.compiled;
    score.caught += out.caught;
    score.mutants.push_back(out);
    if (progress) progress(k + 1, todo.size(), out);
  }
  score.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return score;
}

}  // namespace scalelab::grade
