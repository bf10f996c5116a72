#pragma once
// The ranks of a lab's check, as threads of the harness: a threads process group each and a device
// each — cpu, or sim devices of a hardware profile (real numerics on the host either way) — with
// their events on one bus. Short timeouts: a submission that deadlocks fails in seconds.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/threads/threads_group.h"
#include "core/device/device.h"
#include "core/device/sim/profile.h"
#include "core/trace/events.h"

namespace lab {

struct World {
  scalelab::EventBus bus;  // first: the devices emit on it until they are gone
  std::vector<std::unique_ptr<scalelab::Device>> devices;
  std::vector<std::unique_ptr<scalelab::ProcessGroup>> groups;
};

// `own_hosts`: each rank's host waits for its own device only (one process per GPU, as DDP runs),
// so simulated times do not depend on how this machine schedules the rank threads.
inline std::unique_ptr<World> make_world(int n, const std::string& profile, std::chrono::milliseconds timeout,
                                         bool own_hosts = false) {
  auto w = std::make_unique<World>();
  scalelab::CommOptions copt;
  copt.timeout = timeout;
  w->groups = scalelab::make_threads_groups(n, copt);
  scalelab::DeviceOptions o;
  o.count = n;
  o.bus = &w->bus;
  if (!profile.empty()) {
    o.kind = scalelab::DeviceKind::sim;
    o.profile = scalelab::load_profile(profile);
  }
  w->devices = scalelab::make_devices(o);
  for (int r = 0; r < n; ++r) {
    w->groups[static_cast<size_t>(r)]->set_device(w->devices[static_cast<size_t>(r)].get());
    if (own_hosts) w->devices[static_cast<size_t>(r)]->use_own_host();
  }
  return w;
}

}  // namespace lab
