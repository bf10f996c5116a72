#pragma once
// The PyTorch peers of `bench compute --vs torch` and `bench comm --vs gloo`: a script of
// scripts/peers/ run with a python that imports torch, its figures read back as JSON.
//
// Which python: $SCALELAB_PYTHON when set (that one only); otherwise the first of /usr/bin/python3
// (Debian's python3-torch) and the python3 found on PATH (a venv's, e.g. /opt/torch/.venv/bin/python3
// on a GPU machine) that imports torch — and, when the peer runs on cuda, whose torch sees a GPU.
#include <nlohmann/json.hpp>
#include <string>

namespace scalelab {

// Refuses, naming what to install or set, when no python can run the peer or the script is
// missing: called before a benchmark measures anything, so the user does not wait for a run that
// cannot finish. `need_cuda`: the peer runs on the GPU, so its torch must be a CUDA build that sees
// one. Picks the interpreter (once per process) and returns it.
std::string check_python_peer(const std::string& script, const std::string& flag, bool need_cuda = false);

// Runs scripts/peers/SCRIPT ARGS --out TMP with the python check_python_peer picks and returns the
// JSON it wrote. `flag` names the option that asked for it (--vs torch), so the error says what to drop.
nlohmann::json run_python_peer(const std::string& script, const std::string& args, const std::string& flag,
                               bool need_cuda = false);

}  // namespace scalelab
