// The mpi backend under mpirun (one rank per process): every collective against its closed form,
// also cut into pieces as tensors beyond MPI's int counts are; async calls; point-to-point flow ids
// that agree across processes; sub-groups (split); and a rank that skips an all_reduce, which every
// other rank must hear about by name within the timeout.
//
// Not GoogleTest: under mpirun every rank runs this program, so each rank collects what went
// wrong, rank 0 gathers it all and prints it, and every rank exits 1 if anything failed anywhere.
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/release/tests/test_mpi_comm
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../comm_checks.h"
#include "core/comm/backends.h"
#include "core/error.h"

using namespace scalelab;
using Ms = std::chrono::milliseconds;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every collective at awkward counts and every dtype, and an async all_reduce of m floats.
std::vector<std::string> closed_form(ProcessGroup& pg, Device& dev, const char* label, int64_t m) {
  comm_test::CollectiveChecker check(pg, dev);
  auto failures = check.run_all({0, 1, 7, 1003});
  Tensor t = comm_test::make_tensor(dev, check.inputs(m, pg.rank()), DType::f32);
  auto work = pg.all_reduce_async(t, ReduceOp::sum);
  work->wait();
  if (!work->is_completed()) failures.push_back("async all_reduce: wait() returned before completion");
  const auto got = comm_test::read_tensor(dev, t);
  for (int64_t i = 0; i < m; i += 4099)
    if (got[static_cast<size_t>(i)] != check.reduced(i, ReduceOp::sum)) {
      failures.push_back("async all_reduce of " + std::to_string(m) + " floats: element " + std::to_string(i) + " is " +
                         std::to_string(got[static_cast<size_t>(i)]));
      break;
    }
  for (auto& f : failures) f = std::string(label) + ": " + f;
  return failures;
}

// Sub-groups (split): the ranks of one parity make a group. Every collective gives its closed form
// over the group's ranks; its send / recv flow ids agree across processes, and its events carry the
// group's name and world-rank peers. A split whose ranks disagree is refused on every rank, and
// the world's group goes on.
std::vector<std::string> sub_groups(ProcessGroup& world, Device& dev) {
  const int n = world.size(), r = world.rank();
  std::vector<int> members;
  for (int k = r % 2; k < n; k += 2) members.push_back(k);
  auto half = world.split(members, "half");
  std::vector<std::string> failures;
  if (half->size() != static_cast<int>(members.size()) || half->rank() != r / 2)
    failures.push_back("split: rank " + std::to_string(r) + " is rank " + std::to_string(half->rank()) + " of " +
                       std::to_string(half->size()) + ", expected " + std::to_string(r / 2) + " of " +
                       std::to_string(members.size()));
  comm_test::CollectiveChecker check(*half, dev);
  for (const auto& f : check.run_all({0, 1, 7, 1003})) failures.push_back("half: " + f);
  EventBus bus;
  auto traced = comm_test::traced_cpu_device(bus);
  for (const auto& f : comm_test::check_flow_ids(*half, *traced, bus)) failures.push_back("half: " + f);
  const int next = members[static_cast<size_t>((half->rank() + 1) % half->size())];
  for (const Event& e : bus.events())
    if (e.role == Role::send && (e.group != "half" || e.peer != next))
      failures.push_back("half: a send traced in group '" + e.group + "' to " + std::to_string(e.peer) +
                         ", expected group 'half' to world rank " + std::to_string(next));
  if (n > 1) {
    std::vector<int> bad{r};  // rank 0 names every rank, the others themselves alone
    if (r == 0)
      for (int k = 1; k < n; ++k) bad.push_back(k);
    std::string error;
    try {
      world.split(bad, "bad");
    } catch (const Error& e) {
      error = e.what();
    }
    if (error.find("mpi: split") == std::string::npos)
      failures.push_back("a split whose ranks disagree: rank " + std::to_string(r) + " expected an error, got: " +
                         (error.empty() ? "none" : error));
  }
  world.barrier();
  return failures;
}

// The last rank skips an all_reduce: the others must get an Error naming it, after about the
// timeout. It then arrives late, while the others wait in a barrier of a fresh group, so the
// all_reduce they gave up on completes and no rank leaves MPI with a collective half done.
std::vector<std::string> skipped_rank(Device& dev) {
  std::vector<std::string> failures;
  CommOptions quick;
  quick.timeout = Ms(1000);
  auto a = make_mpi_group(quick);
  a->set_device(&dev);
  const int n = a->size(), r = a->rank(), last = n - 1;
  comm_test::CollectiveChecker check(*a, dev);
  Tensor t = comm_test::make_tensor(dev, check.inputs(16, r), DType::f32);
  a->all_reduce(t);  // everyone is here once
  Tensor u = comm_test::make_tensor(dev, check.inputs(16, r), DType::f32);
  if (n > 1 && r != last) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      a->all_reduce(u);
    } catch (const Error& e) {
      error = e.what();
    }
    const double waited = seconds_since(t0);
    const std::string who = "rank(s) " + std::to_string(last) + ",";
    for (const char* want : {"[comm]", "all_reduce", who.c_str(), "--comm-timeout"})
      if (error.find(want) == std::string::npos)
        failures.push_back("skipped all_reduce: rank " + std::to_string(r) + " expected an error with '" + want +
                           "', got: " + (error.empty() ? "no error" : error));
    if (waited < 0.95 || waited > 15)
      failures.push_back("skipped all_reduce: rank " + std::to_string(r) + " gave up after " + std::to_string(waited) +
                         " s, expected about the 1 s timeout");
    // The group is now unusable, and says so at once.
    std::string later;
    const auto t1 = std::chrono::steady_clock::now();
    try {
      a->barrier();
    } catch (const Error& e) {
      later = e.what();
    }
    if (later.find("earlier") == std::string::npos || seconds_since(t1) > 1.0)
      failures.push_back("after a timeout, barrier on rank " + std::to_string(r) +
                         " should fail at once naming the earlier error, got: " + (later.empty() ? "no error" : later));
    if (r == 0) std::printf("# the error a waiting rank gets: %s\n", error.c_str());
  }
  CommOptions patient;
  patient.timeout = Ms(30000);
  auto b = make_mpi_group(patient);
  if (n > 1 && r == last) {
    a->all_reduce(u);  // late, but the others' MPI still holds their half of it
    const auto got = comm_test::read_tensor(dev, u);
    for (int64_t i = 0; i < 16; ++i)
      if (got[static_cast<size_t>(i)] != check.reduced(i, ReduceOp::sum)) {
        failures.push_back("the late all_reduce on rank " + std::to_string(r) + ": element " + std::to_string(i) +
                           " is " + std::to_string(got[static_cast<size_t>(i)]));
        break;
      }
  }
  b->barrier();
  return failures;
}

// Rank 0 gets every rank's failures (as i32 characters, gathered); every rank learns the total.
int64_t report(ProcessGroup& pg, Device& dev, const std::vector<std::string>& mine) {
  std::string text;
  for (const auto& f : mine) text += "[rank " + std::to_string(pg.rank()) + "] " + f + "\n";
  Tensor len = comm_test::make_tensor(dev, {static_cast<float>(text.size()), static_cast<float>(mine.size())}, DType::f32);
  Tensor longest = comm_test::make_tensor(dev, {0, 0}, DType::f32);
  pg.all_reduce(len, longest, ReduceOp::max);
  Tensor count = comm_test::make_tensor(dev, {static_cast<float>(mine.size())}, DType::f32);
  pg.all_reduce(count, ReduceOp::sum);
  const int64_t total = static_cast<int64_t>(comm_test::read_tensor(dev, count)[0]);
  const auto width = static_cast<int64_t>(comm_test::read_tensor(dev, longest)[0]);
  if (total == 0 || width == 0) return total;
  std::vector<int32_t> chars(static_cast<size_t>(width), 0);
  for (size_t i = 0; i < text.size(); ++i) chars[i] = static_cast<unsigned char>(text[i]);
  Tensor in = dev.empty({width}, DType::i32, MemoryCategory::comm_buffers, "failures");
  dev.upload({"failures"}, in, chars.data());
  Tensor out = pg.rank() == 0 ? dev.empty({width * pg.size()}, DType::i32, MemoryCategory::comm_buffers, "failures")
                              : Tensor();
  pg.gather(in, out, 0);
  if (pg.rank() == 0) {
    std::vector<int32_t> all(static_cast<size_t>(width * pg.size()));
    dev.download({"failures"}, all.data(), out);
    for (int32_t c : all)
      if (c) std::fputc(c, stderr);
  }
  return total;
}

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> failures;
  auto devices = make_devices(DeviceOptions{});
  Device& dev = *devices[0];
  std::unique_ptr<ProcessGroup> pg;
  try {
    pg = make_mpi_group();
    pg->set_device(&dev);
    auto f = closed_form(*pg, dev, "whole tensors", (1 << 20) + 5);
    failures.insert(failures.end(), f.begin(), f.end());

    // Counts beyond INT_MAX are cut into pieces: the same checks with pieces of 5 elements.
    ::setenv("SCALELAB_MPI_MAX_COUNT", "5", 1);
    auto pieces = make_mpi_group();
    ::unsetenv("SCALELAB_MPI_MAX_COUNT");
    pieces->set_device(&dev);
    f = closed_form(*pieces, dev, "in pieces of 5", 4099);
    failures.insert(failures.end(), f.begin(), f.end());

    // A send and its recv carry the same flow id, though the ranks are processes that never
    // tell each other: a device that records its events checks it.
    EventBus bus;
    auto traced = comm_test::traced_cpu_device(bus);
    f = comm_test::check_flow_ids(*pg, *traced, bus);
    failures.insert(failures.end(), f.begin(), f.end());

    f = sub_groups(*pg, dev);
    failures.insert(failures.end(), f.begin(), f.end());

    f = skipped_rank(dev);
    failures.insert(failures.end(), f.begin(), f.end());
  } catch (const std::exception& e) {
    // The group may be unusable now: say it here, on this rank, and fail.
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", pg ? pg->rank() : -1, e.what());
    return 1;
  }

  try {
    auto final_group = make_mpi_group();
    final_group->set_device(&dev);
    const int64_t total = report(*final_group, dev, failures);
    if (final_group->rank() == 0)
      std::printf("mpi_comm np=%d: %s (%.2f s)\n", final_group->size(),
                  total == 0 ? "every check passed" : (std::to_string(total) + " failure(s)").c_str(), seconds_since(t0));
    return total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] FAILED while reporting: %s\n", pg->rank(), e.what());
    return 1;
  }
}
