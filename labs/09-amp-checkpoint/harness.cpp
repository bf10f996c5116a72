// Lab 09's checks (the instructor's test program). The grader builds it with the student's
// amp_checkpoint.cpp and runs one check per process: `harness CHECK [--key value]...`, exit 0
// passed, 1 failed. Data parallel with plain SGD: each rank on its DistributedSampler rows, the
// gradients all-reduced (avg), then the student's unscale_and_update decides whether to step. An
// overflow is made on ONE rank only, after the all-reduce (as a pipeline stage or a ZeRO shard sees
// gradients the others do not), so only agreeing over the group keeps the replicas equal.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/nn/model.h"
#include "core/trace/events.h"
#include "lab.h"
#include "labs/common/reference.h"
#include "labs/common/world.h"
#include "strategies/distributed_sampler.h"
#include "labs/common/verdict.h"

using namespace scalelab;
using lab::Args;
using lab::str;

// ---- the given functions of lab.h ------------------------------------------------------------

namespace {
const std::string kMagic = "LAB09CK1";
std::atomic<int> g_write_delay_ms{0};  // the barrier check makes rank 0's write slow
std::atomic<int> g_writes{0};
std::atomic<int> g_writer_rank{-1};  // the rank whose thread last wrote a file (the barrier check)
thread_local int t_rank = -1;        // set by the barrier check on each rank's thread
std::string g_last_write_path;
const std::string kModel = "mlp:16-13-4";
}  // namespace

namespace lab09 {

std::string encode_state(const TrainState& s) {
  std::string out = kMagic;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  put(&s.step, 8);
  put(&s.scaler.scale, 4);
  put(&s.scaler.good_steps, 8);
  put(&s.scaler.skipped_steps, 8);
  const int64_t layers = static_cast<int64_t>(s.weights.values.size() / 2);  // an MLP: W and b per layer
  put(&layers, 8);
  for (const std::vector<float>& v : s.weights.values) {
    const int64_t n = static_cast<int64_t>(v.size());
    put(&n, 8);
    put(v.data(), static_cast<size_t>(n) * 4);
  }
  return out;
}

TrainState decode_state(const std::string& bytes) {
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    if (at + n > bytes.size()) throw std::runtime_error("decode_state: the checkpoint is cut short (" + str(bytes.size()) + " bytes)");
    std::memcpy(p, bytes.data() + at, n);
    at += n;
  };
  char magic[8];
  get(magic, 8);
  if (std::string(magic, 8) != kMagic) throw std::runtime_error("decode_state: not a lab 09 checkpoint");
  TrainState s;
  get(&s.step, 8);
  get(&s.scaler.scale, 4);
  get(&s.scaler.good_steps, 8);
  get(&s.scaler.skipped_steps, 8);
  int64_t layers = 0;
  get(&layers, 8);
  if (layers < 0 || layers > 64) throw std::runtime_error("decode_state: a bad layer count");
  s.weights.spec = ModelSpec::parse(kModel);
  s.weights.values.resize(static_cast<size_t>(2 * layers));
  for (std::vector<float>& v : s.weights.values) {
    int64_t n = 0;
    get(&n, 8);
    if (n < 0 || n > (1 << 24)) throw std::runtime_error("decode_state: a bad tensor size");
    v.resize(static_cast<size_t>(n));
    get(v.data(), static_cast<size_t>(n) * 4);
  }
  if (at != bytes.size()) throw std::runtime_error("decode_state: bytes left over at the end of the checkpoint");
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  ++g_writes;
  g_writer_rank = t_rank;
  g_last_write_path = path;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("write_file: cannot open " + path);
  const size_t half = bytes.size() / 2;
  f.write(bytes.data(), static_cast<std::streamsize>(half));
  f.flush();
  // A large file on a shared file system: the first half is there, the rest comes later.
  if (g_write_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_write_delay_ms.load()));
  f.write(bytes.data() + half, static_cast<std::streamsize>(bytes.size() - half));
  if (!f) throw std::runtime_error("write_file: cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("read_file: cannot open " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace lab09

// ---- the checks ------------------------------------------------------------------------------

namespace {

constexpr auto kCommTimeout = std::chrono::milliseconds(2000);
constexpr float kLr = 0.1f;
constexpr int64_t kBatch = 48;

// A scratch folder of this check's own, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("scalelab-lab09-" + str(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::vector<HostBatch> make_batches(int steps) {
  const ModelSpec m = ModelSpec::parse(kModel);
  static DataSplit data;
  data = make_synthetic(1024, 16, m.inputs(), static_cast<int>(m.outputs()), 13);
  Loader loader(data.train, kBatch, 13);
  std::vector<HostBatch> out(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) loader.fill(s, out[static_cast<size_t>(s)]);
  return out;
}

bool same_weights(const HostWeights& a, const HostWeights& b) { return a.values == b.values; }

double max_diff(const HostWeights& a, const HostWeights& b) {
  double d = 0;
  for (size_t p = 0; p < a.values.size(); ++p)
    for (size_t i = 0; i < a.values[p].size(); ++i) d = std::max(d, std::fabs(double(a.values[p][i]) - b.values[p][i]));
  return d;
}

std::string scaler_text(const lab09::ScalerState& s) {
  return "scale " + str(s.scale) + ", good_steps " + str(s.good_steps) + ", skipped_steps " + str(s.skipped_steps);
}
bool same_scaler(const lab09::ScalerState& a, const lab09::ScalerState& b) {
  return a.scale == b.scale && a.good_steps == b.good_steps && a.skipped_steps == b.skipped_steps;
}

// What one rank saw after each step it ran.
struct RankTrace {
  std::vector<HostWeights> weights;           // after each step
  std::vector<lab09::ScalerState> scaler;     // after each step
  std::vector<int> stepped;                   // unscale_and_update's answer
};

struct Run {
  int ranks = 2;
  lab09::ScalerOptions options;
  lab09::ScalerState start;        // the scaler at the first step
  int first = 0, last = 0;         // steps [first, last)
  // At step overflow_step one value of the gradient tensor overflow_tensor (an index into the
  // model's parameters, -1: the last) becomes overflow_value on rank overflow_rank (kEveryRank: all).
  int overflow_step = -1, overflow_rank = -1, overflow_tensor = 0;
  float overflow_value = std::numeric_limits<float>::infinity();
  std::vector<HostWeights> init;   // per rank (or one for all)
  // After step `save_at` completes (steps done == save_at), every rank calls save_checkpoint.
  int save_at = -1;
  std::string save_path;
};


void sgd_step(Device& device, Model& model) {
  SgdOptions o;
  o.lr = kLr;
  for (Parameter* p : model.parameters()) device.sgd({"sgd", Phase::optim}, p->value, p->grad, Tensor(), o);
}

constexpr int kEveryRank = -2;

// `events`, when given, gets every event the ranks' devices recorded (the trace).
std::vector<RankTrace> train(const Run& run, const std::vector<HostBatch>& batches, std::vector<Event>* events = nullptr) {
  const int n = run.ranks;
  auto w = lab::make_world(n, "", kCommTimeout);
  std::vector<RankTrace> out(static_cast<size_t>(n));
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    ProcessGroup& group = *w->groups[static_cast<size_t>(rank)];
    Model model(device, run.init.size() == 1 ? run.init[0] : run.init[static_cast<size_t>(rank)]);
    Tensor flag = device.zeros({1}, DType::f32, MemoryCategory::comm_buffers, "amp.found_inf");
    lab09::ScalerState state = run.start;
    RankTrace& T = out[static_cast<size_t>(rank)];
    HostBatch shard;
    for (int s = run.first; s < run.last; ++s) {
      device.set_step(s);
      take_shard(batches[static_cast<size_t>(s)], rank, n, shard);
      lab::forward_backward(device, model, shard, state.scale);
      std::vector<Tensor> grads;
      for (Parameter* p : model.parameters()) {
        group.all_reduce(p->grad, ReduceOp::avg);
        grads.push_back(p->grad);
      }
      if (s == run.overflow_step && (rank == run.overflow_rank || run.overflow_rank == kEveryRank)) {
        // This rank's gradient overflowed.
        const Tensor& bad = run.overflow_tensor < 0 ? grads.back() : grads[static_cast<size_t>(run.overflow_tensor)];
        std::vector<float> g(static_cast<size_t>(bad.numel()));
        device.download({"inject", Phase::optim}, g.data(), bad);
        g[g.size() / 2] = run.overflow_value;
        device.upload({"inject", Phase::optim}, bad, g.data());
      }
      const bool step = lab09::unscale_and_update(grads, group, device, flag, state, run.options);
      if (step) sgd_step(device, model);
      T.weights.push_back(model.download());
      T.scaler.push_back(state);
      T.stepped.push_back(step ? 1 : 0);
      if (s + 1 == run.save_at) {
        lab09::TrainState st;
        st.step = s + 1;
        st.weights = T.weights.back();
        st.scaler = state;
        lab09::save_checkpoint(run.save_path, st, group);
      }
    }
  });
  if (events) *events = w->bus.events();
  return out;
}

HostWeights train_single(const HostWeights& init, const std::vector<HostBatch>& batches, int steps) {
  EventBus bus;
  DeviceOptions o;
  o.bus = &bus;
  auto devices = make_devices(o);
  Device& device = *devices[0];
  Model model(device, init);
  for (int s = 0; s < steps; ++s) {
    lab::forward_backward(device, model, batches[static_cast<size_t>(s)], 1.0f);
    sgd_step(device, model);
  }
  return model.download();
}

HostWeights init() { return init_weights(ModelSpec::parse(kModel), 7); }

// `steps` steps on n ranks from the same weights, S = 65536 not growing on the way, the last rank's
// first gradient tensor holding an inf at step `bad`.
Run overflow_run(int n, int steps, int bad) {
  Run run;
  run.ranks = n;
  run.options.growth_interval = 1000;
  run.last = steps;
  run.overflow_step = bad;
  run.overflow_rank = n - 1;
  run.init = {init()};
  return run;
}

// Overflow on one rank only: every rank skips that step (its weights stay as they were) and halves S.
// `--inject inf|nan`: what the gradient holds (a NaN is an overflow too: 0 · inf, inf − inf);
// `--tensor first|last`: in the first layer's weight gradient or the last layer's bias gradient;
// `--rank last|every`: on the last rank only, or on every rank at once.
void overflow_skipped(const Args& args) {
  const int steps = 4, bad = 1;
  const std::string inject = args.get("inject", "inf"), tensor = args.get("tensor", "first"), on = args.get("rank", "last");
  if ((inject != "inf" && inject != "nan") || (tensor != "first" && tensor != "last") || (on != "last" && on != "every"))
    throw std::invalid_argument("harness: --inject inf|nan, --tensor first|last, --rank last|every, not " + inject + ", " +
                                tensor + ", " + on);
  for (long long n : args.ints("ranks", "2,4")) {
    const auto batches = make_batches(steps);
    Run run = overflow_run(static_cast<int>(n), steps, bad);
    if (on == "every") run.overflow_rank = kEveryRank;
    run.overflow_tensor = tensor == "first" ? 0 : -1;
    run.overflow_value = inject == "inf" ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    const auto T = train(run, batches);
    const std::string where = str(n) + " ranks, " + (on == "every" ? "every rank's" : "rank " + str(n - 1) + "'s") + " " +
                              (tensor == "first" ? "first" : "last") + " gradient tensor held a" +
                              (inject == "inf" ? "n inf" : " NaN") + " at step " + str(bad);
    for (int r = 0; r < n; ++r) {
      const RankTrace& t = T[static_cast<size_t>(r)];
      lab::expect(t.stepped[bad] == 0, where + ": rank " + str(r) + " took the step — the overflow flag must be all-reduced (max) so that every rank skips",
                  "unscale_and_update returns false on every rank", "true on rank " + str(r));
      lab::expect(same_weights(t.weights[bad], t.weights[bad - 1]), where + ": rank " + str(r) + "'s weights changed at the skipped step",
                  "the weights of step " + str(bad - 1), "different weights (max diff " + str(max_diff(t.weights[bad], t.weights[bad - 1])) + ")");
      lab09::ScalerState want;
      want.scale = 65536.0f * 0.5f;
      want.good_steps = 0;
      want.skipped_steps = 1;
      lab::expect(same_scaler(t.scaler[bad], want), where + ": rank " + str(r) + "'s scaler after the skipped step (halved, good steps reset)",
                  scaler_text(want), scaler_text(t.scaler[bad]));
      for (int s : {0, 2, 3})
        lab::expect(t.stepped[static_cast<size_t>(s)] == 1, where + ": rank " + str(r) + " at step " + str(s) + " (no overflow)",
                    "the step taken", "skipped");
      lab::expect(same_weights(t.weights.back(), T[0].weights.back()) && same_scaler(t.scaler.back(), T[0].scaler.back()),
                  where + ": the replicas after " + str(steps) + " steps", "rank " + str(r) + " equal to rank 0",
                  "max diff " + str(max_diff(t.weights.back(), T[0].weights.back())) + ", " + scaler_text(t.scaler.back()) +
                      " vs " + scaler_text(T[0].scaler.back()));
    }
  }
  std::printf("passed: an overflow (%s in the %s gradient tensor, on %s) skipped the step on every rank, S halved "
              "everywhere, %s ranks\n",
              inject.c_str(), tensor.c_str(), on == "every" ? "every rank" : "the last rank",
              lab::list_text(args.ints("ranks", "2,4")).c_str());
}

// What each rank's device records as sent for one all-reduce (max) of one float on n ranks: the
// yardstick of flag_traffic, measured on a world of the harness's own (a ring splits the payload
// into chunks, so it is not simply 4 bytes).
std::vector<int64_t> one_float_all_reduce_bytes(int n) {
  auto w = lab::make_world(n, "", kCommTimeout);
  lab::run_ranks(n, [&](int rank) {
    Device& device = *w->devices[static_cast<size_t>(rank)];
    w->groups[static_cast<size_t>(rank)]->all_reduce(device.zeros({1}, DType::f32, MemoryCategory::comm_buffers, "flag"),
                                                     ReduceOp::max);
  });
  std::vector<int64_t> bytes(static_cast<size_t>(n), 0);
  for (const Event& e : w->bus.events())
    if (e.lane == Lane::comm) bytes[static_cast<size_t>(e.device)] += e.bytes;
  return bytes;
}

// Bytes moved: the ranks agree on ONE float. From the trace: every step, after the harness's
// all-reduce of each gradient, each rank's unscale_and_update makes exactly one collective call —
// the all-reduce of the overflow flag, 4 bytes — whether a rank overflowed or not. Agreeing by
// moving the gradients again (so that an inf reaches every rank) gives the same decision for the
// price of the whole model.
void flag_traffic(const Args& args) {
  const int steps = 3, bad = 1;
  const size_t gradients = 2 * static_cast<size_t>(ModelSpec::parse(kModel).layer_count());
  std::string report;
  for (long long n : args.ints("ranks", "2,4")) {
    std::vector<Event> events;
    train(overflow_run(static_cast<int>(n), steps, bad), make_batches(steps), &events);
    const std::vector<int64_t> flag_bytes = one_float_all_reduce_bytes(static_cast<int>(n));
    for (int r = 0; r < n; ++r)
      for (int s = 0; s < steps; ++s) {
        // Rank r's collective calls in step s, in the order made: a call's first event carries its
        // flow id, the further steps of a chunked one -1. Each as "kind bytes".
        std::vector<std::string> calls;
        std::vector<int64_t> bytes;
        for (const Event& e : events)
          if (e.device == r && e.step == s && e.lane == Lane::comm) {
            if (e.flow_id >= 0 || calls.empty()) {
              calls.push_back(e.kind);
              bytes.push_back(0);
            }
            bytes.back() += e.bytes;
          }
        std::string mine;  // what followed the harness's gradient all-reduces
        bool one_float = calls.size() == gradients + 1;
        for (size_t k = std::min(gradients, calls.size()); k < calls.size(); ++k) {
          mine += (mine.empty() ? "" : ", ") + calls[k] + " of " + str(bytes[k]) + " B";
          one_float = one_float && calls[k] == "all_reduce" && bytes[k] == flag_bytes[static_cast<size_t>(r)];
        }
        lab::expect(one_float,
                    str(n) + " ranks, step " + str(s) + (s == bad ? " (rank " + str(n - 1) + " overflowed)" : "") +
                        ": the collectives rank " + str(r) + "'s unscale_and_update made (from the trace)",
                    "one all_reduce of the 4-byte flag (all_reduce of " + str(flag_bytes[static_cast<size_t>(r)]) +
                        " B, as this group sends for one float), nothing else",
                    mine.empty() ? "none" : mine);
        if (r == 0 && s == bad) {
          int64_t all = 0;
          for (int64_t b : bytes) all += b;
          report += "  " + str(n) + " ranks, rank 0, step " + str(s) + ": " + mine + " (the gradients' all-reduces: " +
                    str(all - bytes.back()) + " B)\n";
        }
      }
  }
  std::printf("passed: one 4-byte all-reduce per rank and step agrees on the overflow\n%s", report.c_str());
}

// Growth: K good steps in a row double S.
void scale_growth(const Args&) {
  const int steps = 7, k = 3;
  const auto batches = make_batches(steps);
  Run run;
  run.ranks = 2;
  run.options.growth_interval = k;
  run.start.scale = 1024.0f;
  run.last = steps;
  run.init = {init()};
  const auto T = train(run, batches);
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < steps; ++s) {
      lab09::ScalerState want;
      want.scale = 1024.0f * static_cast<float>(1 << ((s + 1) / k));
      want.good_steps = (s + 1) % k;
      want.skipped_steps = 0;
      const auto& got = T[static_cast<size_t>(r)].scaler[static_cast<size_t>(s)];
      lab::expect(same_scaler(got, want), "rank " + str(r) + ", growth interval " + str(k) + ", after step " + str(s) +
                  " (no overflow; S ×2 after every " + str(k) + " good steps, counted again from 0)",
                  scaler_text(want), scaler_text(got));
      lab::expect(T[static_cast<size_t>(r)].stepped[static_cast<size_t>(s)] == 1, "rank " + str(r) + ", step " + str(s) + " (no overflow)",
                  "the step taken", "skipped");
    }
  std::printf("passed: S doubled after every %d good steps, 7 steps, 2 ranks\n", k);
}

// Unscaled: with S = 2^10 and no overflow, the same weights as fp32 SGD without scaling.
// `--growth-interval K`: S doubles after every K good steps on the way, and each step's gradients
// must be unscaled by the S that scaled that step's loss, not the one the update leaves.
void unscaled_equivalence(const Args& args) {
  const int steps = 5;
  const int64_t growth_interval = std::stoll(args.get("growth-interval", "1000"));
  const auto batches = make_batches(steps);
  const HostWeights want = train_single(init(), batches, steps);
  for (long long n : args.ints("ranks", "2,4")) {
    Run run;
    run.ranks = static_cast<int>(n);
    run.options.growth_interval = growth_interval;
    run.start.scale = 1024.0f;
    run.last = steps;
    run.init = {init()};
    const auto T = train(run, batches);
    for (int r = 0; r < n; ++r) {
      const double d = max_diff(T[static_cast<size_t>(r)].weights.back(), want);
      lab::expect(d <= 1e-5, str(n) + " ranks, S = 1024 growing ×2 every " + str(growth_interval) + " good steps, " +
                  str(steps) + " SGD steps: rank " + str(r) +
                  "'s weights vs single-device fp32 SGD without scaling (were the gradients divided by the S that "
                  "scaled this step's loss, before S was updated?)",
                  "max diff ≤ 1e-5", "max diff " + str(d) + " (S at the end: " + str(T[static_cast<size_t>(r)].scaler.back().scale) + ")");
    }
  }
  std::printf("passed: scaled by 1024 (×2 every %lld good steps) and unscaled, the same weights as fp32 SGD (within "
              "1e-5), %s ranks\n",
              static_cast<long long>(growth_interval), lab::list_text(args.ints("ranks", "2,4")).c_str());
}

// Resume: 6 steps at once, or 3, a checkpoint, and 3 more from it — bit-identical.
void resume_exact(const Args&) {
  const int steps = 6, at = 3;
  TempDir dir;
  const std::string path = (dir.path / "ckpt.bin").string();
  const auto batches = make_batches(steps);
  Run whole;
  whole.ranks = 2;
  whole.options.growth_interval = 2;
  whole.last = steps;
  whole.overflow_step = 4;
  whole.overflow_rank = 1;
  whole.init = {init()};
  const auto A = train(whole, batches);

  Run first = whole;
  first.last = at;
  first.save_at = at;
  first.save_path = path;
  const auto B = train(first, batches);
  lab::expect(std::filesystem::exists(path), "after save_checkpoint at step " + str(at), "the file " + path, "no file there");

  std::vector<lab09::TrainState> loaded(2);
  lab::run_ranks(2, [&](int r) { loaded[static_cast<size_t>(r)] = lab09::load_checkpoint(path); });
  for (int r = 0; r < 2; ++r) {
    const auto& s = loaded[static_cast<size_t>(r)];
    lab::expect(s.step == at && same_weights(s.weights, B[0].weights.back()) && same_scaler(s.scaler, B[0].scaler.back()),
                "rank " + str(r) + " loaded the checkpoint saved after step " + str(at),
                "step " + str(at) + ", the weights and " + scaler_text(B[0].scaler.back()),
                "step " + str(s.step) + ", " + (same_weights(s.weights, B[0].weights.back()) ? "the same" : "other") +
                    " weights, " + scaler_text(s.scaler));
  }
  Run second = whole;
  second.first = static_cast<int>(loaded[0].step);
  second.start = loaded[0].scaler;
  second.init = {loaded[0].weights, loaded[1].weights};
  const auto C = train(second, batches);
  for (int r = 0; r < 2; ++r) {
    const auto& a = A[static_cast<size_t>(r)];
    const auto& c = C[static_cast<size_t>(r)];
    lab::expect(same_weights(c.weights.back(), a.weights.back()),
                "rank " + str(r) + ": " + str(at) + " steps, checkpoint, resume to " + str(steps) + " vs " + str(steps) + " steps at once",
                "bit-identical weights", "max diff " + str(max_diff(c.weights.back(), a.weights.back())));
    lab::expect(same_scaler(c.scaler.back(), a.scaler.back()), "rank " + str(r) + ": the scaler after the resumed run",
                scaler_text(a.scaler.back()), scaler_text(c.scaler.back()));
  }
  std::printf("passed: 6 steps = 3 steps, checkpoint, 3 steps from it: bit-identical weights and scaler, 2 ranks\n");
}

// The barrier: rank 0's write is slow; every rank reads the checkpoint as soon as save_checkpoint
// returns, and must find the new one whole (the path holds an older checkpoint before).
void barrier(const Args& args) {
  const int n = static_cast<int>(args.ints("ranks", "3").at(0));
  TempDir dir;
  const std::string path = (dir.path / "ckpt.bin").string();
  lab09::TrainState old_state;
  old_state.step = 0;
  old_state.weights = init();
  lab09::write_file(path, lab09::encode_state(old_state));  // the previous checkpoint
  g_writes = 0;
  lab09::TrainState state;
  state.step = 3;
  state.weights = init_weights(ModelSpec::parse(kModel), 8);
  state.scaler.scale = 2048.0f;
  state.scaler.good_steps = 1;
  g_write_delay_ms = 300;
  auto w = lab::make_world(n, "", kCommTimeout);
  std::vector<lab09::TrainState> got(static_cast<size_t>(n));
  lab::run_ranks(n, [&](int r) {
    t_rank = r;
    lab09::save_checkpoint(path, state, *w->groups[static_cast<size_t>(r)]);
    got[static_cast<size_t>(r)] = lab09::load_checkpoint(path);
  });
  g_write_delay_ms = 0;
  lab::expect(g_writes == 1, "save_checkpoint on " + str(n) + " ranks: how many wrote the file", "1 (rank 0 only)", str(g_writes.load()));
  lab::expect(g_writer_rank == 0, "save_checkpoint on " + str(n) + " ranks: which rank wrote the file", "rank 0",
              "rank " + str(g_writer_rank.load()));
  lab::expect(g_last_write_path != path, "rank 0 wrote the checkpoint",
              "to a temporary file, renamed to " + path + " once whole", "straight to " + path);
  lab::expect(!std::filesystem::exists(path + ".tmp"), "after save_checkpoint", "no " + path + ".tmp left (renamed)", "it is still there");
  for (int r = 0; r < n; ++r) {
    const auto& s = got[static_cast<size_t>(r)];
    lab::expect(s.step == state.step && same_weights(s.weights, state.weights) && same_scaler(s.scaler, state.scaler),
                "rank " + str(r) + " read the checkpoint right after save_checkpoint returned (rank 0's write takes 300 ms) — "
                "every rank must wait at a barrier until the new file is in place",
                "the new checkpoint (step " + str(state.step) + ")", "step " + str(s.step) + (s.step == 0 ? " (the old checkpoint)" : ""));
  }
  std::printf("passed: rank 0 alone wrote (temporary file, renamed); %d ranks all read the new checkpoint after save_checkpoint\n", n);
}

}  // namespace

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv,
                        {{"overflow_skipped", overflow_skipped},
                         {"flag_traffic", flag_traffic},
                         {"scale_growth", scale_growth},
                         {"unscaled_equivalence", unscaled_equivalence},
                         {"resume_exact", resume_exact},
                         {"barrier", barrier}});
}
