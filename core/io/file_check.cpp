#include "core/io/file_check.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace scalelab {

namespace {

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  return buf;
}

// What a stat says is wrong with reading the path as a file; empty when nothing is.
std::string refusal(const struct stat& st, int64_t max_bytes) {
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (S_ISFIFO(st.st_mode)) return "is a FIFO (named pipe), not a file — reading it would wait for a writer";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "is a device, not a file";
  if (S_ISSOCK(st.st_mode)) return "is a socket, not a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_size > max_bytes)
    return "is " + size_text(st.st_size) + ", more than the " + size_text(max_bytes) + " such a file can be";
  return "";
}

[[noreturn]] void refuse(const std::string& path, const std::string& component, const std::string& why,
                         const std::string& hint) {
  throw Error(component, path + ": " + why + (hint.empty() ? "" : " — " + hint));
}

std::string open_error(int err) {
  if (err == ENOENT) return "not found";
  if (err == ELOOP) return "a loop of symbolic links";
  if (err == EACCES) return "permission denied";
  if (err == ENOTDIR) return "a part of the path is not a directory";
  return std::string("cannot open (") + std::strerror(err) + ")";
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// What makes two paths one file: (device, inode) of one that exists; the real path of the
// directory and the name of one that does not (yet).
struct FileIdentity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string where;
  bool operator==(const FileIdentity& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : where == o.where);
  }
};

FileIdentity identify(const std::string& path) {
  FileIdentity id;
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  const std::string dir = directory_of(path);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  char real[PATH_MAX];
  id.where = (::realpath(dir.c_str(), real) ? std::string(real) : dir) + "/" + name;
  return id;
}

}  // namespace

void check_distinct_paths(const std::vector<PathUse>& uses, const std::string& component,
                          const std::vector<std::pair<std::string, std::string>>& allowed) {
  std::vector<FileIdentity> ids;
  for (const PathUse& u : uses) ids.push_back(u.path.empty() ? FileIdentity{} : identify(u.path));
  auto is_allowed = [&](const PathUse& in, const PathUse& out) {
    for (const auto& [input, output] : allowed)
      if (in.option == input && out.option == output) return true;
    return false;
  };
  for (size_t i = 0; i < uses.size(); ++i)
    for (size_t j = i + 1; j < uses.size(); ++j) {
      const PathUse& a = uses[i];
      const PathUse& b = uses[j];
      if (a.path.empty() || b.path.empty() || !(a.written || b.written) || !(ids[i] == ids[j])) continue;
      const std::string file = a.path == b.path ? a.path : a.path + " and " + b.path + ", one file";
      if (a.written && b.written)
        throw UsageError(component, a.option + " and " + b.option + " name the same file (" + file +
                                        ") — one would overwrite the other: give each output its own file");
      const PathUse& in = a.written ? b : a;
      const PathUse& out = a.written ? a : b;
      if (is_allowed(in, out)) continue;
      throw UsageError(component, out.option + " would overwrite " + in.option + ", the file it reads (" + file +
                                      ") — write the output to another file");
    }
}

void check_path_not_empty(const std::string& option, const std::string& value) {
  if (value.empty()) throw UsageError("cli", option + " is empty — give a file name or leave the option out");
}

int64_t check_regular_file(const std::string& path, const std::string& component, int64_t max_bytes,
                           const std::string& hint) {
  if (path.empty()) refuse("''", component, "an empty path", hint);
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) refuse(path, component, open_error(errno), hint);
  const std::string why = refusal(st, max_bytes);
  if (!why.empty()) refuse(path, component, why, hint);
  return static_cast<int64_t>(st.st_size);
}

std::string read_regular_file(const std::string& path, const std::string& component, int64_t max_bytes,
                              const std::string& hint) {
  if (path.empty()) refuse("''", component, "an empty path", hint);
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then says what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) refuse(path, component, open_error(errno), hint);
  struct stat st{};
  std::string why = ::fstat(fd, &st) != 0 ? std::string("cannot stat (") + std::strerror(errno) + ")" : refusal(st, max_bytes);
  std::string bytes;
  if (why.empty()) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = std::string("reading failed (") + std::strerror(errno) + ")";
        break;
      }
      if (n == 0) break;  // shrank while being read: what is there is checked by the caller
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  ::close(fd);
  if (!why.empty()) refuse(path, component, why, hint);
  return bytes;
}

void check_output_path(const std::string& path, const std::string& component) {
  if (path.empty()) refuse("''", component, "an empty path", "name a file to write");
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    refuse(path, component, "is a directory", "name a file to write, e.g. " + path + "/run.out");
  // An output is written beside its target and renamed over it: a FIFO or a device (as root,
  // /dev/null) would be replaced by a regular file.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)                          ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                    : "not a regular file";
    refuse(path, component, std::string("is ") + kind + ", which writing the output would replace",
           "name a regular file (to discard an output, leave its option out)");
  }
  const std::string dir = directory_of(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    refuse(path, component, "its directory " + dir + " does not exist", "create it first (mkdir -p " + dir + ")");
}

int remove_stale_temporaries(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = directory_of(path);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  const pid_t self = ::getpid();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid <= 0 || pid == self) continue;
    // Only a process that is surely gone: kill(pid, 0) fails with ESRCH (EPERM: alive, another
    // user's). A reused pid (some other process alive under that number) keeps its file, which is
    // the safe mistake. (A writer in another pid namespace sharing this folder is not seen here.)
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace scalelab
