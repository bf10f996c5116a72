#include "core/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace scalelab {

const char* shm_sharing_name(ShmSharing sharing) {
  return sharing == ShmSharing::named_file ? "named_file" : "fd_passing";
}

ShmSharing parse_shm_sharing(const std::string& name) {
  if (name == "fd_passing") return ShmSharing::fd_passing;
  if (name == "named_file") return ShmSharing::named_file;
  throw UsageError("comm", "--shm-sharing '" + name + "' is unknown — use fd_passing or named_file");
}

std::string shm_name_prefix() { return "/scalelab-" + std::to_string(::getpid()) + "-"; }

namespace {

std::string errno_text(const std::string& call) { return call + ": " + std::strerror(errno); }

std::atomic<int> segment_counter{0};

// One byte with room for one descriptor beside it (SCM_RIGHTS): what goes over the socket.
struct FdMessage {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;  // it points into itself
  FdMessage& operator=(const FdMessage&) = delete;
};

void send_fd(int sock, int fd) {
  FdMessage m;
  cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  while (sendmsg(sock, &m.msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  // A failure means the child is already gone: its exit status tells why.
}

int receive_fd(int sock, std::chrono::milliseconds timeout, const std::string& who) {
  pollfd p{sock, POLLIN, 0};
  int ready;
  while ((ready = poll(&p, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {
  }
  if (ready == 0)
    throw Error("comm", "shm: " + who + " waited " + std::to_string(timeout.count()) +
                            " ms for the segment's file descriptor from the parent — the parent is stuck");
  FdMessage m;
  ssize_t got;
  while ((got = recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  cmsghdr* cm = got > 0 ? CMSG_FIRSTHDR(&m.msg) : nullptr;
  if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
    throw Error("comm", "shm: " + who + " got no file descriptor over its socket (" +
                            (got < 0 ? std::string(std::strerror(errno)) : std::string("no SCM_RIGHTS message")) +
                            ") — the parent died or failed to send it");
  int fd;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  return fd;
}

// Creates a segment of `bytes` by the sharing strategy and returns its descriptor: an anonymous
// memfd labelled `label` (fd_passing), or the name shm_name_prefix() + tag + <n> (named_file),
// which `name` receives and the caller unlinks.
int create_segment(ShmSharing sharing, const char* label, const std::string& tag, int64_t bytes, std::string& name) {
  int fd = -1;
  if (sharing == ShmSharing::fd_passing) {
    fd = memfd_create(label, MFD_CLOEXEC);
    if (fd < 0) {  // no memfd: a named segment unlinked at once is just as anonymous
      const std::string fallback = shm_name_prefix() + "fd-" + std::to_string(segment_counter++);
      fd = shm_open(fallback.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) shm_unlink(fallback.c_str());
    }
    if (fd < 0) throw Error("comm", "shm: " + errno_text("memfd_create") + " — try --shm-sharing named_file");
  } else {
    const std::string wanted = shm_name_prefix() + tag + std::to_string(segment_counter++);
    fd = shm_open(wanted.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
      throw Error("comm", "shm: " + errno_text("shm_open " + wanted) +
                              " — is /dev/shm mounted and writable? or try --shm-sharing fd_passing");
    name = wanted;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string why = errno_text("ftruncate to " + std::to_string(bytes) + " bytes");
    close(fd);
    if (!name.empty()) shm_unlink(name.c_str());
    name.clear();
    throw Error("comm", "shm: " + why + " — is /dev/shm full?");
  }
  return fd;
}

// A child's descriptor of the segment, by the sharing strategy: received from the parent over
// its socket (fd_passing), or opened by name (named_file).
int open_segment_in_child(ShmSharing sharing, int sock, const std::string& name, std::chrono::milliseconds timeout,
                          const std::string& who) {
  if (sharing == ShmSharing::fd_passing) {
    const int fd = receive_fd(sock, timeout, who);
    close(sock);
    return fd;
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw Error("comm", "shm: " + who + ": " + errno_text("shm_open " + name));
  return fd;
}

}  // namespace

SharedSegment::SharedSegment(int64_t bytes, ShmSharing sharing, const std::string& label)
    : bytes_(bytes), sharing_(sharing), label_(label) {
  if (bytes < 1) throw Error("comm", "shm: a shared segment needs at least one byte, got " + std::to_string(bytes));
  // The name repeats no "scalelab-": /dev/shm/scalelab-<pid>-hogwild-0, not …-scalelab-hogwild-0.
  const std::string tag = (label.rfind("scalelab-", 0) == 0 ? label.substr(9) : label) + "-";
  fd_ = create_segment(sharing, label.c_str(), tag, bytes, name_);
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_text("mmap of " + std::to_string(bytes) + " bytes");
    close(fd_);
    fd_ = -1;
    unlink_name();
    throw Error("comm", "shm: " + why);
  }
  map_ = static_cast<char*>(p);
  if (sharing == ShmSharing::named_file) {  // the children open it by name
    close(fd_);
    fd_ = -1;
  }
}

SharedSegment::~SharedSegment() {
  if (map_) munmap(map_, static_cast<size_t>(bytes_));
  if (fd_ >= 0) close(fd_);
  unlink_name();
}

void SharedSegment::unlink_name() noexcept {
  if (name_.empty()) return;
  shm_unlink(name_.c_str());  // ENOENT when a child already did
  name_.clear();
}

pid_t SharedSegment::fork_child(Children& children, const std::string& child_name, std::chrono::milliseconds timeout,
                                const std::function<int(char* data, int64_t bytes)>& child_main) {
  if (sharing_ == ShmSharing::named_file && name_.empty())
    throw Error("comm", "shm: fork_child(" + child_name + ") after unlink_name(): the segment has no name to open "
                        "any more — fork every child first");
  int sv[2] = {-1, -1};
  if (sharing_ == ShmSharing::fd_passing && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error("comm", "shm: " + errno_text("socketpair"));
  pid_t pid = -1;
  try {
    pid = children.spawn(child_name, [&] {
      // Forget the mapping and descriptor fork handed down: the segment reaches the child
      // through the sharing strategy, as it would reach a process that was not forked from us.
      if (sv[0] >= 0) close(sv[0]);
      munmap(map_, static_cast<size_t>(bytes_));
      if (fd_ >= 0) close(fd_);
      const int fd = open_segment_in_child(sharing_, sv[1], name_, timeout, child_name);
      struct stat st {};
      if (fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(bytes_)) {
        close(fd);
        throw Error("comm", "shm: " + child_name + ": the shared segment is missing or not " + std::to_string(bytes_) +
                                " bytes");
      }
      void* p = mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      close(fd);
      if (p == MAP_FAILED) throw Error("comm", "shm: " + child_name + ": " + errno_text("mmap"));
      return child_main(static_cast<char*>(p), bytes_);
    });
  } catch (...) {
    if (sv[0] >= 0) close(sv[0]), close(sv[1]);
    throw;
  }
  if (sv[0] >= 0) {
    close(sv[1]);
    send_fd(sv[0], fd_);  // the torch.multiprocessing file_descriptor strategy: the kernel installs a new one in the child
    close(sv[0]);
  }
  return pid;
}

}  // namespace scalelab
