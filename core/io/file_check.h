#pragma once
// Reading a file a user named (a checkpoint, a profile, a data file) only when it is one: a
// directory, a FIFO (which would block), a device such as /dev/zero (which reads without end), a
// symbolic-link loop or a file larger than the reader can use is refused with a message naming
// the path, before a byte is read.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// A file a command reads or writes, under the option that named it ("" for a path not given).
struct PathUse {
  std::string option;  // as the user typed it: "--trace", or a positional's name
  std::string path;
  bool written;
};

// Throws UsageError(component, …) naming both options and the path when two outputs, or an output
// and an input, are one file: the same (device, inode) where the file exists, else the same real
// directory and name (so x, ./x and a symbolic link to x match). Two inputs may share a file, and
// so may the pairs in `allowed` ({input option, output option}, e.g. --resume and --checkpoint).
void check_distinct_paths(const std::vector<PathUse>& uses, const std::string& component,
                          const std::vector<std::pair<std::string, std::string>>& allowed = {});

// Throws UsageError("cli", "<option> is empty — …") when a path option was given as ''.
void check_path_not_empty(const std::string& option, const std::string& value);

// Removes PATH.tmp-PID files (what an atomic write of PATH leaves when its process is killed) whose
// process is no longer alive. Files of living processes — this one included — are left alone.
// Never throws; returns how many it removed.
int remove_stale_temporaries(const std::string& path);

}  // namespace scalelab
