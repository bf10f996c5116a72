#pragma once
// Reading a file a user named (a checkpoint, a profile, a data file) only when it is one: a
// directory, a FIFO (which would block), a device such as /dev/zero (which reads without end), a
// symbolic-link loop or a file larger than the reader can use is refused with a message naming
// the path, before a byte is read.
#include <cstdint>
#include <string>

namespace scalelab {

// Throws Error(component, "<path>: <what it is> — <hint>") unless `path` (symbolic links followed)
// is a regular file of at most `max_bytes`; returns its size.
int64_t check_regular_file(const std::string& path, const std::string& component, int64_t max_bytes,
                           const std::string& hint);

// The whole file, checked as above on the descriptor it is read from (so a file swapped for a FIFO
// after the check is refused too).
std::string read_regular_file(const std::string& path, const std::string& component, int64_t max_bytes,
                              const std::string& hint);

// A file about to be written: throws Error(component, …) when `path` is a directory or its
// directory does not exist (what would fail only at the end of a long run).
void check_output_path(const std::string& path, const std::string& component);

// Removes PATH.tmp-PID files (what an atomic write of PATH leaves when its process is killed) whose
// process is no longer alive. Files of living processes — this one included — are left alone.
// Never throws; returns how many it removed.
int remove_stale_temporaries(const std::string& path);

}  // namespace scalelab
