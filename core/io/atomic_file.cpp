#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace scalelab {

void write_file_atomically(const std::string& path, const std::string& text, const std::string& component,
                           const std::function<void(const std::string& written)>& verify) {
  // The temporary name carries the pid so two processes writing the same target do not collide.
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(component, path + ": cannot write here (" + std::strerror(errno) +
                               ") — check the directory exists and is writable");
  const char* p = text.data();
  size_t left = text.size();
  bool ok = true;
  errno = 0;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // fsync before the rename: after a crash the target holds the old text or the new, never a mix.
  ok = ok && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    throw Error(component, path + ": writing failed (" + std::strerror(saved_errno ? saved_errno : errno) +
                               ", disk full?) — nothing was written");
  }
  if (verify) {
    try {
      verify(tmp);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(component, path + ": cannot rename the finished file into place (" + why + ")");
  }
}

}  // namespace scalelab
