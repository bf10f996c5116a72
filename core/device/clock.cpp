#include "core/device/clock.h"

#include <pthread.h>

#include <algorithm>
#include <new>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device/host_cores.h"
#include "core/error.h"

namespace scalelab {

int64_t seconds_to_ns(double s) {
  if (!(s > 0)) return 0;
  if (!(s * 1e9 < static_cast<double>(kSimHorizonNs))) return kSimHorizonNs;
  return static_cast<int64_t>(std::llround(s * 1e9));
}

int64_t add_ns(int64_t a, int64_t b) {
  a = std::clamp<int64_t>(a, 0, kSimHorizonNs);
  b = std::clamp<int64_t>(b, 0, kSimHorizonNs);
  return b >= kSimHorizonNs - a ? kSimHorizonNs : a + b;
}

void HostCores::acquire() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    turn_.wait(lock, [&] { return serving_ == ticket; });
  }
  keep_turns_off_blas_helper_cores();
}

void HostCores::release() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++serving_;
  }
  turn_.notify_all();
}

HostCores& host_cores() {
  static HostCores* const cores = [] {
    static HostCores instance;
    // A forked child (a Hogwild worker, a procs rank) has only the thread that forked: a turn
    // another thread held or waited for at the fork would never come back there. It starts with
    // the cores free.
    ::pthread_atfork(nullptr, nullptr, [] { new (&instance) HostCores(); });
    return &instance;
  }();
  return *cores;
}

Interval WallClock::run(Lane lane, int64_t, const OpCost&, const std::function<void()>& work) {
  struct Turn {  // released even when the op throws
    HostCores* cores;
    explicit Turn(HostCores* c) : cores(c) { if (cores) cores->acquire(); }
    ~Turn() { if (cores) cores->release(); }
  } turn(lane == Lane::compute || lane == Lane::copy ? cores_ : nullptr);
  Interval i;
  i.begin_ns = now_ns();
  if (work) work();
  i.end_ns = now_ns();
  return i;
}

int64_t WallClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
}

Interval SimClock::run(Lane lane, int64_t ready_ns, const OpCost& cost, const std::function<void()>& work) {
  if (work) work();
  OpCost host = cost;
  host.host_bytes = host_bytes_between_touches(cost.host_bytes, cost.held_bytes, cost.host_devices, cost.shared_bytes);
  const double seconds = model_->seconds(host);
  // A peer copy moves its bytes over this device's link at the link's rate, but for its α.
  const double link_Bps = model_->profile().intra_node.bandwidth_Bps;
  const double share = cost.cls == OpClass::copy_peer && seconds > 0 && link_Bps > 0
                           ? std::min(1.0, cost.bytes / (link_Bps * seconds))
                           : 0.0;
  std::lock_guard<std::mutex> lock(mutex_);
  return place(lane, ready_ns, seconds_to_ns(seconds), share);
}

Interval SimClock::occupy(Lane lane, int64_t begin_ns, int64_t duration_ns, double link_share) {
  std::lock_guard<std::mutex> lock(mutex_);
  return place(lane, begin_ns, duration_ns, std::clamp(link_share, 0.0, 1.0));
}

Interval SimClock::place(Lane lane, int64_t begin_ns, int64_t duration_ns, double share) {
  const int me = static_cast<int>(lane);
  int64_t& free = lane_free_ns_[me];
  Interval i;
  i.begin_ns = std::max(free, begin_ns);
  i.end_ns = add_ns(i.begin_ns, duration_ns);
  if (share > 0) {
    // Walk the link's ops on the other lanes in time order: between them this op runs at full
    // speed, during each at what that op leaves of the link. `work`: its time still to run alone.
    std::vector<LinkUse> others;
    for (int l = 0; l < kLaneCount; ++l)
      if (l != me)
        for (const LinkUse& u : link_uses_[l])
          if (u.end_ns > i.begin_ns) others.push_back(u);
    std::sort(others.begin(), others.end(), [](const LinkUse& a, const LinkUse& b) { return a.begin_ns < b.begin_ns; });
    double t = static_cast<double>(i.begin_ns), work = static_cast<double>(duration_ns);
    for (const LinkUse& u : others) {
      if (work <= 0) break;
      if (static_cast<double>(u.end_ns) <= t) continue;  // past already (uses of two other lanes)
      if (u.begin_ns > t) {
        const double alone = static_cast<double>(u.begin_ns) - t;
        if (work <= alone) break;
        work -= alone;
        t = static_cast<double>(u.begin_ns);
      }
      const double rate = std::min(1.0, (1.0 - u.share) / share);
      const double span = static_cast<double>(u.end_ns) - t;
      if (rate * span >= work) {
        t += work / rate;
        work = 0;
      } else {
        work -= rate * span;
        t = static_cast<double>(u.end_ns);
      }
    }
    i.end_ns = std::llround(std::min(t + work, static_cast<double>(kSimHorizonNs)));
  }
  if (i.end_ns >= kSimHorizonNs) {
    char what[256];
    std::snprintf(what, sizeof what, "an op of %.3g s, begun at %.3g s of simulated time, ends past the sim clock's horizon (2^62 ns, 146 years)",
                  static_cast<double>(duration_ns) / 1e9, static_cast<double>(i.begin_ns) / 1e9);
    throw Error("sim", std::string(what) + " — the profile prices this run absurdly slowly: check its bandwidths, peaks and "
                                           "efficiencies (profiles/README.md), or run a smaller model or fewer steps");
  }
  if (share > 0) link_uses_[me].push_back({i.begin_ns, i.end_ns, share});
  free = i.end_ns;
  // Peer copies use the link from the copy lane, calls from the comm lane; an op starts once its
  // lane is free, so the other lane's uses that ended by then are past.
  const int copy = static_cast<int>(Lane::copy), comm = static_cast<int>(Lane::comm);
  for (auto [l, other] : {std::pair{copy, comm}, std::pair{comm, copy}}) {
    std::deque<LinkUse>& uses = link_uses_[l];
    while (!uses.empty() && (uses.front().end_ns <= lane_free_ns_[other] || uses.size() > kLinkHistory))
      uses.pop_front();
  }
  return i;
}

int64_t SimClock::lane_free_ns(Lane lane) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lane_free_ns_[static_cast<int>(lane)];
}

int64_t SimClock::now_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return *std::max_element(lane_free_ns_.begin(), lane_free_ns_.end());
}

}  // namespace scalelab
