#pragma once
// Errors carry the component in brackets first, then the value and what to do:
//   [data] /path/train-images-idx3-ubyte.gz: not found — apt-get install dataset-fashion-mnist
#include <stdexcept>
#include <string>

namespace scalelab {

// A failure of the run itself (missing file, out of memory, a dead rank).
class Error : public std::runtime_error {
 public:
  Error(const std::string& component, const std::string& message)
      : std::runtime_error("[" + component + "] " + message) {}
};

// A bad option or an invalid configuration: the CLI exits 2 for these.
class UsageError : public Error {
 public:
  UsageError(const std::string& component, const std::string& message) : Error(component, message) {}
};

}  // namespace scalelab
