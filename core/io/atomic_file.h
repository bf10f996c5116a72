#pragma once
// Writing what a user keeps (a trace, a summary, a checkpoint) so it is never left half-written:
// into a temporary file beside the target, flushed, then renamed over it.
#include <string>

namespace scalelab {

// Throws Error(component, ...) naming the path; on failure nothing is left behind.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& component);

}  // namespace scalelab
