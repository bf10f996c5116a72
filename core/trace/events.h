#pragma once
// The one data model: everything a run does is an Event, a memory sample or a metric. The
// dashboard, the Chrome-trace writer, the metrics pass and the grader all read these.
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/memory_ledger.h"

namespace scalelab {

enum class Lane : uint8_t { compute, comm, copy, host };
// wgrad: the weights' gradients where a zero-bubble pipeline runs them as a task of their own (W);
// every other backward op, those gradients included, is bwd.
enum class Phase : uint8_t { fwd, bwd, optim, comm, data, eval, wgrad };
constexpr int kPhaseCount = static_cast<int>(Phase::wgrad) + 1;
constexpr int kLaneCount = 4;

const char* lane_name(Lane lane);
const char* phase_name(Phase phase);

// What an event does in the lesson, set where the event is made: DataParallel's controller copies
// (scatter, replicate, gather, reduce), a collective or point-to-point call (the process group
// sets its own), a copy between host and device. The dashboard finds what it draws by role, never
// by parsing names. Where a copy and a collective do the same thing (a scatter) they share a role.
enum class Role : uint8_t {
  none,
  scatter, replicate, gather, reduce,
  all_reduce, broadcast, all_gather, reduce_scatter, send, recv, barrier,
  upload, download,
};
constexpr int kRoleCount = static_cast<int>(Role::download) + 1;
const char* role_name(Role role);
// The role named by role_name; Role::none for a name it does not know (a trace from a later build).
Role parse_role(const std::string& name);

struct Event {
  int device = 0;
  Lane lane = Lane::compute;
  std::string kind;  // the op: gemm, bias_act, softmax_xent, sgd, copy_h2d, all_reduce ...
  std::string name;  // what it is for: "fc1.fwd", "batch x" ...
  Phase phase = Phase::fwd;
  int64_t t_begin_ns = 0;
  int64_t t_end_ns = 0;
  int64_t bytes = 0;
  double flops = 0;
  int64_t step = -1;
  int micro_batch = -1;
  int bucket = -1;
  int layer = -1;
  int peer = -1;
  int64_t flow_id = -1;  // links a send to its recv, the ranks' events of one collective
  Role role = Role::none;
  // The process group a collective or send / recv ran in, as named at split ("tp", "pp", "dp");
  // "" for the world's group and for everything else.
  std::string group{};
  // The host thread that ran it (host_thread_index(): equal for one thread, nothing more) — a
  // device's op the thread that issued it, a collective its rank's thread or its queue's worker;
  // -1 where unknown (read back from a trace, relayed from a worker process). On the cpu device the
  // cores pass between threads, not devices: ddp-mp's rank drives both its devices from one thread.
  int thread = -1;
};

// A small number for the calling thread, the same for as long as it lives, another for each thread.
int host_thread_index();

struct MemorySample {
  int device = 0;
  int64_t t_ns = 0;
  MemoryCategory category = MemoryCategory::params;
  int64_t bytes = 0;  // live bytes of this category after the change
};

struct Metric {
  int64_t step = 0;
  std::string name;  // loss, accuracy, samples_per_s ...
  double value = 0;
};

// Who a device is, as the bus, the trace and the dashboard know it: its name and, on sim, its
// hardware profile as data (so a reader needs neither the profile file nor the name's format).
struct DeviceDescription {
  std::string name;     // as errors and the summary name it: "sim:0 (a100-nvlink-8)", "cuda:1"
  std::string label;    // short, for row labels: "sim:0"
  std::string profile;  // sim: the hardware profile as JSON, in the profile files' format; "" otherwise
  // The memory the device may hold where known (cuda: its share of the GPU; sim: the profile's);
  // 0: unknown (cpu). How the dashboard draws memory against capacity without a profile.
  int64_t capacity_bytes = 0;
  bool operator==(const DeviceDescription&) const = default;
};

// What the bus keeps of a device it does not keep op by op (EventBus::tally_devices): what the
// run's metrics read — each lane's busy intervals merged as they come (a sim's back-to-back ops
// become one), the training steps' compute and span, flops, bytes moved, the memory peaks.
struct DeviceTally {
  using Intervals = std::vector<std::pair<int64_t, int64_t>>;
  int device = -1;
  int64_t events = 0;                                  // how many it took in
  int64_t t_begin_ns = INT64_MAX, t_end_ns = 0;        // of all its events
  int64_t step_begin_ns = INT64_MAX, step_end_ns = 0;  // of its events in a training step (step ≥ 0)
  std::array<Intervals, kLaneCount> lanes;
  Intervals step_compute;  // the compute lane's intervals in a training step
  double flops = 0;
  int64_t bytes_moved = 0;  // comm and copy lanes
  // Peaks in the order the samples came (a device's samples come in its own time order).
  std::array<int64_t, kMemoryCategoryCount> live{}, peak_bytes{};
  int64_t peak_total = 0;

  void add(const Event& e);
  void add(const MemorySample& m);
};

// Thread-safe store of everything emitted. Readers take copies of what arrived since an index,
// so the dashboard can poll each frame while training threads keep emitting.
class EventBus {
 public:
  void emit(Event e);
  void emit(MemorySample m);
  void emit(Metric m);

  std::vector<Event> events_since(size_t first) const;
  std::vector<MemorySample> memory_since(size_t first) const;
  std::vector<Metric> metrics_since(size_t first) const;
  std::vector<Event> events() const { return events_since(0); }
  std::vector<MemorySample> memory() const { return memory_since(0); }
  std::vector<Metric> metrics() const { return metrics_since(0); }
  size_t event_count() const;
  // The latest end time of any event emitted so far (0 before the first): how far the run's clock
  // has got. The dashboard paces a live run by it; train() times each step with it.
  int64_t latest_end_ns() const;
  // Devices say who they are when they are made, so a reader of a live run knows them (name and
  // hardware profile) as a reader of a trace file does.
  void describe_device(int index, DeviceDescription description);
  std::vector<DeviceDescription> devices() const;  // index = device; empty for one never described
  // Of a run on `count` devices, keep every op of devices [0, first) and a DeviceTally of each of
  // the others: a dry run on 1,024 devices emits some 15 million events and memory samples, which
  // nobody reads op by op and which would take gigabytes. Call before anything is emitted.
  void tally_devices(int first, int count);
  int first_tallied_device() const { return first_tallied_; }  // INT_MAX: none
  std::vector<DeviceTally> tallies() const;                     // device order
  void clear();

 private:
  struct TallySlot {
    std::mutex mutex;  // a device's events come from its rank's thread and its comm workers
    DeviceTally tally;
  };
  TallySlot* tally_slot(int device) const;
  void note_end(int64_t t_end_ns);

  int first_tallied_ = INT_MAX;
  std::vector<std::unique_ptr<TallySlot>> tallies_;  // device first_tallied_ + i; sized once
  std::atomic<int64_t> latest_end_ns_{0};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<MemorySample> memory_;
  std::vector<Metric> metrics_;
  std::vector<DeviceDescription> devices_;
};

}  // namespace scalelab
