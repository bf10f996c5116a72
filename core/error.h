#pragma once
// Errors carry the component in brackets first, then the value and what to do:
//   [data] /path/train-images-idx3-ubyte.gz: not found — apt-get install dataset-fashion-mnist
// The two parts are kept apart too, so code that passes an error on (a broken process group
// naming the earlier failure) takes the message without re-parsing what().
#include <stdexcept>
#include <string>

namespace scalelab {

// A failure of the run itself (missing file, out of memory, a dead rank).
class Error : public std::runtime_error {
 public:
  Error(const std::string& component, const std::string& message)
      : std::runtime_error("[" + component + "] " + message), component_(component), message_(message) {}

  const std::string& component() const { return component_; }
  const std::string& message() const { return message_; }

 private:
  std::string component_;
  std::string message_;
};

// A bad option or an invalid configuration: the CLI exits 2 for these.
class UsageError : public Error {
 public:
  UsageError(const std::string& component, const std::string& message) : Error(component, message) {}
};

// A JSON library's message as a user reads it: nlohmann's "[json.exception.parse_error.101] "
// prefix names its own code, not the file's fault.
inline std::string json_reason(const std::exception& e) {
  const std::string what = e.what();
  const size_t end = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
  return end == std::string::npos ? what : what.substr(end + 2);
}

}  // namespace scalelab
