#include "labs/grader/grader.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace scalelab::grade {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A rubric, an answers file or a source: a regular file (a FIFO in a submission would block the
// grader, /dev/zero would fill its memory), at most 256 MiB.
std::string read_text(const std::string& path) {
  return read_regular_file(path, "grade", int64_t{256} << 20, "a lab's files and a submission's are regular files");
}

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// 64-bit FNV-1a: the key of a cached harness object (stable across runs and machines).
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string exe_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

// ---------------------------------------------------------------------------------------------
// Child processes: each in its own process group, limited, killed as a group.

struct Limits {
  bool apply = false;      // the compiler runs unlimited; a check does not
  double cpu_s = 0;        // RLIMIT_CPU (SIGXCPU, then SIGKILL)
  int64_t memory_mb = 0;   // RLIMIT_AS; 0: none (sanitizer builds)
  int64_t file_mb = 64;    // RLIMIT_FSIZE
  int64_t procs = 0;       // RLIMIT_NPROC (counts the user's threads too); 0: none
};

struct Job {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // empty: inherit
  std::string cwd;
  double timeout_s = 0;
  Limits limits;
  // Run as user nobody (when the grader is root): a submission's compiler and checks cannot read
  // what only root may (/root, the grader's own files), and RLIMIT_NPROC binds them.
  bool drop_to_nobody = false;
  // Folders replaced by an empty read-only tmpfs in the job's own mount namespace (root only):
  // the labs' solutions, mutants and rubrics, and the source tree, out of a submission's sight.
  std::vector<std::string> hidden;
  // Non-empty: the harness gets this secret through a pipe and answers on another with its
  // verdict (labs/common/verdict.h); JobResult::verdict holds what came back.
  std::string verdict_secret;
};

struct JobResult {
  int wait_status = 0;
  bool timed_out = false;
  std::string output;
  int64_t dropped_bytes = 0;
  double seconds = 0;
  std::string verdict;  // what the harness wrote on the verdict pipe (at most 4 KiB)
};

constexpr size_t kMaxOutput = 32 * 1024;
constexpr size_t kMaxVerdict = 4096;
// Where the harness finds the verdict pipes (labs/common/verdict.h reads SCALELAB_VERDICT_FDS):
// high numbers, clear of anything the child has open when it execs.
constexpr int kSecretFd = 200, kVerdictFd = 201;

// Kills every process of group `pgid` and reaps those that are our children (the direct child,
// and any grandchild re-parented to us as the sub-reaper), for up to a second.
void kill_group(pid_t pgid) noexcept {
  for (int i = 0; i < 100; ++i) {
    const bool alive = ::killpg(pgid, SIGKILL) == 0;
    while (::waitpid(-pgid, nullptr, WNOHANG) > 0) {
    }
    if (!alive) return;
    ::usleep(10000);
  }
}

// Calls fn(folder) for each process's folder in /proc (/proc/PID).
template <typename Fn>
void each_process(Fn fn) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) fn(e.path());
  }
}

// The processes descended from this one, zombies included: read from /proc (pid → parent). A
// process that left its group and session (fork, setsid, fork) is still a descendant: when its
// parent dies it is re-parented to us, the sub-reaper.
std::vector<pid_t> descendants() {
  std::map<pid_t, pid_t> parent;
  each_process([&](const fs::path& proc) {
    std::ifstream in(proc / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');  // the command's name may hold spaces and parentheses
    if (close == std::string::npos) return;
    std::istringstream rest(stat.substr(close + 1));
    // Any state, zombies too: one killed a moment ago is gone only once kill_descendants has
    // reaped it (a zombie left out could end its loop early, unreaped).
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    parent[static_cast<pid_t>(std::stol(proc.filename().string()))] = ppid;
  });
  std::set<pid_t> mine{::getpid()};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, ppid] : parent)
      if (mine.count(ppid) && mine.insert(pid).second) grew = true;
  }
  mine.erase(::getpid());
  return {mine.begin(), mine.end()};
}

// After a job has ended: kills and reaps every process still descended from the grader, for up to
// two seconds. Called only when no job of ours is running (it reaps any child).
void kill_descendants() noexcept {
  try {
    for (int i = 0; i < 200; ++i) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      const std::vector<pid_t> left = descendants();
      if (left.empty()) return;
      for (pid_t p : left) ::kill(p, SIGKILL);
      ::usleep(10000);
    }
  } catch (...) {  // /proc unreadable: the process groups were killed already
  }
}

struct Running {
  pid_t pid = -1;
  int fd = -1;
  int verdict_fd = -1;
  bool ended = false;
  Clock::time_point start;
  JobResult result;
};

// Everything the child needs, made before fork: after fork it only calls async-signal-safe
// functions.
struct Prepared {
  std::vector<std::string> argv_s, env_s;
  std::vector<char*> argv, env;
  bool inherit_env = false;
};

[[noreturn]] void child_fail(const char* what) noexcept {
  const char* why = std::strerror(errno);
  (void)!::write(2, "[grade] ", 8);
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, ": ", 2);
  (void)!::write(2, why, std::strlen(why));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

void set_limit(int resource, rlim_t soft, rlim_t hard) noexcept {
  rlimit r{soft, hard};
  ::setrlimit(resource, &r);
}

// Whether this grader can give a job a mount namespace of its own (root, and a kernel or container
// that allows it): asked once, in a child that tries.
bool can_hide_folders() {
  static const bool can = [] {
    if (::geteuid() != 0) return false;
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) ::_exit(::unshare(CLONE_NEWNS) == 0 ? 0 : 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return can;
}

// A secret the submission cannot guess: 128 random bits, as hex.
std::string random_secret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("grade", std::string("cannot draw a random secret: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string s;
  char h[3];
  for (unsigned char b : bytes) {
    std::snprintf(h, sizeof h, "%02x", b);
    s += h;
  }
  return s;
}

Running start_job(const Job& job, Prepared& prep) {
  prep.argv_s = job.argv;
  for (auto& a : prep.argv_s) prep.argv.push_back(a.data());
  prep.argv.push_back(nullptr);
  prep.inherit_env = job.env.empty();
  prep.env_s = job.env;
  if (!job.verdict_secret.empty())
    prep.env_s.push_back("SCALELAB_VERDICT_FDS=" + std::to_string(kSecretFd) + "," + std::to_string(kVerdictFd));
  for (auto& e : prep.env_s) prep.env.push_back(e.data());
  prep.env.push_back(nullptr);
  uid_t nobody_uid = 65534;
  gid_t nobody_gid = 65534;
  if (const passwd* pw = ::getpwnam("nobody")) {
    nobody_uid = pw->pw_uid;
    nobody_gid = pw->pw_gid;
  }
  const bool drop = job.drop_to_nobody && ::geteuid() == 0;
  const bool hide = !job.hidden.empty() && can_hide_folders();

  int fds[2], secret[2] = {-1, -1}, verdict[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {fds[0], fds[1], secret[0], secret[1], verdict[0], verdict[1]})
      if (fd >= 0) ::close(fd);
  };
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("grade", std::string("cannot make a pipe: ") + std::strerror(errno));
  if (!job.verdict_secret.empty()) {
    if (::pipe2(secret, O_CLOEXEC) != 0 || ::pipe2(verdict, O_CLOEXEC) != 0) {
      const std::string why = std::strerror(errno);
      close_all();
      throw Error("grade", "cannot make the verdict pipes: " + why);
    }
    // The secret fits a pipe's buffer: written now, the child reads it once it runs.
    const std::string line = job.verdict_secret;
    if (::write(secret[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      close_all();
      throw Error("grade", "cannot write the verdict secret");
    }
    ::close(secret[1]);
    secret[1] = -1;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    close_all();
    throw Error("grade", std::string("cannot fork: ") + std::strerror(errno) + " — too many processes?");
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the grader gone, the check goes too
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    if (secret[0] >= 0) {  // dup2 clears close-on-exec on the copies the harness keeps
      if (::dup2(secret[0], kSecretFd) < 0 || ::dup2(verdict[1], kVerdictFd) < 0) child_fail("dup2 of the verdict pipes");
    }
    if (hide) {
      // Our own mount table: what we cover stays covered for this job alone.
      if (::unshare(CLONE_NEWNS) != 0) child_fail("unshare");
      if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail("mount --make-rprivate /");
      for (const auto& dir : job.hidden)
        if (::mount("scalelab-hidden", dir.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=4k,mode=0755") != 0)
          child_fail("hiding a folder");
    }
    if (!job.cwd.empty() && ::chdir(job.cwd.c_str()) != 0) child_fail("chdir");
    const Limits& l = job.limits;
    if (l.apply) {
      const rlim_t cpu = static_cast<rlim_t>(std::ceil(l.cpu_s));
      set_limit(RLIMIT_CPU, cpu, cpu + 2);
      if (l.memory_mb > 0) set_limit(RLIMIT_AS, static_cast<rlim_t>(l.memory_mb) << 20, static_cast<rlim_t>(l.memory_mb) << 20);
      set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(l.file_mb) << 20, static_cast<rlim_t>(l.file_mb) << 20);
      set_limit(RLIMIT_CORE, 0, 0);
    }
    if (drop) {
      // root is exempt from RLIMIT_NPROC: a fork bomb is only bounded under another user.
      if (::setgroups(0, nullptr) != 0) child_fail("setgroups");
      if (::setgid(nobody_gid) != 0) child_fail("setgid nobody");
      if (::setuid(nobody_uid) != 0) child_fail("setuid nobody");
    }
    if (l.apply && l.procs > 0) set_limit(RLIMIT_NPROC, static_cast<rlim_t>(l.procs), static_cast<rlim_t>(l.procs));
    if (prep.inherit_env) ::execv(prep.argv[0], prep.argv.data());
    else ::execve(prep.argv[0], prep.argv.data(), prep.env.data());
    child_fail(prep.argv[0]);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first, the group exists before we kill it
  ::close(fds[1]);
  if (secret[0] >= 0) ::close(secret[0]);
  if (verdict[1] >= 0) ::close(verdict[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  if (verdict[0] >= 0) ::fcntl(verdict[0], F_SETFL, O_NONBLOCK);
  Running r;
  r.pid = pid;
  r.fd = fds[0];
  r.verdict_fd = verdict[0];
  r.start = Clock::now();
  return r;
}

// Reads what is there from `fd` into `into` (kept up to `max` bytes, the rest counted in
// `dropped`); closes the descriptor and sets it to -1 once every writer is gone.
void drain_fd(int& fd, std::string& into, size_t max, int64_t& dropped) {
  char buf[65536];
  while (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      const size_t keep = std::min(static_cast<size_t>(n), max - std::min(max, into.size()));
      into.append(buf, keep);
      dropped += n - static_cast<ssize_t>(keep);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // every writer gone
      ::close(fd);
      fd = -1;
    }
    return;
  }
}

void drain(Running& r) {
  drain_fd(r.fd, r.result.output, kMaxOutput, r.result.dropped_bytes);
  int64_t ignored = 0;
  drain_fd(r.verdict_fd, r.result.verdict, kMaxVerdict, ignored);
}

// Runs the jobs side by side; each ends on its own, or is killed (with its whole group) at its
// timeout. Never leaves a process behind: once all have ended, every process still descended from
// the grader is killed too (one that left its group with setsid).
std::vector<JobResult> run_jobs(const std::vector<Job>& jobs) {
  std::vector<Prepared> prep(jobs.size());
  std::vector<Running> run;
  auto close_fds = [](Running& r) {
    if (r.fd >= 0) ::close(r.fd);
    if (r.verdict_fd >= 0) ::close(r.verdict_fd);
    r.fd = r.verdict_fd = -1;
  };
  try {
    for (size_t i = 0; i < jobs.size(); ++i) run.push_back(start_job(jobs[i], prep[i]));
  } catch (...) {
    for (Running& r : run) {
      kill_group(r.pid);
      ::waitpid(r.pid, nullptr, 0);
      close_fds(r);
    }
    kill_descendants();
    throw;
  }
  size_t left = run.size();
  while (left > 0) {
    std::vector<pollfd> pfds;
    for (Running& r : run)
      for (int fd : {r.fd, r.verdict_fd})
        if (fd >= 0 && !r.ended) pfds.push_back({fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 20);
    for (size_t i = 0; i < run.size(); ++i) {
      Running& r = run[i];
      if (r.ended) continue;
      drain(r);
      int status = 0;
      const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      const bool late = jobs[i].timeout_s > 0 && since(r.start) > jobs[i].timeout_s;
      if (done == r.pid || late) {
        if (done != r.pid) {
          r.result.timed_out = true;
          ::killpg(r.pid, SIGKILL);
          ::waitpid(r.pid, &status, 0);
        }
        r.result.wait_status = status;
        r.result.seconds = since(r.start);
        kill_group(r.pid);  // what the child left running (a forked helper, a fork bomb)
        // What is in the pipes now is all the job said; a process that left the group may still
        // hold them open, so they are not read to their end.
        drain(r);
        close_fds(r);
        r.ended = true;
        --left;
      }
    }
  }
  kill_descendants();
  std::vector<JobResult> out;
  for (Running& r : run) out.push_back(std::move(r.result));
  return out;
}

// Tasks (processes and threads) of this user now: RLIMIT_NPROC counts them all, so a check's
// limit is this plus its own allowance (for a grader not running as root).
int64_t tasks_of_user(uid_t uid) {
  int64_t n = 0;
  each_process([&](const fs::path& proc) {
    std::ifstream in(proc / "status");
    std::string line;
    bool mine = false;
    int64_t threads = 1;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) mine = std::stoul(line.substr(4)) == uid;
      if (line.rfind("Threads:", 0) == 0) threads = std::stoll(line.substr(8));
    }
    if (mine) n += threads;
  });
  return n;
}

// ---------------------------------------------------------------------------------------------
// Labs and rubrics

Visibility parse_visibility(const std::string& v, const std::string& where) {
  if (v == "visible") return Visibility::visible;
  if (v == "hidden") return Visibility::hidden;
  if (v == "after_due_date") return Visibility::after_due_date;
  throw Error("grade", where + ": visibility '" + v + "' is unknown — use visible, hidden or after_due_date");
}

std::vector<std::string> strings(const json& j, const std::string& where) {
  if (!j.is_array()) throw Error("grade", where + " must be a list of strings");
  std::vector<std::string> out;
  for (const json& s : j) {
    if (!s.is_string()) throw Error("grade", where + " must be a list of strings, got " + s.dump());
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::passed: return "passed";
    case Status::failed: return "failed";
    case Status::timeout: return "timeout";
    case Status::crashed: return "crashed";
    case Status::blocked: return "blocked";
  }
  return "?";
}

const char* visibility_name(Visibility v) {
  switch (v) {
    case Visibility::visible: return "visible";
    case Visibility::hidden: return "hidden";
    case Visibility::after_due_date: return "after_due_date";
  }
  return "?";
}

bool Report::all_passed() const {
  return std::all_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.status == Status::passed; });
}

std::string default_labs_dir() {
  if (const char* env = std::getenv("SCALELAB_LABS"); env && *env) return env;
  return std::string(SCALELAB_SOURCE_DIR) + "/labs";
}

std::vector<std::string> list_labs(const std::string& labs_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(labs_dir, ec))
    if (e.is_directory() && fs::exists(e.path() / "checks.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Lab load_lab(const std::string& labs_dir, const std::string& name) {
  const std::vector<std::string> labs = list_labs(labs_dir);
  if (std::find(labs.begin(), labs.end(), name) == labs.end()) {
    std::string list;
    for (const auto& l : labs) list += "\n  " + l;
    throw UsageError("grade", "no lab named '" + name + "' in " + labs_dir + " — the labs are:" +
                                  (list.empty() ? std::string(" (none: is --labs-dir right?)") : list));
  }
  Lab lab;
  lab.name = name;
  lab.dir = fs::absolute(fs::path(labs_dir) / name).lexically_normal().string();  // compilers run elsewhere
  const std::string file = lab.dir + "/checks.json";
  json j;
  try {
    j = json::parse(read_text(file));
  } catch (const json::exception& e) {
    throw Error("grade", file + ": not valid JSON (" + json_reason(e) + ") — fix the rubric");
  }
  try {
    lab.title = j.value("title", name);
    lab.harness = j.value("harness", std::string("harness.cpp"));
    lab.student_files = strings(j.at("student_files"), file + ": student_files");
    if (lab.student_files.empty()) throw Error("grade", file + ": student_files is empty — name the files a student writes");
    if (j.contains("library_answers"))
      lab.library_answers = strings(j.at("library_answers"), file + ": library_answers");
    const json defaults = j.value("defaults", json::object());
    std::set<std::string> names{"builds"};
    for (const json& c : j.at("checks")) {
      CheckSpec s;
      s.name = c.at("name").get<std::string>();
      const std::string where = file + ": check '" + s.name + "'";
      if (!names.insert(s.name).second) throw Error("grade", where + " appears twice (or is named builds, which the grader adds)");
      auto field = [&](const char* key) -> json {
        if (c.contains(key)) return c[key];
        if (defaults.contains(key)) return defaults[key];
        return json();
      };
      s.description = c.value("description", std::string());
      s.points = c.at("points").get<double>();
      if (!field("visibility").is_null()) s.visibility = parse_visibility(field("visibility").get<std::string>(), where);
      if (!field("timeout_s").is_null()) s.timeout_s = field("timeout_s").get<double>();
      if (!field("memory_mb").is_null()) s.memory_mb = field("memory_mb").get<int64_t>();
      if (!field("needs").is_null()) s.needs = strings(field("needs"), where + ": needs");
      s.args = c.contains("args") ? strings(c["args"], where + ": args") : std::vector<std::string>{s.name};
      if (c.contains("answer")) {
        const json& a = c["answer"];
        s.is_answer = true;
        s.answer.file = a.value("file", s.answer.file);
        s.answer.key = a.at("key").get<std::string>();
        s.answer.has_expected = a.contains("expected");  // not in the hand-out
        if (s.answer.has_expected) s.answer.expected = a.at("expected").get<double>();
        s.answer.abs_tol = a.value("abs", 0.0);
        s.answer.rel_tol = a.value("rel", 0.0);
        if (!(s.answer.abs_tol >= 0) || !(s.answer.rel_tol >= 0))
          throw Error("grade", where + ": answer tolerances abs and rel must be ≥ 0");
        if (std::find(lab.student_files.begin(), lab.student_files.end(), s.answer.file) == lab.student_files.end())
          throw Error("grade", where + ": its answer is read from " + s.answer.file + ", which is not among student_files");
      }
      if (s.points < 0 || s.timeout_s <= 0 || s.memory_mb < 0)
        throw Error("grade", where + ": points, timeout_s and memory_mb must be ≥ 0 (timeout_s > 0)");
      for (const auto& need : s.needs)
        if (need != "gpu" && need != "mpi") throw Error("grade", where + ": needs '" + need + "' is unknown — use gpu or mpi");
      lab.checks.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    throw Error("grade", file + ": a field is missing or of the wrong type (" + json_reason(e) +
                             ") — every check needs name and points (see labs/README.md)");
  }
  if (!fs::exists(fs::path(lab.dir) / lab.harness)) throw Error("grade", lab.dir + "/" + lab.harness + ": missing — the lab needs its harness");
  return lab;
}

Toolchain load_toolchain(const std::string& path) {
  std::vector<std::string> candidates;
  if (!path.empty()) candidates.push_back(path);
  else {
    if (const std::string d = exe_dir(); !d.empty()) candidates.push_back(d + "/grade-toolchain.txt");
    candidates.push_back(SCALELAB_GRADE_TOOLCHAIN);
  }
  for (const std::string& p : candidates) {
    if (!fs::exists(p)) continue;
    Toolchain t;
    t.path = p;
    std::istringstream in(read_text(p));
    std::string line;
    while (std::getline(in, line)) {
      const size_t eq = line.find('=');
      if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
      const std::string key = line.substr(0, eq), value = trim(line.substr(eq + 1));
      if (value.empty()) continue;
      if (key == "cxx") t.cxx = value;
      else if (key == "flag") t.compile_flags.push_back(value);
      else if (key == "include") t.include_dirs.push_back(value);
      else if (key == "define") t.definitions.push_back(value);
      else if (key == "link_flag") t.link_flags.push_back(value);
      else if (key == "link") t.link_items.push_back(value);
    }
    for (const auto& f : t.compile_flags)
      if (f.find("-fsanitize") != std::string::npos) t.sanitized = true;
    if (t.cxx.empty()) throw Error("grade", p + ": names no compiler (cxx=) — reconfigure the build (cmake --preset …)");
    if (::access(t.cxx.c_str(), X_OK) != 0)
      throw UsageError("grade", "the compiler " + t.cxx + " the libraries were built with is missing — install it "
                                "(apt-get install g++) or reconfigure the build with the compiler you have");
    for (const auto& l : t.link_items)
      if (l[0] == '/' && !fs::exists(l))
        throw UsageError("grade", l + ": missing — build the libraries first (cmake --build --preset …, or make build)");
    return t;
  }
  throw UsageError("grade", "no grade-toolchain.txt beside this scalelab (looked in " + candidates.front() +
                                ") — build scalelab with CMake (make build), which writes it");
}

// ---------------------------------------------------------------------------------------------
// Building a submission

namespace {

struct Scratch {
  std::string dir;
  bool keep = false;
  ~Scratch() {
    if (dir.empty() || keep) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::vector<std::string> compile_command(const Toolchain& t, const Lab& lab, const std::string& source,
                                         const std::string& object) {
  std::vector<std::string> cmd{t.cxx};
  for (const auto& f : t.compile_flags) cmd.push_back(f);
  for (const auto& d : t.definitions) cmd.push_back("-D" + d);
  cmd.push_back("-I" + lab.dir);
  for (const auto& i : t.include_dirs) cmd.push_back("-I" + i);
  cmd.push_back("-fdiagnostics-color=never");
  cmd.push_back("-c");
  cmd.push_back(source);
  cmd.push_back("-o");
  cmd.push_back(object);
  return cmd;
}

// ---------------------------------------------------------------------------------------------
// What a submission may see and use

bool is_under(const fs::path& p, const fs::path& dir) {
  const std::string a = p.lexically_normal().string(), d = dir.lexically_normal().string();
  return !d.empty() && (a == d || (a.size() > d.size() && a.compare(0, d.size(), d) == 0 &&
                                   (d.back() == '/' || a[d.size()] == '/')));
}

fs::path real(const fs::path& p) {
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

// The folders a submission must not read, at compile time and while its checks run: the labs (the
// solutions, the mutants, the rubrics with their hidden arguments) and the source tree they sit in.
// A folder holding the scratch folder stays visible (the tests put their scratch inside the build).
std::vector<std::string> secret_folders(const std::string& labs_dir, const std::string& scratch) {
  std::vector<fs::path> candidates{real(SCALELAB_SOURCE_DIR), real(labs_dir), real(fs::path(SCALELAB_SOURCE_DIR) / "labs")};
  std::vector<std::string> out;
  for (const fs::path& c : candidates) {
    std::error_code ec;
    if (!fs::is_directory(c, ec) || is_under(real(scratch), c)) continue;
    if (std::any_of(out.begin(), out.end(), [&](const std::string& o) { return is_under(c, o); })) continue;
    out.erase(std::remove_if(out.begin(), out.end(), [&](const std::string& o) { return is_under(o, c); }), out.end());
    out.push_back(c.string());
  }
  return out;
}

// The headers a submission compiles against, copied into the scratch folder: the lab's own headers
// (lab.h), labs/common's (but verdict.h, the harness's alone), and the library's headers from the
// source tree (core/, strategies/, run/ …). No solution, mutant, rubric or test is among them.
// Returns the include folders, in order; the toolchain's folders outside the source tree (system
// libraries) follow them.
std::vector<std::string> public_headers(const Toolchain& tc, const Lab& lab, const std::string& labs_dir,
                                        const std::string& scratch) {
  auto header = [](const fs::path& p) {
    const std::string ext = p.extension().string();
    return ext == ".h" || ext == ".hpp" || ext == ".cuh" || ext == ".inl";
  };
  auto copy = [](const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path());
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  };
  const fs::path lab_inc = fs::path(scratch) / "include" / "lab", root_inc = fs::path(scratch) / "include" / "root";
  fs::create_directories(lab_inc);
  fs::create_directories(root_inc / "labs" / "common");
  for (const auto& e : fs::directory_iterator(lab.dir)) {
    const std::string name = e.path().filename().string();
    const bool student = std::any_of(lab.student_files.begin(), lab.student_files.end(),
                                     [&](const std::string& f) { return fs::path(f).filename() == name; });
    if (e.is_regular_file() && header(e.path()) && !student) copy(e.path(), lab_inc / name);
  }
  std::error_code ec;
  // labs/common of the sources, then the labs folder's own (a lab kept elsewhere may bring one).
  for (const fs::path& common : {fs::path(SCALELAB_SOURCE_DIR) / "labs" / "common", fs::path(labs_dir) / "common"})
    for (const auto& e : fs::directory_iterator(common, ec))
      if (e.is_regular_file() && header(e.path()) && e.path().filename() != "verdict.h")
        copy(e.path(), root_inc / "labs" / "common" / e.path().filename());
  const fs::path source = real(SCALELAB_SOURCE_DIR);
  std::vector<std::string> out{lab_inc.string(), root_inc.string()};
  for (const std::string& dir : tc.include_dirs) {
    if (!is_under(real(dir), source)) {
      out.push_back(dir);  // a system library's headers
      continue;
    }
    // The source tree's library headers. Skipped: labs (above), tests, build trees, the rest.
    const fs::path top = real(dir);
    auto it = fs::recursive_directory_iterator(top, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_directory()) {
        if (it.depth() == 0 && name != "core" && name != "strategies" && name != "run" && name != "viz")
          it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && header(it->path()))
        copy(it->path(), root_inc / fs::relative(it->path(), source));
    }
  }
  return out;
}

std::vector<std::string> student_compile_command(const Toolchain& t, const std::vector<std::string>& includes,
                                                 const std::string& source, const std::string& object) {
  std::vector<std::string> cmd{t.cxx};
  for (const auto& f : t.compile_flags) cmd.push_back(f);
  for (const auto& d : t.definitions) cmd.push_back("-D" + d);
  for (const auto& i : includes) cmd.push_back("-I" + i);
  // The headers it read (the .d file) and the preprocessed text (.ii), checked after the compile.
  for (const char* f : {"-fdiagnostics-color=never", "-MD", "-save-temps=obj", "-c"}) cmd.push_back(f);
  cmd.push_back(source);
  cmd.push_back("-o");
  cmd.push_back(object);
  return cmd;
}

// The files a compile read, from its .d file ("obj: a.cpp b.h \\\n c.h"; "\\ " is a space).
std::vector<std::string> dependencies(const std::string& depfile) {
  std::string text;
  try {
    text = read_regular_file(depfile, "grade", int64_t{16} << 20, "the compiler writes it");
  } catch (const std::exception&) {
    return {};
  }
  std::vector<std::string> out;
  std::string cur;
  bool target = true;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == ' ')) {
      if (text[i + 1] == ' ') cur += ' ';
      ++i;
      if (text[i] == '\n' && !cur.empty()) out.push_back(cur), cur.clear();
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t') {
      if (!cur.empty()) out.push_back(cur), cur.clear();
      continue;
    }
    if (target && c == ':' && (i + 1 == text.size() || text[i + 1] == ' ' || text[i + 1] == '\n')) {
      target = false;
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// What the student's own lines hold, after the preprocessor: a construct that would run code before
// the harness takes its secret (a constructor of a lower priority, a section of its own), change how
// the harness is built (#pragma), or read a file into the program at build time (asm .incbin).
// Returns "" or why the submission is refused. Only the lines the preprocessor attributes to a
// student file are read: the library's headers may use these freely.
std::string forbidden_constructs(const std::string& preprocessed, const std::string& src_dir) {
  static const std::set<std::string> banned{"asm", "__asm", "__asm__", "__attribute", "__attribute__", "gnu", "__declspec"};
  std::istringstream in(preprocessed);
  std::string line, file;
  bool student = true;
  int line_no = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) == 0 && line.size() > 2 && std::isdigit(static_cast<unsigned char>(line[2]))) {
      // A line marker: `# N "file" flags`.
      std::istringstream m(line.substr(2));
      m >> line_no;
      const size_t q1 = line.find('"'), q2 = line.rfind('"');
      file = q1 != std::string::npos && q2 > q1 ? line.substr(q1 + 1, q2 - q1 - 1) : "";
      const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : fs::path(src_dir) / file;
      student = !file.empty() && file[0] != '<' && is_under(p.lexically_normal(), src_dir);
      continue;
    }
    ++line_no;
    if (!student) continue;
    const std::string where = fs::path(file).filename().string() + ":" + std::to_string(line_no - 1);
    const std::string t = trim(line);
    if (t.rfind("#pragma", 0) == 0 || (t.rfind("#", 0) == 0 && t.find("pragma") != std::string::npos))
      return where + ": #pragma (or _Pragma)";
    // Identifiers outside string and character literals.
    for (size_t i = 0; i < line.size();) {
      const char c = line[i];
      if (c == '"' || c == '\'') {
        // A raw string R"d( … )d" on one line, or a plain literal with escapes.
        if (c == '"' && i > 0 && line[i - 1] == 'R') {
          const size_t open = line.find('(', i);
          const std::string close = ")" + line.substr(i + 1, open == std::string::npos ? 0 : open - i - 1) + "\"";
          const size_t end = open == std::string::npos ? std::string::npos : line.find(close, open);
          i = end == std::string::npos ? line.size() : end + close.size();
          continue;
        }
        size_t j = i + 1;
        while (j < line.size() && line[j] != c) j += line[j] == '\\' ? 2 : 1;
        i = j + 1;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_')) ++j;
        const std::string word = line.substr(i, j - i);
        if (banned.count(word)) return where + ": '" + word + "'";
        i = j;
        continue;
      }
      ++i;
    }
  }
  return "";
}

// The first errors of a compiler's output: what a student needs, not pages of template notes.
std::string first_errors(const std::string& output, size_t max_lines = 30) {
  std::istringstream in(output);
  std::string line, out;
  size_t n = 0, total = 0;
  while (std::getline(in, line)) {
    ++total;
    if (n < max_lines) {
      out += line + "\n";
      ++n;
    }
  }
  if (total > n) out += "… (" + std::to_string(total - n) + " more lines)\n";
  return out;
}

// Where each student file of the submission is: a folder's file of that name (or the one file
// of that name below it), or the file given itself for a one-file lab.
// The library's answers to the lab (Lab::library_answers) that an object file calls: its undefined
// symbols as `nm -C -u` lists them (`name(args)`), each compared by its name. Returns "" or why the
// submission is refused.
std::string calls_library_answer(const std::string& nm_output, const std::string& file,
                                 const std::vector<std::string>& answers) {
  std::istringstream in(nm_output);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.rfind("U ", 0) != 0) continue;
    const std::string symbol = t.substr(2);
    for (const std::string& a : answers)
      if (symbol.rfind(a, 0) == 0 && (symbol.size() == a.size() || symbol[a.size()] == '('))
        return file + " calls " + a + ", the library's own answer to this lab — write it yourself";
  }
  return "";
}

// "a FIFO", "a character device", …: what a path that is neither a file nor a folder is.
const char* special_file_kind(const fs::file_status& status) {
  switch (status.type()) {
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    default: return "neither a regular file nor a folder";
  }
}

std::map<std::string, std::string> find_student_files(const Lab& lab, const std::string& submission,
                                                      std::string& missing) {
  std::map<std::string, std::string> found;
  const fs::path sub(submission);
  // With error codes: a symbolic-link loop or an unreadable folder is said as such, not thrown raw.
  std::error_code status_error;
  const fs::file_status status = fs::status(sub, status_error);
  if (status_error && status_error != std::errc::no_such_file_or_directory)
    throw UsageError("grade", "--submission " + submission + ": cannot be read (" + status_error.message() +
                                  ") — pass the folder holding your files, or the one file of a one-file lab");
  if (fs::is_regular_file(status)) {
    if (lab.student_files.size() != 1)
      throw UsageError("grade", "--submission " + submission + " is one file, but lab " + lab.name + " has " +
                                    std::to_string(lab.student_files.size()) + " student files — pass their folder");
    found[lab.student_files[0]] = sub.string();
    return found;
  }
  if (!fs::exists(status)) throw UsageError("grade", "--submission " + submission + ": no such file or folder");
  if (!fs::is_directory(status))
    throw UsageError("grade", "--submission " + submission + " is " + special_file_kind(status) +
                                  ", not a file or folder — pass the folder holding your files");
  for (const std::string& f : lab.student_files) {
    std::error_code file_error;
    if (fs::is_regular_file(sub / f, file_error)) {
      found[f] = (sub / f).string();
      continue;
    }
    std::vector<std::string> hits;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(sub, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->is_regular_file() && it->path().filename() == fs::path(f).filename()) hits.push_back(it->path().string());
    }
    if (hits.size() == 1) found[f] = hits[0];
    else missing += (missing.empty() ? "" : ", ") + f + (hits.empty() ? " (not found)" : " (found " + std::to_string(hits.size()) + " times)");
  }
  return found;
}

bool have_need(const std::string& need, const Toolchain& t, std::string& why) {
  if (need == "gpu") {
    if (cuda_available() && cuda_device_count() > 0) return true;
    why = "needs a CUDA GPU: " + std::string(cuda_available() ? "none found" : "this scalelab was built without CUDA") +
          " — grade on a GPU machine (make test PRESET=cuda)";
    return false;
  }
  if (need == "mpi") {
    const bool built = std::any_of(t.definitions.begin(), t.definitions.end(),
                                   [](const std::string& d) { return d.rfind("SCALELAB_HAVE_MPI", 0) == 0; });
    bool mpirun = false;
    std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
    std::string dir;
    while (std::getline(path, dir, ':'))
      if (!dir.empty() && ::access((dir + "/mpirun").c_str(), X_OK) == 0) mpirun = true;
    if (built && mpirun) return true;
    why = "needs MPI: " + std::string(built ? "mpirun is not on PATH" : "this scalelab was built without MPI") +
          " — apt-get install libopenmpi-dev openmpi-bin and rebuild";
    return false;
  }
  why = "needs '" + need + "', which the grader does not know";
  return false;
}

// A student file the compiler takes; the others (headers aside) are data the checks read.
bool compiled(const std::string& file) {
  const std::string ext = fs::path(file).extension().string();
  return ext == ".cpp" || ext == ".cc" || ext == ".cxx" || ext == ".c";
}

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// A numeric question: the student's number against the rubric's, with its tolerance. No harness
// runs; "TODO" when the question is not answered yet (the hand-out's null).
CheckResult grade_answer(const CheckSpec& spec, const std::string& workdir) {
  CheckResult r;
  r.spec = spec;
  r.status = Status::failed;
  const auto& a = spec.answer;
  const std::string file = workdir + "/" + fs::path(a.file).filename().string();
  const std::string tol = a.abs_tol > 0 && a.rel_tol > 0
                              ? "± " + number_text(a.abs_tol) + " or ± " + number_text(100 * a.rel_tol) + " %"
                          : a.rel_tol > 0 ? "± " + number_text(100 * a.rel_tol) + " %"
                                          : "± " + number_text(a.abs_tol);
  const std::string want = number_text(a.expected) + " " + tol;
  if (!a.has_expected) {
    r.status = Status::blocked;
    r.output = "blocked: the expected value of this question is not in the hand-out — your instructor's grader checks it";
    return r;
  }
  json j;
  try {
    j = json::parse(read_text(file));
  } catch (const std::exception& e) {
    r.output = "FAILED: " + a.file + " is not valid JSON: " + json_reason(e) + "\n  expected: {\"" + a.key + "\": <number>, …}";
    return r;
  }
  if (!j.is_object() || !j.contains(a.key) || j[a.key].is_null()) {
    r.output = "TODO: answer '" + a.key + "' in " + a.file + " (it is not answered yet)";
    return r;
  }
  const json& v = j[a.key];
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    r.output = "FAILED: '" + a.key + "' in " + a.file + " is not a number\n  expected: a number\n  got:      " + v.dump();
    return r;
  }
  const double got = v.get<double>();
  const double err = std::fabs(got - a.expected);
  const bool ok = err <= a.abs_tol || err <= a.rel_tol * std::fabs(a.expected);
  r.status = ok ? Status::passed : Status::failed;
  r.score = ok ? spec.points : 0;
  r.output = std::string(ok ? "" : "FAILED: ") + a.file + ": " + a.key + "\n  expected: " + want + "\n  got:      " +
             number_text(got) + "\n";
  return r;
}

CheckResult run_check(const CheckSpec& spec, const std::string& harness, const std::string& workdir,
                      const std::string& profiles, const Toolchain& t, const std::vector<std::string>& hidden) {
  CheckResult r;
  r.spec = spec;
  Job job;
  job.argv.push_back(harness);
  for (const auto& a : spec.args) job.argv.push_back(a);
  job.cwd = workdir;
  job.timeout_s = spec.timeout_s;
  job.limits.apply = true;
  job.limits.cpu_s = 2 * spec.timeout_s + 1;  // every core busy: CPU time runs ahead of the wall clock
  job.limits.memory_mb = t.sanitized ? 0 : spec.memory_mb;
  const bool root = ::geteuid() == 0;
  job.drop_to_nobody = root;
  job.hidden = hidden;
  job.verdict_secret = random_secret();
  // Threads and processes a check may add. RLIMIT_NPROC counts every task of the user, and checks
  // (of this grader and of others graded beside it) all run as that user, so the allowance must
  // cover them together: large enough for many multi-threaded checks at once, small enough that a
  // fork bomb stops long before the machine does (its wall-clock limit then kills the group).
  constexpr int64_t kTaskAllowance = 1024;
  uid_t runs_as = ::getuid();
  if (root) runs_as = ::getpwnam("nobody") ? ::getpwnam("nobody")->pw_uid : 65534;
  job.limits.procs = tasks_of_user(runs_as) + kTaskAllowance;
  job.env = {"PATH=/usr/bin:/bin", "HOME=" + workdir, "TMPDIR=" + workdir, "LANG=C.UTF-8", "OPENBLAS_NUM_THREADS=1",
             "OMP_NUM_THREADS=1"};
  if (!profiles.empty()) job.env.push_back("SCALELAB_PROFILES=" + profiles);
  else if (const char* v = std::getenv("SCALELAB_PROFILES")) job.env.push_back(std::string("SCALELAB_PROFILES=") + v);
  if (const char* v = std::getenv("UBSAN_OPTIONS")) job.env.push_back(std::string("UBSAN_OPTIONS=") + v);
  if (t.sanitized) {
    // ASan reserves terabytes of address space, so RLIMIT_AS cannot bound it; its allocator can.
    std::string asan = "allocator_may_return_null=1:detect_leaks=0:max_allocation_size_mb=" + std::to_string(spec.memory_mb);
    if (const char* v = std::getenv("ASAN_OPTIONS")) asan = std::string(v) + ":" + asan;
    job.env.push_back("ASAN_OPTIONS=" + asan);
  }
  JobResult j = run_jobs({job}).front();
  r.seconds = j.seconds;
  std::string out = j.output;
  if (j.dropped_bytes > 0) out += "\n… (" + std::to_string(j.dropped_bytes) + " more bytes of output cut)\n";
  const int st = j.wait_status;
  char buf[256];
  if (j.timed_out) {
    r.status = Status::timeout;
    std::snprintf(buf, sizeof buf, "no result within %g s (wall clock): stopped, with every process it started — an "
                  "endless loop, or ranks waiting on each other for ever?", spec.timeout_s);
    r.output = buf + std::string(out.empty() ? "" : "\noutput so far:\n" + out);
  } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    // Exit status 0 is not a pass: anyone can exit 0. The harness's verdict, with the secret only
    // it was given, is.
    const std::string check = spec.args.empty() ? spec.name : spec.args.front();
    const std::string want = job.verdict_secret + " passed " + check + "\n";
    if (j.verdict == want) {
      r.status = Status::passed;
      r.output = out;
    } else {
      r.status = Status::failed;
      std::snprintf(buf, sizeof buf, "the check ended before its verdict (exit 0 after %.2f s, without the harness's "
                    "word that it passed): the submission ended the process itself (exit, _exit, quick_exit) or "
                    "closed the harness's descriptors — return from your functions instead", j.seconds);
      r.output = buf + std::string(out.empty() ? "" : "\noutput:\n" + out);
    }
  } else if (WIFEXITED(st)) {
    r.status = Status::failed;
    r.output = out.empty() ? "the harness exited with status " + std::to_string(WEXITSTATUS(st)) + " and said nothing" : out;
    if (WEXITSTATUS(st) == 127 && out.find("[grade]") != std::string::npos)
      throw Error("grade", "cannot start the harness for check " + spec.name + ": " + trim(out));
  } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGXCPU) {
    r.status = Status::timeout;
    std::snprintf(buf, sizeof buf, "used its %g s of CPU time (SIGXCPU) — an endless loop?", job.limits.cpu_s);
    r.output = buf + std::string(out.empty() ? "" : "\noutput so far:\n" + out);
  } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ) {
    r.status = Status::failed;
    r.output = "wrote a file larger than the limit of " + std::to_string(job.limits.file_mb) + " MiB (SIGXFSZ)\n" + out;
  } else if (WIFSIGNALED(st)) {
    r.status = Status::crashed;
    const char* name = strsignal(WTERMSIG(st));
    r.output = "crashed: signal " + std::to_string(WTERMSIG(st)) + " (" + (name ? name : "?") + ")" +
               (WTERMSIG(st) == SIGSEGV ? " — a bad pointer or index, or a stack overflow" : "") +
               (WTERMSIG(st) == SIGABRT ? " — an uncaught exception, an assert, or a sanitizer's report" : "") +
               (out.empty() ? "" : "\noutput so far:\n" + out);
  } else {
    r.status = Status::failed;
    r.output = "ended with wait status " + std::to_string(st) + "\n" + out;
  }
  r.score = r.status == Status::passed ? spec.points : 0;
  return r;
}

}  // namespace

Report grade(const Options& o) {
  const auto t0 = Clock::now();
  const std::string labs_dir = o.labs_dir.empty() ? default_labs_dir() : o.labs_dir;
  const Lab lab = load_lab(labs_dir, o.lab);
  const Toolchain tc = load_toolchain(o.toolchain);
  for (const auto& name : o.only)
    if (std::none_of(lab.checks.begin(), lab.checks.end(), [&](const CheckSpec& c) { return c.name == name; }))
      throw UsageError("grade", "--check " + name + ": lab " + lab.name + " has no such check — see its checks.json");

  Report report;
  report.lab = lab.name;
  const std::string submission = o.submission.empty() ? lab.dir : o.submission;
  report.submission = submission;
  std::string missing;
  const auto files = find_student_files(lab, submission, missing);

  // Orphans (a check's forked helpers whose parent died) come to us, so kill_group reaps them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  Scratch scratch;
  scratch.keep = o.keep_scratch;
  {
    std::string tmpl = (fs::temp_directory_path() / "scalelab-grade-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw Error("grade", "cannot make a scratch folder in " + fs::temp_directory_path().string() + ": " + std::strerror(errno));
    scratch.dir = tmpl;
    ::chmod(scratch.dir.c_str(), 0755);  // checks run as nobody when the grader is root
    fs::create_directories(scratch.dir + "/src");
  }
  if (o.keep_scratch) std::fprintf(stderr, "[grade] scratch folder kept: %s\n", scratch.dir.c_str());

  // The harness object depends on the lab's instructor files and the toolchain only: compiled once,
  // kept by content in the cache, shared by every submission.
  std::string key_text = read_text(tc.path) + read_text(lab.dir + "/" + lab.harness);
  std::error_code ec;
  for (const auto& dir : {fs::path(lab.dir), fs::path(labs_dir) / "common"})
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".h") key_text += e.path().string() + read_text(e.path().string());
  for (const auto& l : tc.link_items)  // rebuilt libraries: their headers may have changed too
    if (l[0] == '/' && fs::exists(l))
      key_text += l + std::to_string(fs::last_write_time(l).time_since_epoch().count());
  const std::string cache_dir = o.cache_dir.empty() ? (fs::path(tc.path).parent_path() / "grade-cache").string() : o.cache_dir;
  fs::create_directories(cache_dir, ec);
  const std::string cached = cache_dir + "/" + lab.name + "-" + hex(fnv1a(key_text)) + ".o";
  const bool harness_cached = fs::exists(cached);
  const std::string harness_obj = ec ? scratch.dir + "/harness.o" : cached;

  const std::vector<std::string> hidden = secret_folders(labs_dir, scratch.dir);
  std::string policy;  // why the submission is refused, though it compiles
  CheckResult builds;
  builds.spec.name = "builds";
  builds.spec.description = "the submission compiles and links with the lab's harness";
  builds.spec.points = 0;
  const auto tb = Clock::now();
  if (!missing.empty()) {
    builds.status = Status::failed;
    builds.output = "the submission " + submission + " lacks " + missing + " — hand in " +
                    [&] { std::string s; for (const auto& f : lab.student_files) s += (s.empty() ? "" : ", ") + f; return s; }();
  } else {
    std::vector<Job> jobs;
    std::vector<std::string> objects;
    const std::string tmp_obj = scratch.dir + "/harness.o";
    if (!harness_cached) {
      Job j;
      j.argv = compile_command(tc, lab, lab.dir + "/" + lab.harness, tmp_obj);
      j.cwd = scratch.dir;
      j.timeout_s = 600;
      jobs.push_back(j);
    }
    // The student's files compile as user nobody, against the public headers alone, in a mount
    // namespace where the labs and the source tree are hidden: nothing of the instructor's (a
    // solution, a rubric) nor root's can be included.
    const std::vector<std::string> includes = public_headers(tc, lab, labs_dir, scratch.dir);
    const std::string obj_dir = scratch.dir + "/obj";
    fs::create_directories(obj_dir);
    if (::geteuid() == 0) {
      const passwd* pw = ::getpwnam("nobody");
      (void)!::chown(obj_dir.c_str(), pw ? pw->pw_uid : 65534, pw ? pw->pw_gid : 65534);
    }
    std::vector<std::string> compiled_files;
    for (const auto& f : lab.student_files) {
      const std::string base = fs::path(f).filename().string();
      fs::copy_file(files.at(f), scratch.dir + "/src/" + base, fs::copy_options::overwrite_existing);
      ::chmod((scratch.dir + "/src/" + base).c_str(), 0644);
      if (!compiled(base)) continue;  // a header, or an answers file (into the checks' folder below)
      Job j;
      j.argv = student_compile_command(tc, includes, base, "../obj/" + base + ".o");
      j.cwd = scratch.dir + "/src";
      j.timeout_s = 300;
      j.drop_to_nobody = true;
      j.hidden = hidden;
      jobs.push_back(j);
      objects.push_back(obj_dir + "/" + base + ".o");
      compiled_files.push_back(base);
    }
    const auto results = run_jobs(jobs);
    std::string errors;
    size_t k = 0;
    if (!harness_cached) {
      const JobResult& h = results[k++];
      if (h.timed_out || !WIFEXITED(h.wait_status) || WEXITSTATUS(h.wait_status) != 0) {
        // The student's files may be to blame (a header they changed is not used), but a harness
        // that does not compile with the lab's own files is the lab's bug: the grader cannot run.
        if (h.output.find("No such file") != std::string::npos && h.output.find(tc.cxx) != std::string::npos)
          throw UsageError("grade", "cannot run the compiler " + tc.cxx + " — install it (apt-get install g++)");
        throw Error("grade", "the harness of lab " + lab.name + " does not compile — the lab is broken, not the "
                             "submission:\n" + first_errors(h.output));
      }
      // Into the cache atomically: two graders at once never see half an object.
      const std::string part = harness_obj + ".tmp-" + std::to_string(::getpid());
      fs::copy_file(tmp_obj, part, fs::copy_options::overwrite_existing, ec);
      if (!ec) fs::rename(part, harness_obj, ec);
      if (ec) fs::remove(part, ec);
    }
    // What each student file read and holds: only public headers, no constructs that run before
    // the harness or embed files.
    for (size_t i = 0; i < compiled_files.size(); ++i) {
      const JobResult& s = results[k + i];
      if (s.timed_out || !WIFEXITED(s.wait_status) || WEXITSTATUS(s.wait_status) != 0) continue;
      const std::string stem = obj_dir + "/" + compiled_files[i];
      for (const std::string& dep : dependencies(stem + ".d")) {
        const fs::path p = real(fs::path(dep).is_absolute() ? fs::path(dep) : fs::path(scratch.dir) / "src" / dep);
        if (is_under(p, real(scratch.dir))) continue;
        if (std::any_of(hidden.begin(), hidden.end(), [&](const std::string& d) { return is_under(p, d); }) ||
            is_under(p, real(labs_dir)))
          policy += compiled_files[i] + " includes " + dep + ", which is not a public header — a submission may include "
                    "lab.h, labs/common/, the library's headers (core/, strategies/ …) and the standard library only\n";
      }
      std::string ii;
      try {
        ii = read_regular_file(stem + ".ii", "grade", int64_t{256} << 20, "the compiler writes it");
      } catch (const std::exception&) {
      }
      const std::string why = forbidden_constructs(ii, scratch.dir + "/src");
      if (!why.empty())
        policy += why + " — not allowed in a submission: it could run before the harness, embed a file or change how "
                  "the harness is built (attributes, asm and pragmas are refused)\n";
    }
    // Which of the library's own answers the student's objects call (nm lists what they leave
    // undefined), for each file that compiled; run as the compiler ran, on files the student made.
    if (!lab.library_answers.empty() && policy.empty()) {
      std::string nm = "/usr/bin/nm";
      if (::access(nm.c_str(), X_OK) != 0) nm = "/bin/nm";
      std::vector<Job> listings;
      std::vector<std::string> listed_files;
      for (size_t i = 0; i < compiled_files.size(); ++i) {
        const JobResult& c = results[k + i];
        if (c.timed_out || !WIFEXITED(c.wait_status) || WEXITSTATUS(c.wait_status) != 0) continue;
        Job j;
        j.argv = {nm, "-C", "-u", obj_dir + "/" + compiled_files[i] + ".o"};
        j.cwd = scratch.dir;
        j.timeout_s = 60;
        j.drop_to_nobody = true;
        j.hidden = hidden;
        listings.push_back(j);
        listed_files.push_back(compiled_files[i]);
      }
      const auto listed = run_jobs(listings);
      for (size_t i = 0; i < listed.size(); ++i) {
        const JobResult& r = listed[i];
        if (r.timed_out || !WIFEXITED(r.wait_status) || WEXITSTATUS(r.wait_status) != 0)
          throw Error("grade", "cannot list the symbols of " + listed_files[i] + " with " + nm + ": " + first_errors(r.output) +
                                   " — install binutils (apt-get install binutils)");
        const std::string why = calls_library_answer(r.output, listed_files[i], lab.library_answers);
        if (!why.empty()) policy += why + "\n";
      }
    }
    for (; k < results.size(); ++k) {
      const JobResult& s = results[k];
      if (s.timed_out) errors += "the compiler took longer than 300 s\n";
      else if (!WIFEXITED(s.wait_status) || WEXITSTATUS(s.wait_status) != 0) errors += s.output;
    }
    if (!policy.empty()) errors = policy;
    if (errors.empty()) {
      Job link;
      link.argv = {tc.cxx};
      for (const auto& f : tc.link_flags) link.argv.push_back(f);
      link.argv.push_back(fs::exists(harness_obj) ? harness_obj : tmp_obj);
      for (const auto& obj : objects) link.argv.push_back(obj);
      link.argv.push_back("-o");
      link.argv.push_back(scratch.dir + "/harness");
      for (const auto& l : tc.link_items) link.argv.push_back(l);
      link.cwd = scratch.dir;
      link.timeout_s = 300;
      const JobResult l = run_jobs({link}).front();
      if (l.timed_out || !WIFEXITED(l.wait_status) || WEXITSTATUS(l.wait_status) != 0) errors = l.output;
    }
    if (errors.empty()) {
      builds.status = Status::passed;
      builds.output = harness_cached ? "compiled (the harness from the cache)" : "compiled";
    } else if (!policy.empty()) {
      builds.status = Status::failed;
      builds.output = std::string(kRefusedHeading) + "\n" + policy;
    } else {
      builds.status = Status::failed;
      builds.output = "the submission does not compile — the compiler's first errors:\n" + first_errors(errors);
    }
  }
  builds.seconds = since(tb);
  builds.score = 0;
  report.build_seconds = builds.seconds;
  report.checks.push_back(builds);
  if (o.verbose) std::fprintf(stderr, "[grade] %-24s %s (%.1f s)\n", "builds", status_name(builds.status), builds.seconds);

  const std::string workdir = scratch.dir + "/work";
  fs::create_directories(workdir);
  std::string profiles;  // the hardware profiles where user nobody can read them
  if (::geteuid() == 0) {
    // A source tree under a private home (/root) is out of nobody's reach: the checks read a copy.
    profiles = scratch.dir + "/profiles";
    fs::create_directories(profiles);
    ::chmod(profiles.c_str(), 0755);
    for (const auto& e : fs::directory_iterator(profiles_dir(), ec))
      if (e.path().extension() == ".json") {
        fs::copy_file(e.path(), profiles + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing, ec);
        ::chmod((profiles + "/" + e.path().filename().string()).c_str(), 0644);
      }
    if (const passwd* pw = ::getpwnam("nobody")) (void)!::chown(workdir.c_str(), pw->pw_uid, pw->pw_gid);
    else (void)!::chown(workdir.c_str(), 65534, 65534);
  }
  // The student files the compiler does not take (an answers file): in the checks' working
  // folder, where the harness reads them.
  if (builds.status == Status::passed)
    for (const auto& f : lab.student_files)
      if (!compiled(f) && fs::path(f).extension() != ".h") {
        const std::string dst = workdir + "/" + fs::path(f).filename().string();
        fs::copy_file(files.at(f), dst, fs::copy_options::overwrite_existing);
        ::chmod(dst.c_str(), 0644);
      }
  for (const CheckSpec& spec : lab.checks) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), spec.name) == o.only.end()) continue;
    CheckResult r;
    r.spec = spec;
    std::string why;
    if (builds.status != Status::passed) {
      r.status = Status::blocked;
      r.output = "blocked: the submission did not build (see the check `builds`)";
    } else if (std::any_of(spec.needs.begin(), spec.needs.end(), [&](const std::string& n) { return !have_need(n, tc, why); })) {
      r.status = Status::blocked;
      r.output = "blocked: " + why;
    } else if (spec.is_answer) {
      r = grade_answer(spec, workdir);
    } else {
      CheckSpec limited = spec;
      if (o.timeout_s > 0) limited.timeout_s = o.timeout_s;
      r = run_check(limited, scratch.dir + "/harness", workdir, profiles, tc, hidden);
      r.spec.timeout_s = spec.timeout_s;
    }
    if (o.verbose) std::fprintf(stderr, "[grade] %-24s %s (%.1f s)\n", spec.name.c_str(), status_name(r.status), r.seconds);
    const bool stop = o.stop_at_first_failure && r.status != Status::passed;
    report.checks.push_back(std::move(r));
    if (stop) break;
  }
  for (const CheckResult& c : report.checks) {
    report.score += c.score;
    report.max_score += c.spec.points;
  }
  report.seconds = since(t0);
  return report;
}

// ---------------------------------------------------------------------------------------------
// Reports

std::string results_json(const Report& r) {
  json tests = json::array();
  for (const CheckResult& c : r.checks) {
    std::string output = c.output;
    if (c.status != Status::passed && c.status != Status::failed)
      output = "[" + std::string(status_name(c.status)) + "] " + output;
    if (!c.spec.description.empty()) output = c.spec.description + "\n" + output;
    tests.push_back({{"name", c.spec.name},
                     {"score", c.score},
                     {"max_score", c.spec.points},
                     {"status", c.status == Status::passed ? "passed" : "failed"},
                     {"output", output},
                     {"visibility", visibility_name(c.spec.visibility)},
                     {"extra_data", {{"result", status_name(c.status)}, {"seconds", c.seconds}}}});
  }
  char summary[256];
  std::snprintf(summary, sizeof summary, "lab %s: %g / %g", r.lab.c_str(), r.score, r.max_score);
  json j{{"score", r.score},
         {"execution_time", r.seconds},
         {"output", summary},
         {"visibility", "visible"},
         {"stdout_visibility", "hidden"},
         {"tests", tests}};
  return j.dump(2) + "\n";
}

namespace {
std::string xml_escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') out += '?';
        else out += static_cast<char>(ch);
    }
  }
  return out;
}
}  // namespace

std::string junit_xml(const Report& r) {
  int failures = 0, skipped = 0;
  for (const CheckResult& c : r.checks) {
    if (c.status == Status::blocked) ++skipped;
    else if (c.status != Status::passed) ++failures;
  }
  std::ostringstream x;
  char t[64];
  std::snprintf(t, sizeof t, "%.3f", r.seconds);
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"" << xml_escape(r.lab)
    << "\" tests=\"" << r.checks.size() << "\" failures=\"" << failures << "\" errors=\"0\" skipped=\"" << skipped
    << "\" time=\"" << t << "\">\n";
  for (const CheckResult& c : r.checks) {
    std::snprintf(t, sizeof t, "%.3f", c.seconds);
    x << "    <testcase classname=\"" << xml_escape(r.lab) << "\" name=\"" << xml_escape(c.spec.name) << "\" time=\"" << t
      << "\">";
    if (c.status == Status::blocked) {
      x << "\n      <skipped message=\"" << xml_escape(c.output.substr(0, c.output.find('\n'))) << "\"/>\n    ";
    } else if (c.status != Status::passed) {
      x << "\n      <failure type=\"" << status_name(c.status) << "\" message=\""
        << xml_escape(c.output.substr(0, c.output.find('\n'))) << "\">" << xml_escape(c.output) << "</failure>\n    ";
    } else if (!c.output.empty()) {
      x << "\n      <system-out>" << xml_escape(c.output) << "</system-out>\n    ";
    }
    x << "</testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

std::string table(const Report& r, bool details) {
  std::ostringstream s;
  char line[512];
  s << "lab " << r.lab << " — submission " << r.submission << "\n";
  std::snprintf(line, sizeof line, "%-22s %9s  %-8s %8s  %s\n", "check", "points", "result", "time", "visibility");
  s << line;
  for (const CheckResult& c : r.checks) {
    char pts[32];
    std::snprintf(pts, sizeof pts, "%g/%g", c.score, c.spec.points);
    std::snprintf(line, sizeof line, "%-22s %9s  %-8s %6.1f s  %s\n", c.spec.name.c_str(), pts, status_name(c.status),
                  c.seconds, visibility_name(c.spec.visibility));
    s << line;
    if (c.status == Status::passed && !details) continue;
    // What went wrong, indented under the row: the first lines are what a student needs.
    std::istringstream out(c.output);
    std::string l;
    int n = 0;
    while (std::getline(out, l) && n < 12) {
      s << "    " << l << "\n";
      ++n;
    }
    if (std::getline(out, l)) s << "    … (the rest in results.json)\n";
  }
  const double pct = r.max_score > 0 ? 100.0 * r.score / r.max_score : 100.0;
  std::snprintf(line, sizeof line, "score %g / %g (%.0f %%)   build %.1f s, whole grade %.1f s\n", r.score, r.max_score, pct,
                r.build_seconds, r.seconds);
  s << line;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// The hand-out

void release(const std::string& labs_dir, const std::string& out_tar_gz) {
  const std::vector<std::string> labs = list_labs(labs_dir);
  if (labs.empty()) throw UsageError("grade", "no labs in " + labs_dir + " to release — is --labs-dir right?");
  Scratch stage;
  std::string tmpl = (fs::temp_directory_path() / "scalelab-release-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw Error("grade", "cannot make a staging folder: " + std::string(std::strerror(errno)));
  stage.dir = tmpl;
  const fs::path root = fs::path(stage.dir) / "scalelab-labs";
  fs::create_directories(root);
  for (const char* top : {"README.md"})
    if (fs::exists(fs::path(labs_dir) / top)) fs::copy_file(fs::path(labs_dir) / top, root / top);
  if (fs::exists(fs::path(labs_dir) / "common")) fs::copy(fs::path(labs_dir) / "common", root / "common", fs::copy_options::recursive);
  for (const std::string& name : labs) {
    const Lab lab = load_lab(labs_dir, name);
    const fs::path src = lab.dir, dst = root / name;
    fs::create_directories(dst);
    // Everything at the lab's top level but the rubric (rewritten below): README, headers, stubs,
    // harness. solution/ and mutants/ are folders and stay behind.
    for (const auto& e : fs::directory_iterator(src)) {
      if (!e.is_regular_file() || e.path().filename() == "checks.json") continue;
      fs::copy_file(e.path(), dst / e.path().filename());
    }
    json rubric = json::parse(read_text(lab.dir + "/checks.json"));
    const json defaults = rubric.value("defaults", json::object());
    json kept = json::array();
    for (const json& c : rubric["checks"]) {
      const std::string v = c.value("visibility", defaults.value("visibility", std::string("visible")));
      if (v != "visible") continue;
      json check = c;
      // A numeric question's expected value is the answer key: the hand-out asks, it does not tell.
      if (check.contains("answer")) check["answer"].erase("expected");
      kept.push_back(check);
    }
    rubric["checks"] = kept;
    write_file_atomically((dst / "checks.json").string(), rubric.dump(2) + "\n", "grade");
  }
  const std::string tmp_tar = stage.dir + "/out.tar.gz";
  Job tar;
  tar.argv = {"/bin/tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-czf", tmp_tar, "-C", stage.dir,
              "scalelab-labs"};
  tar.timeout_s = 120;
  if (::access(tar.argv[0].c_str(), X_OK) != 0) tar.argv[0] = "/usr/bin/tar";
  const JobResult t = run_jobs({tar}).front();
  if (t.timed_out || !WIFEXITED(t.wait_status) || WEXITSTATUS(t.wait_status) != 0)
    throw UsageError("grade", "tar failed (" + trim(t.output) + ") — install tar (apt-get install tar)");
  const fs::path out(out_tar_gz);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  write_file_atomically(out_tar_gz, read_text(tmp_tar), "grade");
}

// ---------------------------------------------------------------------------------------------
// Mutants

void apply_patch(const std::string& patch_file, const std::string& dir) {
  Job p;
  p.argv = {"/usr/bin/patch", "-p1", "--batch", "--silent", "--no-backup-if-mismatch", "-d", dir, "-i",
            fs::absolute(patch_file).string()};
  if (::access(p.argv[0].c_str(), X_OK) != 0) p.argv[0] = "/bin/patch";
  if (::access(p.argv[0].c_str(), X_OK) != 0)
    throw UsageError("grade", "cannot apply " + patch_file + ": no `patch` program — apt-get install patch");
  p.timeout_s = 60;
  const JobResult r = run_jobs({p}).front();
  if (r.timed_out || !WIFEXITED(r.wait_status) || WEXITSTATUS(r.wait_status) != 0)
    throw UsageError("grade", patch_file + " does not apply to the solution (" + trim(r.output) +
                                  ") — remake it with diff -u against solution/");
}

}  // namespace scalelab::grade
