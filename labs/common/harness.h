#pragma once
// What every lab's harness.cpp shares: main() runs ONE check, named on the command line, and exits
// 0 (passed) or 1 (failed), printing what was expected and what came. The grader runs each check
// in its own child process with time and memory limits, so a harness never needs to guard itself
// against a hung or crashing submission: it only has to say clearly what was wrong.
//
//   int main(int argc, char** argv) {
//     return lab::run_check(argc, argv, {{"exact_sums", exact_sums}, {"steps", steps}});
//   }
//   harness exact_sums --ranks 2-8 --counts 1,7,1001
//
// A check throws lab::Failure (through lab::fail / lab::expect) to fail with a message; any other
// exception — a TODO left in the stub, a timeout of the process group, std::bad_alloc — fails the
// check with that exception's text.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/limits.h"

namespace lab {

// A check that failed: `what` was wrong, `expected` vs `got`.
class Failure : public std::runtime_error {
 public:
  Failure(const std::string& what, const std::string& expected, const std::string& got)
      : std::runtime_error(what + "\n  expected: " + expected + "\n  got:      " + got) {}
};

[[noreturn]] inline void fail(const std::string& what, const std::string& expected, const std::string& got) {
  throw Failure(what, expected, got);
}

inline void expect(bool ok, const std::string& what, const std::string& expected, const std::string& got) {
  if (!ok) fail(what, expected, got);
}

// Thrown by a stub's functions: the student has not written this part yet.
class Todo : public std::logic_error {
 public:
  explicit Todo(const std::string& function, const std::string& file)
      : std::logic_error("TODO: " + function + " is not written yet — fill it in, in " + file) {}
};

template <typename T>
std::string str(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// "2…8" for a run of consecutive values, "3, 5, 7" otherwise: how a check's message lists the
// sizes it tried.
inline std::string list_text(const std::vector<long long>& v) {
  bool run = v.size() > 2;
  for (size_t i = 1; i < v.size(); ++i) run = run && v[i] == v[i - 1] + 1;
  if (run) return str(v.front()) + "…" + str(v.back());
  std::string s;
  for (long long x : v) s += (s.empty() ? "" : ", ") + str(x);
  return s;
}

// The options after the check's name: `--key value` pairs, each with a default.
class Args {
 public:
  Args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string key = argv[i];
      if (key.rfind("--", 0) != 0 || i + 1 >= argc)
        throw std::invalid_argument("harness: expected `--key value` pairs after the check's name, got '" + key + "'");
      values_[key.substr(2)] = argv[++i];
    }
  }
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  // "2-8" or "3,5,7" or "1,4-6": the integers listed.
  std::vector<long long> ints(const std::string& key, const std::string& fallback) const {
    std::vector<long long> out;
    std::stringstream all(get(key, fallback));
    std::string part;
    while (std::getline(all, part, ',')) {
      const size_t dash = part.find('-', 1);
      if (dash == std::string::npos) {
        out.push_back(std::stoll(part));
      } else {
        for (long long v = std::stoll(part.substr(0, dash)); v <= std::stoll(part.substr(dash + 1)); ++v) out.push_back(v);
      }
    }
    return out;
  }

 private:
  std::map<std::string, std::string> values_;
};

// The number the student wrote for `key` in answers.json, the lab's answers file (a student file:
// the grader puts it in the check's working folder). A missing file, a missing key, null (the
// stub's "not answered yet") or a non-number fails the check saying which, with "TODO" when the
// question is simply not answered yet.
inline double answer_number(const std::string& key, const std::string& file = "answers.json") {
  std::ifstream in(file);
  if (!in) fail("answers: cannot read " + file, "the answers file handed in with the lab", "no such file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("answers: " + file + " is not valid JSON", "{\"" + key + "\": <number>, ...}", e.what());
  }
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
    throw std::runtime_error("TODO: answer '" + key + "' in " + file + " (it is not answered yet)");
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail("answers: '" + key + "' in " + file + " is not a number", "a number", v.dump());
  return v.get<double>();
}

using Check = std::function<void(const Args&)>;

// Runs fn(rank) on one thread per rank and joins them; the first exception any rank threw (by
// rank order) is rethrown, prefixed with the rank, once every rank has ended. A rank stuck forever
// keeps this from returning: the grader's wall-clock limit ends the check then.
template <typename Fn>
void run_ranks(int n, Fn fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads = scalelab::start_threads(n, [&](int r) {
    try {
      fn(r);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  });
  for (auto& t : threads) t.join();
  // The rank that failed on its own comes before the ranks that then gave up waiting for it: a
  // failed check, then any other error, then the group's complaints (a size mismatch before a
  // timeout).
  std::string best;
  int best_rank = 3;
  for (int r = 0; r < n; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    std::string text;
    int rank = 0;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const Failure&) {
      throw;
    } catch (const std::bad_alloc&) {
      text = "out of memory (std::bad_alloc): more memory than the check allows was asked for";
    } catch (const std::exception& e) {
      text = e.what();
      if (text.find("[comm]") != std::string::npos) rank = text.find("never arrived") != std::string::npos ? 2 : 1;
    }
    if (rank < best_rank) {
      best_rank = rank;
      best = "rank " + std::to_string(r) + ": " + text;
    }
  }
  if (!best.empty()) throw std::runtime_error(best);
}

// main() of a harness: runs the check named by argv[1].
inline int run_check(int argc, char** argv, const std::map<std::string, Check>& checks) {
  std::string names;
  for (const auto& [name, fn] : checks) names += (names.empty() ? "" : ", ") + name;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CHECK [--key value]...  (checks: %s)\n", argv[0], names.c_str());
    return 2;
  }
  auto it = checks.find(argv[1]);
  if (it == checks.end()) {
    std::fprintf(stderr, "harness: no check named '%s' — the checks are: %s\n", argv[1], names.c_str());
    return 2;
  }
  try {
    it->second(Args(argc, argv, 2));
  } catch (const Failure& f) {
    std::printf("FAILED: %s\n", f.what());
    std::fflush(stdout);
    return 1;
  } catch (const std::bad_alloc&) {
    std::printf("FAILED: out of memory (std::bad_alloc): the submission asked for more memory than the check allows\n");
    std::fflush(stdout);
    return 1;
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace lab
