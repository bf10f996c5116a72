// A seeded mutation fuzzer over the files scalelab reads: checkpoints, hardware profiles, IDX image
// and label files. Each case mutates a real file (bit flips, truncation, extreme numbers, type
// swaps in JSON), and a forked child reads it with the reader scalelab uses, under a memory limit
// and an alarm. Every case must end in success or a clear error (a scalelab::Error with its
// component); an error of another type, a signal or a hang is a failure, its input kept.
//   fuzz_inputs KIND SEED_FILE... [--cases N] [--seed S] [--budget-s T] [--keep DIR] [--corpus DIR]
// --corpus DIR replays every file of DIR first, as it is (tests/fuzz/corpus/KIND: every input that
// ever failed); each must end in success or a clear error too. An accepted profile must also price
// every kind of op at a finite duration ≥ 0.
//   KIND: checkpoint | profile | idx-images | idx-labels | trace
//   fuzz_inputs load CHECKPOINT: exit 0 when it loads (the kill-during-save loop's check)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/data/dataset.h"
#include "core/device/sim/cost_model.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/metrics.h"

using namespace scalelab;
using nlohmann::json;

namespace {

enum Outcome { kAccepted = 0, kClearError = 3, kUnclearError = 4 };

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string gzip(const std::string& bytes) {
  uLongf n = compressBound(bytes.size()) + 32;
  std::string out(n, '\0');
  z_stream s{};
  deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  s.avail_in = static_cast<uInt>(bytes.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// Numbers that break readers: zero, −1, the edges of each width, NaN and infinities as floats.
const uint64_t kExtremes[] = {0,          1,          0xffffffffffffffffULL, 0x7fffffffULL, 0x80000000ULL,
                              0xffffffffULL, 0x7fffffffffffffffULL, 0x8000000000000000ULL, 0x7fc00000ULL /* f32 NaN */,
                              0x7f800000ULL /* f32 inf */, 0xff800000ULL, 0x7ff8000000000000ULL /* f64 NaN */,
                              0x10000000ULL, 1ULL << 40};

// Byte-level mutations; `header` bytes (offsets below it) are hit more often, where counts live.
std::string mutate_bytes(std::string s, Rng& rng, size_t header) {
  const int rounds = 1 + static_cast<int>(rng.below(3));
  for (int k = 0; k < rounds && !s.empty(); ++k) {
    const bool in_header = header > 0 && rng.below(2) == 0;
    const size_t limit = in_header ? std::min(header, s.size()) : s.size();
    const size_t at = rng.below(limit);
    switch (rng.below(7)) {
      case 0:  // bit flips
        for (int b = 0, n = 1 + static_cast<int>(rng.below(8)); b < n; ++b)
          s[rng.below(limit)] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:  // truncation
        s.resize(rng.below(s.size() + 1));
        break;
      case 2: {  // an extreme number over 4 or 8 bytes, either byte order
        const uint64_t v = kExtremes[rng.below(sizeof kExtremes / sizeof kExtremes[0])];
        const size_t width = rng.below(2) ? 4 : 8;
        for (size_t i = 0; i < width && at + i < s.size(); ++i)
          s[at + i] = static_cast<char>(rng.below(2) ? (v >> (8 * i)) : (v >> (8 * (width - 1 - i))));
        break;
      }
      case 3:  // a byte set to an edge value
        s[at] = static_cast<char>("\x00\xff\x7f\x80"[rng.below(4)]);
        break;
      case 4:  // junk appended
        for (int i = 0, n = static_cast<int>(rng.below(64)); i < n; ++i) s.push_back(static_cast<char>(rng.below(256)));
        break;
      case 5: {  // a chunk removed
        const size_t len = std::min<size_t>(rng.below(32) + 1, s.size() - at);
        s.erase(at, len);
        break;
      }
      default: {  // a chunk repeated
        const size_t len = std::min<size_t>(rng.below(32) + 1, s.size() - at);
        s.insert(at, s.substr(at, len));
      }
    }
  }
  return s;
}

// A checkpoint's checksums recomputed after a mutation, so the reader's parsing past them is
// reached (the stored file size too, half the time).
std::string fix_checkpoint(std::string s, Rng& rng) {
  if (s.size() < 28) return s;
  if (rng.below(2)) {
    const uint64_t size = s.size();
    std::memcpy(s.data() + 12, &size, 8);
  }
  auto crc = [&](size_t n) { return static_cast<uint32_t>(crc32_z(crc32_z(0, Z_NULL, 0), reinterpret_cast<const Bytef*>(s.data()), n)); };
  const uint32_t prefix = crc(20);
  std::memcpy(s.data() + 20, &prefix, 4);
  const uint32_t all = crc(s.size() - 4);
  std::memcpy(s.data() + s.size() - 4, &all, 4);
  return s;
}

json extreme_json(Rng& rng) {
  switch (rng.below(14)) {
    case 0: return 1.5;
    case 1: return -1;
    case 2: return 0;
    case 3: return 1e308;
    case 4: return -1e308;
    case 5: return 1e-320;
    case 6: return 99999999999LL;
    case 7: return std::numeric_limits<int64_t>::max();
    case 8: return "text";
    case 9: return nullptr;
    case 10: return json::array({1, 2});
    case 11: return json::object({{"x", 1}});
    case 12: return true;
    default: return 2147483648.0;
  }
}

// Structural JSON mutations: a value swapped for one of another type or an extreme number, a key
// removed, an object emptied.
void mutate_json(json& j, Rng& rng) {
  std::vector<json*> nodes;
  std::vector<std::pair<json*, std::string>> keys;
  std::vector<json*> stack{&j};
  while (!stack.empty()) {
    json* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    if (n->is_object())
      for (auto it = n->begin(); it != n->end(); ++it) {
        keys.emplace_back(n, it.key());
        stack.push_back(&it.value());
      }
  }
  const uint64_t what = rng.below(4);
  if (what == 0 && !keys.empty()) {
    auto& [parent, key] = keys[rng.below(keys.size())];
    parent->erase(key);
  } else if (what == 1) {
    *nodes[rng.below(nodes.size())] = json::object();
  } else {
    *nodes[rng.below(nodes.size())] = extreme_json(rng);
  }
}

// A figure made tiny or huge, yet positive and finite: what a missing exponent or a unit in the
// wrong place gives (a bandwidth of 1e-300 B/s, a peak of 5e-324 FLOP/s).
void mutate_figure(json& j, Rng& rng) {
  std::vector<json*> numbers;
  std::vector<json*> stack{&j};
  while (!stack.empty()) {
    json* n = stack.back();
    stack.pop_back();
    if (n->is_number()) numbers.push_back(n);
    if (n->is_structured())
      for (auto& child : *n) stack.push_back(&child);
  }
  if (numbers.empty()) return;
  static const double kFigures[] = {5e-324, 1e-300, 1e-30, 1e-12, 1e-7, 1e7, 1e12, 1e30, 1e300, 1.7e308};
  json& n = *numbers[rng.below(numbers.size())];
  n = rng.below(2) ? kFigures[rng.below(sizeof kFigures / sizeof kFigures[0])] : n.get<double>() * (rng.below(2) ? 1e-9 : 1e9);
}

std::string mutate(const std::string& kind, const std::string& seed, Rng& rng) {
  if (kind == "profile" && rng.below(3) != 0) {
    json j = json::parse(seed);
    for (int k = 0, n = 1 + static_cast<int>(rng.below(2)); k < n; ++k) rng.below(2) ? mutate_json(j, rng) : mutate_figure(j, rng);
    return j.dump();
  }
  if (kind == "trace") {
    // Values swapped for extreme ones (negative devices and durations, huge times, wrong types)
    // most of the time, the bytes otherwise; gzipped half the time, as a .gz trace is.
    std::string s;
    if (rng.below(3) != 0) {
      json j = json::parse(seed);
      for (int k = 0, n = 1 + static_cast<int>(rng.below(3)); k < n; ++k) mutate_json(j, rng);
      s = j.dump();
    } else {
      s = mutate_bytes(seed, rng, 0);
    }
    return rng.below(2) ? gzip(s) : s;
  }
  if (kind == "checkpoint") {
    if (rng.below(4) == 0 && seed.size() >= 44) {
      // The training state's last numbers, which only a CRC-valid file reaches: the loss scale
      // (f64 at size − 20) or the scaler's good steps (i64 at size − 12), set to an extreme.
      std::string s = seed;
      const double scales[] = {NAN, INFINITY, -INFINITY, 0.0, -1.0, 1e39, 1e-40, 5e-324};
      if (rng.below(2) == 0) {
        const double v = scales[rng.below(sizeof scales / sizeof scales[0])];
        std::memcpy(s.data() + s.size() - 20, &v, 8);
      } else {
        const uint64_t v = kExtremes[rng.below(sizeof kExtremes / sizeof kExtremes[0])];
        std::memcpy(s.data() + s.size() - 12, &v, 8);
      }
      return fix_checkpoint(s, rng);
    }
    std::string s = mutate_bytes(seed, rng, 64);
    return rng.below(4) != 0 ? fix_checkpoint(s, rng) : s;
  }
  if (kind == "idx-images" || kind == "idx-labels") {
    // Mutate the plain bytes, and gzip them afterwards half the time (what a .gz holds).
    std::string s = mutate_bytes(seed, rng, 16);
    return rng.below(2) ? gzip(s) : s;
  }
  return mutate_bytes(seed, rng, 0);
}

// In the child: read the file as scalelab does.
void read_as(const std::string& kind, const std::string& path) {
  if (kind == "checkpoint") {
    // Loaded: then nothing in it may make a resumed run skip every step or count backwards.
    const Checkpoint ck = load_checkpoint(path);
    const double scale = ck.state.loss_scale;
    const bool scale_ok = ck.header.amp == "fp16" ? scale >= 1.17549435e-38 && scale <= 3.40282347e38 : scale == 0;
    if (!scale_ok || ck.state.scaler_good_steps < 0 || ck.state.scaler_good_steps >= 2000 || ck.header.step < 0 ||
        ck.state.optimizer_steps < 0)
      throw std::logic_error("accepted a number no run writes (loss scale " + std::to_string(scale) + ", good steps " +
                             std::to_string(ck.state.scaler_good_steps) + ", step " + std::to_string(ck.header.step) + ")");
  } else if (kind == "profile") {
    // Accepted, it must price sanely: no NaN, infinite or negative duration (silent nonsense).
    const CostModel model(load_profile(path));
    auto check = [](double seconds, const char* what) {
      if (!(std::isfinite(seconds) && seconds >= 0))
        throw std::runtime_error(std::string("accepted, but prices ") + what + " at " + std::to_string(seconds) + " s");
    };
    for (double bytes : {4.0, 1e9}) {
      check(model.seconds({OpClass::gemm, 2e9, bytes, DType::f32, 1000, 1000, 1000}), "a GEMM");
      check(model.seconds({OpClass::gemm, 2e9, bytes, DType::f16}), "an f16 GEMM");
      check(model.seconds({OpClass::elementwise, 0, bytes}), "an element-wise op");
      check(model.seconds({OpClass::copy_host, 0, bytes}), "a host copy");
      check(model.seconds({OpClass::copy_peer, 0, bytes}), "a peer copy");
      const int n = std::min(model.profile().device_count(), 2 * model.profile().devices_per_node);
      for (Collective op : {Collective::all_reduce, Collective::all_gather, Collective::broadcast, Collective::scatter,
                            Collective::barrier, Collective::send})
        check(model.collective_seconds(op, bytes, std::max(n, 2)), collective_name(op));
    }
  } else if (kind == "idx-images") {
    int64_t n = 0, r = 0, c = 0;
    read_idx_images(path, &n, &r, &c);
  } else if (kind == "idx-labels") {
    int64_t n = 0;
    read_idx_labels(path, &n);
  } else if (kind == "trace") {
    // As the dashboard takes a replay: the trace, then the metrics over every device it names.
    const TraceContents t = read_chrome_trace(path);
    int devices = static_cast<int>(t.info.devices.size());
    for (const Event& e : t.events) devices = std::max(devices, e.device + 1);
    for (const MemorySample& m : t.memory) devices = std::max(devices, m.device + 1);
    compute_metrics(t.events, t.memory, devices);
  }
}

int run_child(const std::string& kind, const std::string& path) {
  // 2 GiB of address space: a reader that believes a damaged count allocates past it and gets
  // std::bad_alloc (an unclear error), instead of taking the machine's memory. (AddressSanitizer
  // reserves terabytes of shadow address space; under it the same cap is its allocation limit.)
#if !defined(__SANITIZE_ADDRESS__)
  const rlimit as{rlim_t{2} << 30, rlim_t{2} << 30};
  ::setrlimit(RLIMIT_AS, &as);
#endif
  ::alarm(10);  // a hang dies of SIGALRM
  try {
    read_as(kind, path);
    return kAccepted;
  } catch (const Error& e) {
    if (e.component().empty() || e.message().empty()) {
      std::fprintf(stderr, "error without a component: %s\n", e.what());
      return kUnclearError;
    }
    return kClearError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a scalelab error: %s\n", e.what());
    return kUnclearError;
  }
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// An allocation past 2 GiB fails as new fails (std::bad_alloc) instead of aborting the case.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=2048:allocator_may_return_null=1"; }
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_inputs KIND SEED_FILE... [--cases N] [--seed S] [--budget-s T] [--keep DIR]\n");
    return 2;
  }
  const std::string kind = argv[1];
  if (kind == "load") {  // fuzz_inputs load CHECKPOINT: does it load? (the kill-during-save loop)
    try {
      std::printf("step %lld\n", static_cast<long long>(load_checkpoint(argv[2]).header.step));
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  std::vector<std::string> seeds;
  int64_t cases = 1000;
  uint64_t seed = 1;
  double budget_s = 30;
  std::string keep = ".";
  std::string corpus;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cases" && i + 1 < argc) cases = std::atoll(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--budget-s" && i + 1 < argc) budget_s = std::atof(argv[++i]);
    else if (a == "--keep" && i + 1 < argc) keep = argv[++i];
    else if (a == "--corpus" && i + 1 < argc) corpus = argv[++i];
    else seeds.push_back(read_all(a));
  }
  if (kind != "checkpoint" && kind != "profile" && kind != "idx-images" && kind != "idx-labels" && kind != "trace") {
    std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
    return 2;
  }
  char dir_template[] = "/tmp/scalelab-fuzz.XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string path = dir + "/case" + (kind == "profile" ? ".json" : "");
  int64_t tried = 0, clear = 0, accepted = 0, unclear = 0, crashes = 0, hangs = 0;
  // One input read in a forked child: "" when it ended in success or a clear error, else what went wrong.
  auto run_case = [&](const std::string& input) -> std::string {
    write_all(path, input);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child's stderr carries only the reason of an unclear error.
      ::_exit(run_child(kind, path));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ++tried;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kAccepted) {
      ++accepted;
      return "";
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kClearError) {
      ++clear;
      return "";
    }
    if (WIFEXITED(status)) {
      ++unclear;
      return "unclear";
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++hangs;
      return "hang";
    }
    ++crashes;
    return "crash (signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0) + ")";
  };
  if (!corpus.empty()) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(corpus, ec))
      if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path().string());
    if (ec) {
      std::fprintf(stderr, "no corpus %s: %s\n", corpus.c_str(), ec.message().c_str());
      return 2;
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      const std::string bad = run_case(read_all(f));
      if (!bad.empty()) std::fprintf(stderr, "FAIL: %s corpus file %s: %s\n", kind.c_str(), f.c_str(), bad.c_str());
    }
    std::printf("%-11s corpus files replayed %lld\n", kind.c_str(), static_cast<long long>(files.size()));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < cases && !seeds.empty(); ++i) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget_s) break;
    Rng rng(seed * 1000003 + static_cast<uint64_t>(i));
    const std::string input = mutate(kind, seeds[rng.below(seeds.size())], rng);
    const std::string bad = run_case(input);
    if (!bad.empty()) {
      const std::string kept = keep + "/fuzz-" + kind + "-" + std::to_string(seed) + "-" + std::to_string(i);
      write_all(kept, input);
      std::fprintf(stderr, "FAIL: %s case %lld: %s — input kept in %s\n", kind.c_str(), static_cast<long long>(i),
                   bad.c_str(), kept.c_str());
    }
  }
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
  std::printf("%-11s cases tried %6lld / clear errors %6lld / accepted %5lld / unclear errors %lld / crashes %lld / hangs %lld\n",
              kind.c_str(), static_cast<long long>(tried), static_cast<long long>(clear), static_cast<long long>(accepted),
              static_cast<long long>(unclear), static_cast<long long>(crashes), static_cast<long long>(hangs));
  return unclear + crashes + hangs == 0 && tried > 0 ? 0 : 1;
}
