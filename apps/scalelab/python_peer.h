#pragma once
// The PyTorch peers of `bench compute --vs torch` and `bench comm --vs gloo`: a script of
// scripts/peers/ run with Debian's PyTorch (/usr/bin/python3), its figures read back as JSON.
#include <nlohmann/json.hpp>
#include <string>

namespace scalelab {

// Refuses, naming what to install, when /usr/bin/python3 or the script is missing: called before
// a benchmark measures anything, so the user does not wait for a run that cannot finish.
void check_python_peer(const std::string& script, const std::string& flag);

// Runs scripts/peers/SCRIPT ARGS --out TMP with /usr/bin/python3 and returns the JSON it wrote.
// `flag` names the option that asked for it (--vs torch), so the error says what to drop.
nlohmann::json run_python_peer(const std::string& script, const std::string& args, const std::string& flag);

}  // namespace scalelab
