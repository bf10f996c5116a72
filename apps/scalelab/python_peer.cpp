#include "apps/scalelab/python_peer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace scalelab {

namespace {
// Debian's PyTorch lives in the system python, not in a pyenv or venv python3 that PATH may find.
constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kInstall = "apt-get install python3-torch python3-numpy";
// The peer scripts' exit code when `import torch` fails.
constexpr int kNoTorch = 3;

std::string peer_path(const std::string& script) { return std::string(SCALELAB_SOURCE_DIR) + "/scripts/peers/" + script; }
}  // namespace

void check_python_peer(const std::string& script, const std::string& flag) {
  if (::access(kPython, X_OK) != 0)
    throw Error("bench", std::string(kPython) + " not found: " + flag + " runs PyTorch with it — " + kInstall +
                             ", or drop " + flag);
  if (!std::filesystem::exists(peer_path(script)))
    throw Error("bench", peer_path(script) + ": not found (" + flag +
                             "'s PyTorch script, beside the sources) — run from a full checkout, or drop " + flag);
}

nlohmann::json run_python_peer(const std::string& script, const std::string& args, const std::string& flag) {
  check_python_peer(script, flag);
  const std::string path = peer_path(script);
  const std::string out =
      (std::filesystem::temp_directory_path() / ("scalelab-torch-peer-" + std::to_string(::getpid()) + ".json")).string();
  const std::string cmd = std::string(kPython) + " '" + path + "' " + args + " --out '" + out + "'";
  std::fprintf(stderr, "# %s: %s\n", flag.c_str(), cmd.c_str());
  std::fflush(stdout);  // our lines before the peer's, when both go to one file
  const int status = std::system(cmd.c_str());
  const int code = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == kNoTorch)
    throw Error("bench", std::string(kPython) + " cannot import torch, which " + flag + " measures — " + kInstall + ", or drop " + flag);
  std::ifstream in(out);
  if (code != 0 || !in)
    throw Error("bench", "the PyTorch peer run failed (exit " + std::to_string(code) + ") — run the command above to see why, or drop " + flag);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(out);
  if (j.is_discarded()) throw Error("bench", out + ": the PyTorch peer wrote no valid JSON — run the command above to see why");
  return j;
}

}  // namespace scalelab
