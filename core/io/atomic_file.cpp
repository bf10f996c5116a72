#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/io/file_check.h"
#include "core/memory_ledger.h"

namespace scalelab {

namespace {

// The temporaries being written, so that a SIGTERM or SIGINT removes them before the signal ends
// the process as it always did (a SIGKILL's are removed by the next write of the path). The
// handler may run on any thread at any moment, so the table is fixed char buffers, each slot
// claimed with an atomic, and nothing is allocated in it. The table is shared memory made before
// any fork: a run's rank processes (which die with it, PR_SET_PDEATHSIG) register theirs where
// the run's own handler sees them.
constexpr int kTemporarySlots = 64;
enum SlotState : int { kFree, kFilling, kReady, kRemoving };
struct TemporarySlot {
  std::atomic<int> state;
  pid_t owner, owner_parent;
  char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

TemporarySlot* make_temporary_table() {
  void* p = ::mmap(nullptr, sizeof(TemporarySlot) * kTemporarySlots, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<TemporarySlot*>(p);  // zeroed: every slot kFree
}
TemporarySlot* const g_temporaries = make_temporary_table();  // null: temporaries are not tracked

struct sigaction g_before[2];  // SIGTERM's and SIGINT's actions before ours, passed on to
int before_index(int sig) { return sig == SIGTERM ? 0 : 1; }

extern "C" void remove_temporaries_then_pass_on(int sig, siginfo_t* info, void* context) {
  const pid_t self = ::getpid();
  for (int i = 0; g_temporaries && i < kTemporarySlots; ++i) {
    TemporarySlot& slot = g_temporaries[i];
    if (slot.state.load() != kReady) continue;
    // This process's temporaries and its children's (a rank saving a checkpoint): they die with it.
    int ready = kReady;
    if ((slot.owner == self || slot.owner_parent == self) && slot.state.compare_exchange_strong(ready, kRemoving))
      ::unlink(slot.path);
  }
  // Then what the signal did before this handler: another handler's (core/limits.cpp reports
  // OpenBLAS's self-raised SIGINT), or the default action (exit status 128 + sig). The signal is
  // blocked while its handler runs: it is delivered as the handler returns.
  const struct sigaction& before = g_before[before_index(sig)];
  if (before.sa_flags & SA_SIGINFO) return before.sa_sigaction(sig, info, context);
  if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) return before.sa_handler(sig);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void remove_temporaries_on_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGTERM, SIGINT}) {
      struct sigaction& old = g_before[before_index(sig)];
      // An ignored signal (SIGINT of a background job) stays ignored; a handler is passed on to.
      if (::sigaction(sig, nullptr, &old) != 0 || (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)) continue;
      struct sigaction sa{};
      sa.sa_sigaction = remove_temporaries_then_pass_on;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART | SA_SIGINFO;
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

namespace {

// Before the temporary is created (a signal between open and registering would miss it); -1: not
// tracked (no table, a path too long, or every slot taken), which leaves it to the next write.
int register_temporary(const std::string& tmp) {
  if (!g_temporaries || tmp.size() >= PATH_MAX) return -1;
  remove_temporaries_on_signals();
  for (int i = 0; i < kTemporarySlots; ++i) {
    TemporarySlot& slot = g_temporaries[i];
    int free = kFree;
    if (!slot.state.compare_exchange_strong(free, kFilling)) continue;
    slot.owner = ::getpid();
    slot.owner_parent = ::getppid();
    std::memcpy(slot.path, tmp.c_str(), tmp.size() + 1);
    slot.state.store(kReady);
    return i;
  }
  return -1;
}

// After the temporary is renamed or removed. A slot the handler is emptying stays its.
void unregister_temporary(int slot) {
  if (slot < 0) return;
  int ready = kReady;
  g_temporaries[slot].state.compare_exchange_strong(ready, kFree);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text, const std::string& component,
                           const std::function<void(const std::string& written)>& verify) {
  check_output_path(path, component);  // never a FIFO or a device replaced by the rename
  // The temporary name carries the pid so two processes writing the same target do not collide;
  // those of processes killed while writing (SIGKILL runs no cleanup) are removed here.
  remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int slot = register_temporary(tmp);
  struct Unregister {
    int slot;
    ~Unregister() { unregister_temporary(slot); }
  } unregister{slot};
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

struct AtomicFileWriter::Deflate {
  z_stream s{};
};

AtomicFileWriter::AtomicFileWriter(const std::string& path, const std::string& component, bool gzip)
    : path_(path), tmp_(path + ".tmp-" + std::to_string(::getpid())), component_(component) {
  check_output_path(path_, component_);  // never a FIFO or a device replaced by the rename
  remove_stale_temporaries(path_);       // left by a process killed while writing this target
  slot_ = register_temporary(tmp_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    unregister_temporary(slot_);
    throw Error(component_, path_ + ": cannot write here (" + std::strerror(err) +
                                ") — check the directory exists and is writable");
  }
  if (gzip) {
    z_ = new Deflate;
    // windowBits 15 + 16: a gzip header and trailer, what `gunzip` and our reader take.
    if (deflateInit2(&z_->s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      delete z_;
      z_ = nullptr;
      ::close(fd_);
      ::unlink(tmp_.c_str());
      unregister_temporary(slot_);
      throw Error(component_, path_ + ": zlib could not start compressing (out of memory?)");
    }
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (z_) {
    deflateEnd(&z_->s);
    delete z_;
  }
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
  unregister_temporary(slot_);
}

void AtomicFileWriter::fail(const std::string& what) {
  const std::string why = std::strerror(errno);
  throw Error(component_, path_ + ": " + what + " (" + why + ", disk full?) — nothing was written");
}

void AtomicFileWriter::put(const char* p, size_t left) {
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing failed");
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::write(const char* data, size_t size) {
  if (!z_) return put(data, size);
  unsigned char out[1 << 16];
  z_->s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z_->s.avail_in = static_cast<uInt>(size);
  do {
    z_->s.next_out = out;
    z_->s.avail_out = sizeof out;
    deflate(&z_->s, Z_NO_FLUSH);
    put(reinterpret_cast<const char*>(out), sizeof out - z_->s.avail_out);
  } while (z_->s.avail_out == 0);
}

void AtomicFileWriter::commit() {
  if (z_) {
    unsigned char out[1 << 16];
    int rc = Z_OK;
    z_->s.next_in = nullptr;
    z_->s.avail_in = 0;
    do {
      z_->s.next_out = out;
      z_->s.avail_out = sizeof out;
      rc = deflate(&z_->s, Z_FINISH);
      put(reinterpret_cast<const char*>(out), sizeof out - z_->s.avail_out);
    } while (rc == Z_OK);
    if (rc != Z_STREAM_END) throw Error(component_, path_ + ": zlib could not finish the compressed stream");
  }
  // fsync before the rename: after a crash the target holds the old file or the new, never a mix.
  if (::fsync(fd_) != 0) fail("writing failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("writing failed");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename the finished file into place");
  committed_ = true;
  unregister_temporary(slot_);
  slot_ = -1;
}

int64_t default_inflate_cap() {
  double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    bytes = std::min(bytes, static_cast<double>(limit.rlim_cur));
  return std::max<int64_t>(int64_t{64} << 20, static_cast<int64_t>(bytes / 4));
}

std::string read_maybe_gzipped(const std::string& path, const std::string& component, int64_t cap,
                               const std::string& cap_reason) {
  // A directory, a FIFO, a device or a symbolic-link loop is refused before a byte is read.
  std::string bytes = read_regular_file(path, component, int64_t{16} << 30, "give the path of a file scalelab wrote");
  if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x1f || static_cast<unsigned char>(bytes[1]) != 0x8b)
    return bytes;
  // The trailer's last 4 bytes are the inflated size modulo 2^32. Deflate inflates at most 1032:1,
  // so for a file of up to 4 MiB that is the size itself: what the file promises, checked first.
  int64_t promised = -1;
  if (bytes.size() >= 18 && bytes.size() <= (int64_t{4} << 30) / 1032) {
    promised = 0;
    for (int i = 1; i <= 4; ++i)
      promised = (promised << 8) | static_cast<unsigned char>(bytes[bytes.size() - static_cast<size_t>(i)]);
  }
  auto too_large = [&](const std::string& what) {
    return Error(component, path + ": " + what + " more than the " + format_bytes(cap) + " a file may inflate to here (" +
                                cap_reason + ") — is it the right file?");
  };
  if (promised > cap) throw too_large("its gzip trailer says it inflates to " + format_bytes(promised) + ",");
  z_stream s{};
  if (inflateInit2(&s, 15 + 32) != Z_OK) throw Error(component, path + ": zlib could not start (out of memory?)");
  std::string out;
  char buf[1 << 16];
  size_t fed = 0;  // avail_in is 32 bits: the input goes in in pieces
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (s.avail_in == 0 && fed < bytes.size()) {
      const size_t piece = std::min<size_t>(bytes.size() - fed, size_t{1} << 30);
      s.next_in = reinterpret_cast<Bytef*>(bytes.data() + fed);
      s.avail_in = static_cast<uInt>(piece);
      fed += piece;
    }
    s.next_out = reinterpret_cast<Bytef*>(buf);
    s.avail_out = sizeof buf;
    rc = inflate(&s, Z_NO_FLUSH);
    const size_t got = sizeof buf - s.avail_out;
    if (promised >= 0 && static_cast<int64_t>(out.size() + got) > promised) {
      inflateEnd(&s);
      throw Error(component, path + ": inflates past the " + format_bytes(promised) +
                                 " its gzip trailer promises — the file is corrupt (or made to exhaust memory); write it again");
    }
    if (static_cast<int64_t>(out.size() + got) > cap) {
      inflateEnd(&s);
      throw too_large("inflates to");
    }
    out.append(buf, got);
    if (rc == Z_BUF_ERROR && s.avail_in == 0 && fed == bytes.size()) break;
    if (rc == Z_BUF_ERROR) rc = Z_OK;  // no progress this round: more input comes next
  }
  inflateEnd(&s);
  if (rc != Z_STREAM_END)
    throw Error(component, path + ": a gzip file that ends early or is corrupt — write it again");
  return out;
}

}  // namespace scalelab
