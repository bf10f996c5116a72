#include "calibration/host_turns.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

namespace scalelab {

namespace {

// More than the steps a backend's call is recorded in (ProcessGroup keeps at most 32).
constexpr int64_t kStepsPerCall = 64;

// Where an op goes on a server, and how long it holds it there.
struct Slot {
  int64_t start, length;
};

// One server of the host's cores: busy intervals [begin, end), none overlapping, each with the
// thread that held it (thread_of, or -1: a collective's ranks). An op takes the earliest gap at or
// after `earliest` that holds it whole (an op, once on the cores, runs to its end), and a handoff
// on each side where the thread before or after it is another. `switch_extra`: what the op takes
// beyond `duration` where the thread that held the server before it is another (a GEMM after a
// handoff, HostShare::gemm_after_handoff_ns).
class HostServer {
 public:
  Slot earliest_gap(int64_t earliest, int64_t duration, int thread, int64_t handoff, int64_t switch_extra = 0) const {
    const auto gap = [&](const Held& h) { return h.thread != thread ? handoff : 0; };
    int64_t start = earliest, length = duration;
    auto it = busy_.upper_bound(start);
    if (it != busy_.begin()) {
      const Held& before = std::prev(it)->second;
      start = std::max(start, before.end + gap(before));
      if (before.thread != thread) length = duration + switch_extra;
    }
    for (; it != busy_.end() && it->first < start + length + gap(it->second); ++it) {
      start = std::max(start, it->second.end + gap(it->second));
      length = it->second.thread != thread ? duration + switch_extra : duration;
    }
    return {start, length};
  }
  void take(Slot s, int thread) { busy_.emplace(s.start, Held{s.start + s.length, thread}); }

 private:
  struct Held {
    int64_t end;
    int thread;
  };
  std::map<int64_t, Held> busy_;
};

// The host's servers: an op goes to the one that can start it first.
class HostServers {
 public:
  HostServers(int count, int64_t handoff) : servers_(static_cast<size_t>(std::max(1, count))), handoff_(handoff) {}
  Slot reserve(int64_t earliest, int64_t duration, int thread, int64_t switch_extra = 0) {
    if (duration <= 0) return {earliest, duration};
    const auto [slot, best] = find(earliest, duration, thread, switch_extra);
    best->take(slot, thread);
    return slot;
  }
  // The earliest start at or after `earliest` that both these servers and `track` hold free, which
  // it then takes on both (a GEMM: the turn, and the track it keeps from the collectives).
  Slot reserve_with(HostServer& track, int64_t earliest, int64_t duration, int thread, int64_t switch_extra = 0) {
    if (duration <= 0) return {earliest, duration};
    for (int64_t start = earliest;;) {
      const auto [slot, best] = find(start, duration, thread, switch_extra);
      start = track.earliest_gap(slot.start, slot.length, thread, handoff_).start;
      if (start == slot.start) {
        best->take(slot, thread);
        track.take(slot, thread);
        return slot;
      }
    }
  }

 private:
  std::pair<Slot, HostServer*> find(int64_t earliest, int64_t duration, int thread, int64_t switch_extra) {
    HostServer* best = nullptr;
    Slot slot{INT64_MAX, duration};
    for (HostServer& s : servers_)
      if (const Slot at = s.earliest_gap(earliest, duration, thread, handoff_, switch_extra); at.start < slot.start) slot = at, best = &s;
    return {slot, best};
  }

  std::vector<HostServer> servers_;
  int64_t handoff_;
};

// The host thread that issued an event: the cores pass between threads, and one thread may drive
// several devices (model parallel's, a ddp-mp rank's two). An event that does not say (read back
// from a trace) is taken as its device's thread, one thread a device.
int thread_of(const Event& e) { return e.thread >= 0 ? e.thread : (1 << 24) + e.device; }

struct LaneState {
  int64_t end = 0;                // re-timed end of the lane's last event
  int64_t priced_end = INT64_MIN; // its priced end
  int64_t delay = 0;              // how much later than priced it ended
};

}  // namespace

HostShare processes_share(int processes, int cores) {
  processes = std::max(1, processes);
  cores = std::max(1, cores);
  const int threads = std::max(1, cores / processes);
  return {std::min(processes, cores), static_cast<double>(cores) / threads};
}

std::vector<Event> take_turns_on_host(std::vector<Event> events, const HostShare& share) {
  const size_t n = events.size();
  // How long event i holds its server: as priced, but a GEMM with fewer threads than the sim
  // priced it with takes longer.
  std::vector<int64_t> duration(n);
  for (size_t i = 0; i < n; ++i) {
    const Event& e = events[i];
    const double priced = static_cast<double>(e.t_end_ns - e.t_begin_ns);
    duration[i] = std::llround(e.kind == "gemm" ? priced * share.gemm_stretch : priced);
  }
  // Steps one after another — on the cpu device the host thread starts step s + 1 when every rank
  // has finished step s — and in each step the events in their priced order. Events of no step
  // (set-up, the final evaluation) go before the first step or after the last, as they lay.
  int64_t first_step_begin = INT64_MAX;
  for (const Event& e : events)
    if (e.step >= 0) first_step_begin = std::min(first_step_begin, e.t_begin_ns);
  auto stage = [&](const Event& e) { return e.step >= 0 ? e.step : e.t_begin_ns < first_step_begin ? -1 : INT64_MAX; };
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events[a], &y = events[b];
    if (stage(x) != stage(y)) return stage(x) < stage(y);
    if (x.t_begin_ns != y.t_begin_ns) return x.t_begin_ns < y.t_begin_ns;
    if (x.t_end_ns != y.t_end_ns) return x.t_end_ns < y.t_end_ns;
    // Ties by device: the devices' threads put their events on the bus in whatever order they ran,
    // and the re-timed run must not depend on it (each device's own events are in program order).
    return x.device < y.device;
  });
  // A collective's events: a backend that runs it in steps records one event per step, the first
  // with the call's flow_id, the rest with none (core/comm/process_group.cpp). The ranks' events of
  // the same step are one group: keyed (flow_id, step), found in each device's recording order.
  std::vector<int64_t> group(n, -1);
  std::unordered_map<int64_t, int> members;  // group → its events
  {
    std::unordered_map<int, std::pair<int64_t, int64_t>> call;  // device → (flow_id, step) of its last
    for (size_t i = 0; i < n; ++i) {
      const Event& e = events[i];
      if (e.role == Role::send || e.role == Role::recv) continue;
      if (e.flow_id >= 0) {
        group[i] = e.flow_id * kStepsPerCall;
        if (e.lane == Lane::comm) call[e.device] = {e.flow_id, 0};
      } else if (e.lane == Lane::comm && e.role != Role::none) {
        const auto last = call.find(e.device);
        if (last == call.end() || last->second.second + 1 >= kStepsPerCall) continue;
        auto& [flow, step] = last->second;
        group[i] = flow * kStepsPerCall + ++step;
      } else {
        continue;
      }
      ++members[group[i]];
    }
  }

  // One thread's ops held as one turn (HostShare::one_core_yield_gemm_mnk), where two
  // threads take turns: the op after i in i's turn (-1: the turn ends with i), and whether i follows
  // another in its turn.
  auto on_cores_alone = [&](size_t i) {
    const Event& e = events[i];
    return (e.lane == Lane::compute || e.lane == Lane::copy) && group[i] < 0 && e.flow_id < 0;
  };
  std::vector<int64_t> turn_next(n, -1);
  std::vector<char> in_turn(n, 0);
  std::set<int> turn_takers;
  for (size_t i = 0; i < n; ++i)
    if (on_cores_alone(i) && events[i].step >= 0) turn_takers.insert(thread_of(events[i]));
  // Not with the collectives' second track: that is for turns on cores of their own, this for one core.
  if (share.servers == 1 && share.one_core_yield_gemm_mnk > 0 && !share.collectives_beside_one_thread_ops &&
      turn_takers.size() == 2) {
    std::unordered_map<int, size_t> last;  // thread → its last op on the cores
    for (size_t i : order) {
      if (!on_cores_alone(i)) continue;
      const Event& e = events[i];
      const int thread = thread_of(e);
      if (const auto it = last.find(thread); it != last.end()) {
        const Event& before = events[it->second];
        const bool yields = before.kind == "gemm" && before.flops / 2 > share.one_core_yield_gemm_mnk;
        if (!yields && stage(before) == stage(e) && before.t_end_ns == e.t_begin_ns) {
          turn_next[it->second] = static_cast<int64_t>(i);
          in_turn[i] = 1;
        }
      }
      last[thread] = i;
    }
  }
  std::vector<int64_t> planned(n, INT64_MIN);  // where an op of a turn taken whole starts

  std::map<std::pair<int, int>, LaneState> lanes;                        // (device, lane)
  std::unordered_map<int, std::unordered_map<int64_t, int64_t>> ended;  // device → priced end → delay
  std::vector<int64_t> begin(n);
  for (size_t i = 0; i < n; ++i) begin[i] = events[i].t_begin_ns;
  const int64_t handoff = std::max<int64_t>(0, share.handoff_ns);
  const int64_t gemm_after_handoff = std::max<int64_t>(0, share.gemm_after_handoff_ns);
  HostServers cores(share.servers, handoff);
  // The second track (HostShare::collectives_beside_one_thread_ops): GEMMs and collectives, one at
  // a time. Only where the devices take turns: Hogwild's processes make no collectives.
  const bool two_tracks = share.servers == 1 && share.collectives_beside_one_thread_ops;
  HostServer gemms_and_collectives;

  auto lane_of = [&](size_t i) -> LaneState& { return lanes[{events[i].device, static_cast<int>(events[i].lane)}]; };
  // The delay event i inherits from what it waited for: the event before it on its lane if it
  // queued behind it (a lane idle when the event was priced to start absorbs that event's delay),
  // and whatever ended exactly as it began on its own device or, for a copy, on the device it
  // copies from (in a priced run an op begins when the last thing it waits for ends).
  auto own_delay = [&](size_t i) {
    const Event& e = events[i];
    const LaneState& lane = lane_of(i);
    int64_t d = lane.priced_end >= e.t_begin_ns ? lane.delay : 0;
    for (const int device : {e.device, e.peer}) {
      if (device < 0) continue;
      const auto& ends = ended[device];
      if (const auto it = ends.find(e.t_begin_ns); it != ends.end()) d = std::max(d, it->second);
    }
    return d;
  };
  int64_t current_stage = INT64_MIN, stage_floor = 0, stage_end = 0;  // the barrier between steps
  // Places event i at the earliest time its lane, its delay, the step's start and (compute and
  // copy) the host's cores allow; returns how much later than priced it starts.
  auto place = [&](size_t i, int64_t delay, bool on_cores) {
    const Event& e = events[i];
    LaneState& lane = lane_of(i);
    int64_t start = std::max({e.t_begin_ns + delay, lane.end, stage_floor});
    if (on_cores && planned[i] != INT64_MIN && start <= planned[i]) {
      start = planned[i];  // its place in its thread's turn
    } else if (on_cores && turn_next[i] >= 0 && !in_turn[i]) {
      // The first op of a turn of several: the cores for all of them, one after another. (One that
      // something else holds back past its place in the turn takes the cores again, on its own.)
      int64_t total = 0;
      for (int64_t j = static_cast<int64_t>(i); j >= 0; j = turn_next[j]) total += duration[j];
      const Slot slot = cores.reserve(start, total, thread_of(e), e.kind == "gemm" ? gemm_after_handoff : 0);
      start = slot.start;
      duration[i] += slot.length - total;
      int64_t at = start + duration[i];
      for (int64_t j = turn_next[i]; j >= 0; j = turn_next[j]) planned[j] = at, at += duration[j];
    } else if (on_cores) {
      const int64_t extra = e.kind == "gemm" ? gemm_after_handoff : 0;
      const Slot slot = two_tracks && e.kind == "gemm"
                            ? cores.reserve_with(gemms_and_collectives, start, duration[i], thread_of(e), extra)
                            : cores.reserve(start, duration[i], thread_of(e), extra);
      start = slot.start;
      duration[i] = slot.length;
    }
    begin[i] = start;
    lane.end = start + duration[i];
    lane.priced_end = e.t_end_ns;
    lane.delay = lane.end - e.t_end_ns;  // what comes after it on its lane, or waits for it, moves as much
    int64_t& at_end = ended[e.device][e.t_end_ns];
    at_end = std::max(at_end, lane.delay);
    stage_end = std::max(stage_end, lane.end);
    return start - e.t_begin_ns;
  };
  std::unordered_map<int64_t, int64_t> sent;                            // flow_id → a send's delay
  std::unordered_map<int64_t, std::vector<size_t>> waiting_recv;        // flow_id → recvs before their send
  std::unordered_map<int64_t, std::vector<std::pair<size_t, int64_t>>> gathering;  // group → (event, its delay)
  // What still waits for a collective's last member or a recv's send when a step ends: placed as
  // its own delay allows.
  auto flush = [&] {
    for (auto& [flow, recvs] : waiting_recv)
      for (size_t r : recvs) place(r, own_delay(r), false);
    for (auto& [flow, group] : gathering)
      for (const auto& [j, d] : group) place(j, d, false);
    waiting_recv.clear();
    gathering.clear();
  };

  for (size_t i : order) {
    const Event& e = events[i];
    if (stage(e) != current_stage) {
      flush();
      if (current_stage != INT64_MIN && stage(e) != INT64_MAX) stage_floor = stage_end;
      current_stage = stage(e);
    }
    if (e.flow_id >= 0 && e.role == Role::send) {
      sent[e.flow_id] = place(i, own_delay(i), true);
      if (auto w = waiting_recv.find(e.flow_id); w != waiting_recv.end()) {
        for (size_t r : w->second) place(r, std::max(own_delay(r), sent[e.flow_id]), false);
        waiting_recv.erase(w);
      }
    } else if (e.flow_id >= 0 && e.role == Role::recv) {
      if (const auto s = sent.find(e.flow_id); s != sent.end()) place(i, std::max(own_delay(i), s->second), false);
      else waiting_recv[e.flow_id].push_back(i);
    } else if (group[i] >= 0) {
      auto& group_events = gathering[group[i]];
      group_events.emplace_back(i, own_delay(i));
      if (static_cast<int>(group_events.size()) < members[group[i]]) continue;
      // The collective (or its step) starts when its last member can and the cores are free: its
      // ranks' threads move and add the data with the host's cores, once for the whole group.
      int64_t start = stage_floor, longest = 0;
      for (const auto& [j, d] : group_events) {
        start = std::max({start, events[j].t_begin_ns + d, lane_of(j).end});
        longest = std::max(longest, duration[j]);
      }
      if (two_tracks) {
        const Slot slot = gemms_and_collectives.earliest_gap(start, longest, -1, handoff);
        gemms_and_collectives.take(slot, -1);
        start = slot.start;
      } else {
        start = cores.reserve(start, longest, -1).start;
      }
      for (const auto& [j, d] : group_events) place(j, start - events[j].t_begin_ns, false);
      gathering.erase(group[i]);
    } else {
      place(i, own_delay(i), e.lane == Lane::compute || e.lane == Lane::copy);
    }
  }
  flush();  // a recv whose send is not among the events, a collective missing members

  for (size_t i = 0; i < n; ++i) {
    events[i].t_end_ns = begin[i] + duration[i];
    events[i].t_begin_ns = begin[i];
  }
  return events;
}

}  // namespace scalelab
