#include "apps/scalelab/python_peer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "core/error.h"

namespace scalelab {

namespace {
// Debian's PyTorch lives in the system python, not in a pyenv or venv python3 that PATH may find;
// a GPU machine's CUDA build of torch usually lives in a venv whose python3 is on PATH.
constexpr const char* kSystemPython = "/usr/bin/python3";
constexpr const char* kPythonEnv = "SCALELAB_PYTHON";
constexpr const char* kInstall = "apt-get install python3-torch python3-numpy";
// The peer scripts' exit code when `import torch` fails.
constexpr int kNoTorch = 3;

std::string peer_path(const std::string& script) { return std::string(SCALELAB_SOURCE_DIR) + "/scripts/peers/" + script; }

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The file `name` names: itself when it has a slash, else the first executable of that name on PATH.
std::string resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string file = dir + "/" + name;
    if (::access(file.c_str(), X_OK) == 0 && !std::filesystem::is_directory(file)) return file;
    start = end + 1;
  }
  return "";
}

int exit_code(int status) { return status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Asks `python` whether it imports torch (and, with need_cuda, whether its torch sees a GPU).
// Returns "" when it can run the peer, else why not, in a line.
std::string probe(const std::string& python, bool need_cuda) {
  std::string code =
      "import sys\n"
      "try:\n"
      "    import torch\n"
      "except BaseException as e:\n"
      "    print(\"cannot import torch (%s)\" % e); sys.exit(3)\n";
  if (need_cuda)
    code +=
        "if not torch.cuda.is_available():\n"
        "    print(\"imports torch %s, which sees no GPU (torch.version.cuda = %s)\" % (torch.__version__, "
        "torch.version.cuda)); sys.exit(4)\n";
  code += "print(\"torch\", torch.__version__)\n";
  const std::string cmd = shell_quote(python) + " -c " + shell_quote(code) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "could not be started";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int code_ = exit_code(::pclose(p));
  if (code_ == 0) return "";
  // The last non-empty line says why (a traceback's last line is the exception).
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const size_t nl = out.rfind('\n');
  std::string last = nl == std::string::npos ? out : out.substr(nl + 1);
  if (last.size() > 240) last = last.substr(0, 240) + "…";
  if (last.empty()) last = "exit " + std::to_string(code_);
  return last;
}

// The interpreter chosen per need_cuda, once per process (a probe imports torch: seconds).
std::map<bool, std::string>& chosen() {
  static std::map<bool, std::string> m;
  return m;
}

std::string pick_python(const std::string& flag, bool need_cuda) {
  auto& cache = chosen();
  if (auto it = cache.find(need_cuda); it != cache.end()) return it->second;
  const std::string what = need_cuda ? "a CUDA build of torch that sees a GPU" : "torch";
  const char* env = std::getenv(kPythonEnv);
  if (env && *env) {  // the user's choice: that one only, no fallback that would hide a mistake
    const std::string python = resolve(env);
    if (python.empty())
      throw Error("bench", std::string(kPythonEnv) + "=" + env + ": not an executable file (" + flag +
                               " runs PyTorch with it) — point it at a python3 with " + what +
                               " (e.g. /opt/torch/.venv/bin/python3), unset it, or drop " + flag);
    const std::string why = probe(python, need_cuda);
    if (!why.empty())
      throw Error("bench", std::string(kPythonEnv) + "=" + python + " " + why + ", which " + flag + " needs — point " +
                               kPythonEnv + " at a python3 with " + what + ", unset it to try " + kSystemPython +
                               " and PATH's python3, or drop " + flag);
    std::fprintf(stderr, "# %s: python %s (from $%s)\n", flag.c_str(), python.c_str(), kPythonEnv);
    return cache[need_cuda] = python;
  }
  std::vector<std::string> candidates;
  if (::access(kSystemPython, X_OK) == 0) candidates.push_back(kSystemPython);
  const std::string on_path = resolve("python3");
  if (!on_path.empty() && on_path != kSystemPython) candidates.push_back(on_path);
  std::string tried;
  for (const auto& python : candidates) {
    const std::string why = probe(python, need_cuda);
    if (why.empty()) {
      std::fprintf(stderr, "# %s: python %s\n", flag.c_str(), python.c_str());
      return cache[need_cuda] = python;
    }
    tried += (tried.empty() ? "" : "; ") + python + " " + why;
  }
  if (candidates.empty()) tried = std::string("neither ") + kSystemPython + " nor a python3 on PATH exists";
  throw Error("bench", "no python to run " + flag + "'s PyTorch peer with (it needs " + what + "): " + tried +
                           " — set " + kPythonEnv + "=/path/to/python3 of an environment with " + what +
                           (need_cuda ? " (e.g. " + std::string(kPythonEnv) + "=/opt/torch/.venv/bin/python3)"
                                      : ", or " + std::string(kInstall)) +
                           ", or drop " + flag);
}
}  // namespace

std::string check_python_peer(const std::string& script, const std::string& flag, bool need_cuda) {
  if (!std::filesystem::exists(peer_path(script)))
    throw Error("bench", peer_path(script) + ": not found (" + flag +
                             "'s PyTorch script, beside the sources) — run from a full checkout, or drop " + flag);
  return pick_python(flag, need_cuda);
}

nlohmann::json run_python_peer(const std::string& script, const std::string& args, const std::string& flag,
                               bool need_cuda) {
  const std::string python = check_python_peer(script, flag, need_cuda);
  const std::string path = peer_path(script);
  const std::string out =
      (std::filesystem::temp_directory_path() / ("scalelab-torch-peer-" + std::to_string(::getpid()) + ".json")).string();
  const std::string cmd = shell_quote(python) + " " + shell_quote(path) + " " + args + " --out " + shell_quote(out);
  std::fprintf(stderr, "# %s: %s\n", flag.c_str(), cmd.c_str());
  std::fflush(stdout);  // our lines before the peer's, when both go to one file
  const int code = exit_code(std::system(cmd.c_str()));
  if (code == kNoTorch)
    throw Error("bench", python + " cannot import torch, which " + flag + " measures — set " + kPythonEnv +
                             " to a python3 with torch, or " + kInstall + ", or drop " + flag);
  std::ifstream in(out);
  if (code != 0 || !in) {
    std::error_code ignored;
    std::filesystem::remove(out, ignored);
    throw Error("bench", "the PyTorch peer run failed (exit " + std::to_string(code) +
                             ") — its error is above; run the command above by hand to see why, or drop " + flag);
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(out);
  if (j.is_discarded()) throw Error("bench", out + ": the PyTorch peer wrote no valid JSON — run the command above to see why");
  return j;
}

}  // namespace scalelab
