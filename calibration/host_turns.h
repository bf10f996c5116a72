#pragma once
// The cpu devices of a run take turns on the host's cores (HostCores, core/device/clock.h): one
// compute or copy op at a time, with all the cores. The sim prices each device as though it had the host
// to itself; take_turns_on_host re-times a priced run as one host would serve it — what
// `train --device cpu --predict` compares with the measured run.
#include <vector>

#include "core/trace/events.h"

namespace scalelab {

// Every event keeps its priced duration. An event starts no earlier than its priced start plus the
// delay of what it waited for — the event before it on its lane, and any event of its device that
// ended exactly when it began (in a priced run, an op begins when what it waits for ends) — and
// not before the event before it on its lane has ended. Compute- and copy-lane events then take
// the host's one server at the earliest gap that fits them, and so do sends and collectives: on the
// cpu device they are memcpys and sums by the ranks' threads, the cores' work. The events of one
// collective (one flow_id; each step of one a backend recorded in steps) move together, start when
// the last can and the cores are free, and hold the cores once for all of them; a recv (it waits,
// holding nothing) moves at least as far as its send.
//
// `share` says how the host's cores are shared. The cpu devices of one process take turns (one
// server, every core each op). Hogwild's workers are processes that take no turns: each computes
// with its share of the cores (OpenBLAS's threads, core/device/host_cores.h), so up to `servers` ops run
// at once, a GEMM at its share's speed (`gemm_stretch` times what the sim priced with every core)
// and an element-wise op or a copy at what it was priced (one thread either way).
//
// `handoff_ns`: when the cores pass from one host thread to another (Event::thread: another rank's op, or a
// collective's), the next waits that long for its thread to wake (the profile's turn_handoff_s).
// `gemm_after_handoff_ns`: a GEMM whose thread has just taken the cores from another takes that
// much longer (the profile's turn_gemm_extra_s).
//
// `collectives_beside_one_thread_ops`: a collective's ranks' threads run on the core that an
// element-wise op or a copy (one thread) leaves free — calibrate timed the collectives with one
// core so taken — as long as the step's data stay in the cache, so that neither waits on DRAM for
// the other. Then a collective holds a second track, which GEMMs (every core) also take, and not
// the turn. Otherwise (false) every collective holds the turn, as a compute op does.
struct HostShare {
  int servers = 1;
  double gemm_stretch = 1;
  int64_t handoff_ns = 0;
  int64_t gemm_after_handoff_ns = 0;
  bool collectives_beside_one_thread_ops = false;
  // `one_core_yield_gemm_mnk` > 0: the turn-taking threads share one core (the calibration's
  // turns_on_one_core), and a GEMM of more than this m·n·k (kBlasOneThreadMaxMnk) is where the
  // thread holding that core lets it go: OpenBLAS's caller yields while its helpers finish. Until
  // then the holder keeps the core, so where two threads take turns, one thread's ops that follow
  // one another (each priced to begin as the one before ended) are one turn, up to and with such a
  // GEMM. With three threads or more the others queue while the holder's GEMMs yield and come first:
  // every op is a turn. 0: every op is a turn.
  double one_core_yield_gemm_mnk = 0;
};
// How N worker processes, each with max(1, cores / N) of OpenBLAS's threads, share `cores`.
HostShare processes_share(int processes, int cores);

std::vector<Event> take_turns_on_host(std::vector<Event> events, const HostShare& share = {});

}  // namespace scalelab
