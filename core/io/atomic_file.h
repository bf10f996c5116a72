#pragma once
// Writing what a user keeps (a trace, a summary, a checkpoint) so it is never left half-written:
// into a temporary file beside the target, flushed, then renamed over it.
#include <functional>
#include <string>

namespace scalelab {

// Throws Error(component, ...) naming the path; on failure nothing is left behind. `verify`, when
// given, reads the finished temporary file back (its path is the argument) before it is renamed
// into place; if it throws, the temporary is removed and the old file stays.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& component,
                           const std::function<void(const std::string& written)>& verify = {});

}  // namespace scalelab
