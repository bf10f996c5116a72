#pragma once
// Writing what a user keeps (a trace, a summary, a checkpoint) so it is never left half-written:
// into a temporary file beside the target (PATH.tmp-PID), flushed, then renamed over it. SIGTERM or
// SIGINT removes the temporaries being written (the process's and its children's), then ends the
// process as it would have. A process killed (SIGKILL) before the rename leaves its temporary
// behind; the next write of PATH removes those whose process is gone (remove_stale_temporaries in
// core/io/file_check.h).
#include <cstddef>
#include <functional>
#include <string>

namespace scalelab {

// Throws Error(component, ...) naming the path; on failure nothing is left behind. `verify`, when
// given, reads the finished temporary file back (its path is the argument) before it is renamed
// into place; if it throws, the temporary is removed and the old file stays.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& component,
                           const std::function<void(const std::string& written)>& verify = {});

// The same for a file too large to hold in memory (a trace of millions of events): write() in
// pieces, then commit() to fsync and rename it into place. Compressed with gzip as it is written
// when `gzip` is set. Destroyed without commit() — an exception on the way — it removes the
// temporary file and leaves the old target as it was.
class AtomicFileWriter {
 public:
  AtomicFileWriter(const std::string& path, const std::string& component, bool gzip = false);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const char* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();

 private:
  void put(const char* data, size_t size);  // raw bytes to the temporary file
  void fail(const std::string& what);
  std::string path_, tmp_, component_;
  int fd_ = -1;
  int slot_ = -1;  // the temporary's entry in what SIGTERM/SIGINT remove
  bool committed_ = false;
  struct Deflate;
  Deflate* z_ = nullptr;  // null: no compression
};

// Installs what removes the temporaries being written on SIGTERM and SIGINT (unless the signal is
// ignored), then passes the signal on to what handled it before. The first atomic write does it
// too; a program whose child processes write (a run's ranks) calls it before it forks, so that
// the run's signal removes theirs.
void remove_temporaries_on_signals();

// The most a gzip file may inflate to unless its reader knows better: a quarter of the machine's
// memory, or of the address-space limit (ulimit -v) where that is lower — the reader holds the
// inflated bytes and what it parses from them. At least 64 MiB.
int64_t default_inflate_cap();

// A file's bytes, gunzipped when they start with gzip's magic (what AtomicFileWriter wrote with
// gzip). Throws Error(component, ...) naming the path when it cannot be read or inflated, or would
// inflate to more than `cap` bytes (`cap_reason` says where the cap comes from) or to more than its
// gzip trailer promises: a small file cannot make the reader hold gigabytes (a gzip bomb).
std::string read_maybe_gzipped(const std::string& path, const std::string& component,
                               int64_t cap = default_inflate_cap(),
                               const std::string& cap_reason = "a quarter of this machine's memory");

}  // namespace scalelab
