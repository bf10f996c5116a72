// train(): a run from start to end. The parts (run/run_parts.h) in order — set up, probe, resume,
// the step loop, conclude, gather every rank's records, summarise, write — and the three ways the
// ranks are started (threads in this process, forked processes, mpirun).
#include "run/train.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/checkpoint/checkpoint.h"
#include "core/comm/backends.h"
#include "core/comm/shm/shm_group.h"
#include "core/error.h"
#include "run/run_parts.h"

namespace scalelab {

LoopResult run_steps(RunSetup& run, EquivalenceProbe* probe, Checkpointer& checkpointer, const ProgressFn& progress,
                     const std::atomic<bool>* stop) {
  const TrainConfig& c = run.config;
  EventBus& bus = run.bus;
  LoopResult loop;
  loop.first_step = checkpointer.resume(probe);
  if (c.trace_first_step >= 0 && c.trace_last_step < loop.first_step)
    throw UsageError("train", "--trace-steps " + std::to_string(c.trace_first_step) + ":" + std::to_string(c.trace_last_step) +
                                  " ends before step " + std::to_string(loop.first_step) + ", where --resume " + c.resume_path +
                                  " goes on from — choose a window from step " + std::to_string(loop.first_step) + " on");
  checkpointer.at_start(loop.first_step);
  loop.last_step = run.total;
  HostBatch batch;
  std::optional<BatchDump> dump;
  if (run.leader && !c.dump_batches_path.empty()) dump.emplace(run);
  const auto clock_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration eval_time{};
  for (int64_t step = loop.first_step; step < run.total; ++step) {
    if (stop && stop->load()) {
      loop.last_step = step;
      break;
    }
    const int64_t epoch = step / run.per_epoch;
    if (step % run.per_epoch == 0 || step == loop.first_step) run.loader->set_epoch(epoch);
    run.loader->fill(step % run.per_epoch, batch);
    if (dump) dump->record(step);

    const int64_t before_ns = bus.latest_end_ns();
    const double loss = run.strategy->train_step(batch, step);
    if (run.computes()) check_divergence(c, step, loss);  // a dry run's loss is NaN by design
    const int64_t step_ns = bus.latest_end_ns() - before_ns;
    if (probe) probe->step(batch, step, bus);
    checkpointer.after_step(step + 1);

    loop.losses.push_back(loss);
    bus.emit(Metric{step, "loss", loss});
    if (step_ns > 0) bus.emit(Metric{step, "samples_per_s", static_cast<double>(c.batch) * 1e9 / static_cast<double>(step_ns)});
    Progress p{step + 1, run.total, epoch + 1, run.epochs, loss, -1};
    const bool epoch_end = (step + 1) % run.per_epoch == 0 || step + 1 == run.total;
    if (epoch_end && run.computes()) {
      const auto t0 = std::chrono::steady_clock::now();
      run.leave_step();  // evaluation's downloads are not part of the step
      const HostWeights w = run.strategy->weights();
      p.accuracy = evaluate_accuracy(w, run.data.test.images.data(), run.data.test.labels.data(), run.data.test.count);
      bus.emit(Metric{step, "accuracy", p.accuracy});
      eval_time += std::chrono::steady_clock::now() - t0;
    }
    if (progress) progress(p);
  }
  checkpointer.at_end(loop.last_step);
  if (dump) dump->write();
  loop.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start - eval_time -
                                              checkpointer.time_spent())
                    .count();
  return loop;
}

namespace {

// One process's share of a run: every rank (threads launch, local_group null) or one rank (procs
// and mpi launches). `records` receives the whole run's records on rank 0 (its own elsewhere).
TrainResult train_ranks(const TrainConfig& config, EventBus& bus, const ProgressFn& progress, ProcessGroup* local_group,
                        const std::atomic<bool>* stop, Records* records = nullptr,
                        std::optional<WallClock::time_point> epoch = std::nullopt) {
  RunSetup run(config, bus, local_group, epoch);
  std::unique_ptr<EquivalenceProbe> probe;
  if (config.check_equivalence && run.leader) probe = std::make_unique<EquivalenceProbe>(run);
  Checkpointer checkpointer(run);
  const LoopResult loop = run_steps(run, probe.get(), checkpointer, progress, stop);
  TrainResult result = conclude(run, loop, probe.get());
  Records all = gather_records(run);
  summarize(loop, all, result);
  if (!local_group && run.devices_run < config.devices) result.devices_run = run.devices_run;
  write_outputs(run, result, all);
  if (records) *records = std::move(all);
  return result;
}

// What rank 0 of a procs launch hands back to the parent: the summary (as JSON, the losses with
// it) and the whole run's records, in an anonymous memory file both processes hold (no name, so
// nothing is left behind, whatever happens).
class ProcsReport {
 public:
  ProcsReport() : fd_(::memfd_create("scalelab-procs-report", MFD_CLOEXEC)) {
    if (fd_ < 0) throw Error("train", std::string("memfd_create for the ranks' report: ") + std::strerror(errno));
  }
  ~ProcsReport() { ::close(fd_); }
  ProcsReport(const ProcsReport&) = delete;
  ProcsReport& operator=(const ProcsReport&) = delete;

  // In rank 0.
  void write(const TrainResult& r, const Records& records) {
    nlohmann::json j = to_json(r);
    j["losses"] = r.losses;
    const std::string summary = j.dump();
    const std::vector<uint8_t> wire = encode_records(records);
    const uint64_t sizes[2] = {summary.size(), wire.size()};
    put(sizes, sizeof sizes);
    put(summary.data(), summary.size());
    put(wire.data(), wire.size());
  }
  // In the parent, once every rank has exited; the records go on `bus`.
  TrainResult read(const TrainConfig& config, EventBus& bus) {
    uint64_t sizes[2] = {0, 0};
    offset_ = 0;
    if (!get(sizes, sizeof sizes))
      throw Error("train", "--launch procs: rank 0 exited without reporting its summary (see its error above)");
    std::string summary(sizes[0], '\0');
    std::vector<uint8_t> wire(sizes[1]);
    if (!get(summary.data(), summary.size()) || !get(wire.data(), wire.size()))
      throw Error("train", "--launch procs: rank 0's report is truncated — it died while writing it");
    const Records records = decode_records(wire.data(), wire.size());
    for (const DeviceRecord& d : records.devices) bus.describe_device(d.index, d.description);
    for (const Event& e : records.events) bus.emit(e);
    for (const MemorySample& m : records.memory) bus.emit(m);
    for (const Metric& m : records.metrics) bus.emit(m);
    return from_json(nlohmann::json::parse(summary), config);
  }

 private:
  void put(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset_));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error("train", std::string("writing the ranks' report: ") + std::strerror(errno));
      p += n;
      size -= static_cast<size_t>(n);
      offset_ += static_cast<uint64_t>(n);
    }
  }
  bool get(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      const ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset_));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
      offset_ += static_cast<uint64_t>(n);
    }
    return true;
  }
  int fd_;
  uint64_t offset_ = 0;
};

}  // namespace

void check_config(const TrainConfig& config) {
  config.validate();
  find_strategy(config.strategy).validate(config);
}

TrainResult train(const TrainConfig& config, EventBus& bus, const ProgressFn& progress, const std::atomic<bool>* stop) {
  check_config(config);
  check_host_memory(config);  // a clear refusal with the figure, not std::bad_alloc mid-run
  check_output_paths(config);  // not after the last step
  const StrategyInfo& info = find_strategy(config.strategy);
  const int ranks = config.devices / std::max(1, info.devices_per_rank);
  if (config.launch == Launch::mpi) {
    if (!launched_by_mpirun())
      throw UsageError("train", "--launch mpi: start the ranks with `mpirun -np " + std::to_string(ranks) +
                                    " scalelab train ... --launch mpi --comm mpi`");
    if (config.comm != CommBackend::automatic && config.comm != CommBackend::mpi && config.comm != CommBackend::nccl)
      throw UsageError("train", "--launch mpi talks through --comm mpi (or nccl on GPUs), not " +
                                    std::string(comm_backend_name(config.comm)));
    auto group = make_mpi_group(comm_options(config));
    return train_ranks(config, bus, group->rank() == 0 ? progress : ProgressFn{}, group.get(), nullptr);
  }
  if (config.launch == Launch::procs) {
    if (config.comm != CommBackend::automatic && config.comm != CommBackend::shm)
      throw UsageError("train", "--launch procs talks through --comm shm, not " + std::string(comm_backend_name(config.comm)));
    if (!config.resume_path.empty()) {
      // A checkpoint that is damaged or does not fit: say so once, here, not from every rank.
      // (The ranks check again, the size of the training set included.)
      const CheckpointHeader saved = load_checkpoint(config.resume_path).header;
      check_resumable(saved, checkpoint_header(config, saved.train_count, 0), config.resume_path);
    }
    // Each rank is a forked process; rank 0 gathers everyone's records and reports to this one.
    ProcsReport report;
    const WallClock::time_point epoch = std::chrono::steady_clock::now();  // one time axis for every rank's clock
    launch_procs(ranks, config.shm_sharing, comm_options(config), [&](ProcessGroup& group) {
      EventBus rank_bus;
      Records records;
      TrainResult r = train_ranks(config, rank_bus, group.rank() == 0 ? progress : ProgressFn{}, &group, nullptr,
                                  &records, epoch);
      if (group.rank() == 0) report.write(r, records);
    });
    return report.read(config, bus);
  }
  return train_ranks(config, bus, progress, nullptr, stop);
}

int devices_allowed(const StrategyInfo& info, int wanted) {
  const DeviceCountRule& rule = info.device_count;
  const int devices = rule.max > 0 ? std::min(rule.max, wanted) : wanted;
  return std::max(rule.min, devices / rule.multiple_of * rule.multiple_of);
}

}  // namespace scalelab
