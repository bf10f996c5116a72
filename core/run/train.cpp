#include "core/run/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "core/comm/backends.h"
#include "core/comm/shm/shm_group.h"
#include "core/comm/threads/threads_group.h"
#include "core/error.h"
#include "core/run/checkpoint.h"
#include "core/run/ranks.h"
#include "core/trace/chrome_trace.h"
#include "strategies/strategy.h"

namespace scalelab {


namespace {

DataSplit load_data(const TrainConfig& c, const ModelSpec& spec) {
  if (c.dataset == "synthetic")
    return make_synthetic(c.synthetic_train, c.synthetic_test, spec.inputs(), static_cast<int>(spec.outputs()), c.seed);
  DataSplit d = load_fashion_mnist(c.data_dir.empty() ? default_fashion_mnist_dir() : c.data_dir);
  if (spec.inputs() != d.train.features || spec.outputs() != d.train.classes)
    throw UsageError("model", "--model " + spec.text + " has " + std::to_string(spec.inputs()) + " inputs and " +
                                  std::to_string(spec.outputs()) + " outputs, but " + d.train.name + " has " +
                                  std::to_string(d.train.features) + " features and " +
                                  std::to_string(d.train.classes) + " classes — use mlp:" +
                                  std::to_string(d.train.features) + "-...-" + std::to_string(d.train.classes));
  return d;
}

}  // namespace

namespace {

CommOptions comm_options(const TrainConfig& c) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(c.comm_timeout_ms);
  o.algorithm = parse_comm_algorithm(c.comm_algo);
  return o;
}

// The process groups of a threads launch: every rank in this process.
std::vector<std::unique_ptr<ProcessGroup>> local_groups(const TrainConfig& c, int ranks) {
  const std::string comm = c.comm.empty() ? (c.device == DeviceKind::cuda ? "nccl" : "threads") : c.comm;
  if (comm == "threads") return make_threads_groups(ranks, comm_options(c));
  if (comm == "nccl") {
    NcclBootstrap boot;
    boot.unique_id_file = (std::filesystem::temp_directory_path() /
                           ("scalelab-nccl-id-" + std::to_string(::getpid())))
                              .string();
    std::vector<std::unique_ptr<ProcessGroup>> groups(static_cast<size_t>(ranks));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;  // ncclCommInitRank blocks until every rank has called it
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          groups[r] = make_nccl_group(r, ranks, r, boot, comm_options(c));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    std::error_code ec;
    std::filesystem::remove(boot.unique_id_file, ec);
    for (const auto& e : errors)
      if (!e.empty()) throw Error("train", e);
    return groups;
  }
  throw UsageError("train", "--comm " + comm + " with --launch threads: the ranks are threads of this process — use "
                            "--comm threads (or nccl on GPUs), or --launch procs for shm, --launch mpi for mpi");
}

}  // namespace

namespace {

// The --resume checkpoint, verified and known to fit this run (none without --resume). Throws
// UsageError for checkpoint options that cannot give an exact continuation.
std::optional<Checkpoint> checkpoint_to_resume(const TrainConfig& c, int64_t train_count, int64_t total) {
  if (c.dry_run && (!c.checkpoint_path.empty() || !c.resume_path.empty()))
    throw UsageError("checkpoint", "--dry-run computes no weights to save or continue — drop --checkpoint / --resume");
  if (c.no_sync > 1 && !c.checkpoint_path.empty() &&
      (c.checkpoint_every % c.no_sync != 0 || total % c.no_sync != 0))
    throw UsageError("checkpoint", "--no-sync " + std::to_string(c.no_sync) +
                                       " accumulates gradients that a checkpoint does not hold — make --checkpoint-every "
                                       "and the run's steps multiples of " + std::to_string(c.no_sync));
  if (c.resume_path.empty()) return std::nullopt;
  Checkpoint ck = load_checkpoint(c.resume_path);
  check_resumable(ck.header, checkpoint_header(c, train_count, 0), c.resume_path);
  if (ck.header.step > total)
    throw UsageError("checkpoint", c.resume_path + ": is at step " + std::to_string(ck.header.step) +
                                       ", past this run's " + std::to_string(total) +
                                       " steps — raise --steps (it counts from step 0)");
  return ck;
}

}  // namespace

// One process's part of a run: every rank (threads launch, local_group null) or one rank
// (procs and mpi launches: local_group is this process's).
TrainResult train_ranks(const TrainConfig& config, EventBus& bus, const ProgressFn& progress, ProcessGroup* local_group,
                        const std::atomic<bool>* stop) {
  const ModelSpec spec = ModelSpec::parse(config.model);
  const StrategyInfo& info = find_strategy(config.strategy);
  const int per_rank = info.devices_per_rank;

  DeviceOptions dopt;
  dopt.kind = config.device;
  dopt.count = config.devices;
  dopt.dry_run = config.dry_run;
  dopt.bus = &bus;
  if (config.device == DeviceKind::sim) dopt.profile = load_profile(config.hw);
  if (local_group) {
    if (local_group->size() * per_rank != config.devices)
      throw UsageError("train", "--devices " + std::to_string(config.devices) + " but " +
                                    std::to_string(local_group->size()) + " ranks were started, with " +
                                    std::to_string(per_rank) + " device(s) each — start " +
                                    std::to_string(config.devices / per_rank) + " ranks (mpirun -np)");
    dopt.count = per_rank;
    dopt.first_index = local_group->rank() * per_rank;
  }
  auto devices = make_devices(dopt);

  DataSplit data = load_data(config, spec);
  Loader loader(data.train, config.batch, config.seed);
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t total = config.steps > 0 ? config.steps : config.epochs * per_epoch;
  const int64_t epochs = (total + per_epoch - 1) / per_epoch;

  std::unique_ptr<RankSet> ranks;
  std::vector<Device*> device_list;
  for (auto& d : devices) device_list.push_back(d.get());
  if (per_rank > 0) {
    if (config.devices % per_rank != 0)
      throw UsageError(config.strategy, "--devices " + std::to_string(config.devices) + " must be a multiple of " +
                                            std::to_string(per_rank) + " (devices per rank)");
    if (local_group) ranks = std::make_unique<RankSet>(device_list, *local_group);
    else ranks = std::make_unique<RankSet>(device_list, local_groups(config, config.devices / per_rank));
  }
  StrategyContext ctx{config, device_list, bus, init_weights(spec, config.seed), ranks.get()};
  std::unique_ptr<Strategy> strategy = info.make(ctx);
  const bool leader = !local_group || local_group->rank() == 0;

  // --check-equivalence: `single` on its own device, the same global batches, its own event bus
  // (it is the yardstick, not part of the run).
  EventBus reference_bus;
  std::vector<std::unique_ptr<Device>> reference_devices;
  std::unique_ptr<Strategy> reference;
  TrainConfig reference_config = config;
  if (config.check_equivalence && leader) {
    reference_config.strategy = "single";
    reference_config.devices = 1;
    DeviceOptions ropt = dopt;
    ropt.count = 1;
    ropt.first_index = 0;
    ropt.bus = &reference_bus;
    reference_devices = make_devices(ropt);
    StrategyContext rctx{reference_config, {reference_devices[0].get()}, reference_bus, init_weights(spec, config.seed)};
    reference = find_strategy("single").make(rctx);
  }

  TrainResult r;
  r.config = config;
  r.hw_name = config.device == DeviceKind::sim ? dopt.profile.name : "";
  r.simulated = config.device == DeviceKind::sim;
  const bool computes = devices.front()->computes();

  // Checkpoints (core/run/checkpoint.h). --resume: every process reads and verifies the file, and
  // the strategy takes the whole state (sharding it as it likes); the run goes on at the saved
  // step — the loader's order is a function of (seed, epoch), so that is the same data too.
  // --checkpoint: every --checkpoint-every steps and after the last, all ranks give their part of
  // the state (a strategy may need collectives for it), rank 0 writes, the others wait.
  int64_t first_step = 0;
  if (std::optional<Checkpoint> ck = checkpoint_to_resume(config, data.train.count, total)) {
    for (auto& d : devices) d->set_step(-1);
    strategy->load_state(ck->state);
    if (reference) reference->load_state(ck->state);
    first_step = ck->header.step;
  }
  std::chrono::steady_clock::duration checkpoint_time{};
  int64_t saved_step = -1;
  auto save = [&](int64_t steps_done) {
    auto t0 = std::chrono::steady_clock::now();
    for (auto& d : devices) d->set_step(-1);  // the state's downloads are not part of a step
    Checkpoint ck{checkpoint_header(config, data.train.count, steps_done), strategy->state()};
    if (leader) save_checkpoint(config.checkpoint_path, ck);
    if (local_group) local_group->barrier();  // no rank runs ahead before the file is in place
    saved_step = steps_done;
    checkpoint_time += std::chrono::steady_clock::now() - t0;
  };

  HostBatch batch;
  auto clock_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration eval_time{};
  int64_t last_step = total;  // one past the last step run (earlier when stopped)
  for (int64_t step = first_step; step < total; ++step) {
    if (stop && stop->load()) {
      last_step = step;
      break;
    }
    const int64_t epoch = step / per_epoch;
    if (step % per_epoch == 0 || step == first_step) loader.set_epoch(epoch);
    loader.fill(step % per_epoch, batch);
    const int64_t before_ns = bus.latest_end_ns();
    double loss = strategy->train_step(batch, step);
    const int64_t step_ns = bus.latest_end_ns() - before_ns;
    if (reference) bus.emit(Metric{step, "loss_single", reference->train_step(batch, step)});
    if (config.checkpoint_every > 0 && (step + 1) % config.checkpoint_every == 0) save(step + 1);
    r.losses.push_back(loss);
    bus.emit(Metric{step, "loss", loss});
    if (step_ns > 0) bus.emit(Metric{step, "samples_per_s", static_cast<double>(config.batch) * 1e9 / static_cast<double>(step_ns)});
    Progress p{step + 1, total, epoch + 1, epochs, loss, -1};
    const bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (epoch_end && computes) {
      auto t0 = std::chrono::steady_clock::now();
      for (auto& d : devices) d->set_step(-1);  // evaluation's downloads are not part of the step
      HostWeights w = strategy->weights();
      p.accuracy = evaluate_accuracy(w, data.test.images.data(), data.test.labels.data(), data.test.count);
      bus.emit(Metric{step, "accuracy", p.accuracy});
      eval_time += std::chrono::steady_clock::now() - t0;
    }
    if (progress) progress(p);
  }
  r.stopped = last_step < total;
  if (!config.checkpoint_path.empty() && saved_step != last_step) save(last_step);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start - eval_time -
                                                      checkpoint_time)
                            .count();

  r.steps = last_step - first_step;  // a resumed (or stopped) run reports the steps it ran
  r.samples = r.steps * config.batch;
  const size_t tail = std::min<size_t>(100, r.losses.size());
  double sum = 0;
  for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) sum += r.losses[i];
  r.final_loss = tail ? sum / static_cast<double>(tail) : 0;

  const AmpReport amp = strategy->amp_report();
  r.loss_scale = amp.loss_scale;
  r.skipped_steps = amp.skipped_steps;

  for (auto& d : devices) d->set_step(-1);
  HostWeights final_weights = strategy->weights();
  if (reference) {
    r.max_rel_diff = max_relative_difference(final_weights, reference->weights());
    bus.emit(Metric{last_step - 1, "max_rel_diff", r.max_rel_diff});
  }
  if (computes) {
    r.test_accuracy = evaluate_accuracy(final_weights, data.test.images.data(), data.test.labels.data(), data.test.count);
    r.weights_checksum = weights_checksum(final_weights);
    if (r.stopped && last_step > first_step) bus.emit(Metric{last_step - 1, "accuracy", r.test_accuracy});
  }

  std::vector<Event> events = bus.events();
  std::vector<MemorySample> memory = bus.memory();
  r.metrics = compute_metrics(events, memory, static_cast<int>(devices.size()));
  if (r.simulated) {
    // From the first op of the first step to the end of the last op of the last step: setting up
    // (the initial weight upload) and the final download for evaluation are not training.
    int64_t begin = INT64_MAX, end = 0;
    for (const Event& e : events)
      if (e.step >= 0) {
        begin = std::min(begin, e.t_begin_ns);
        end = std::max(end, e.t_end_ns);
      }
    r.time_s = end > begin ? static_cast<double>(end - begin) * 1e-9 : 0;
  } else {
    r.time_s = wall_s;
  }
  r.samples_per_s = r.time_s > 0 ? static_cast<double>(r.samples) / r.time_s : 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceSummary s;
    s.name = devices[i]->name();
    const DeviceMetrics& m = r.metrics.per_device[static_cast<size_t>(devices[i]->index())];
    s.busy_pct = m.busy_pct;
    s.comm_pct = m.comm_pct;
    s.idle_pct = m.idle_pct;
    for (int c = 0; c < kMemoryCategoryCount; ++c) s.peak_bytes[c] = devices[i]->memory().peak(static_cast<MemoryCategory>(c));
    s.peak_total = devices[i]->memory().peak_total();
    s.capacity = devices[i]->memory().capacity();
    r.per_device.push_back(s);
  }

  if (!leader) return r;  // rank 0 reports for everyone
  if (!config.trace_path.empty()) {
    TraceInfo ti;
    for (auto& d : devices) ti.device_names.push_back(d->name());
    ti.title = "scalelab train --strategy " + config.strategy + " --device " + device_kind_name(config.device) +
               (r.hw_name.empty() ? "" : " --hw " + r.hw_name) + " --model " + config.model;
    ti.simulated = r.simulated;
    write_chrome_trace(config.trace_path, events, memory, bus.metrics(), ti);
  }
  if (!config.json_path.empty()) write_file_atomically(config.json_path, to_json(r).dump(2) + "\n", "train");
  return r;
}

nlohmann::json to_json(const TrainResult& r) {
  using nlohmann::json;
  json j;
  j["strategy"] = r.config.strategy;
  j["device"] = device_kind_name(r.config.device);
  j["hw"] = r.hw_name.empty() ? json(nullptr) : json(r.hw_name);
  j["devices"] = r.config.devices;
  j["model"] = r.config.model;
  j["dataset"] = r.config.dataset;
  j["batch"] = r.config.batch;
  j["optimizer"] = r.config.optimizer.kind;
  j["seed"] = r.config.seed;
  j["steps"] = r.steps;
  j["final_loss"] = std::isfinite(r.final_loss) ? json(r.final_loss) : json(nullptr);
  j["test_accuracy"] = r.test_accuracy >= 0 ? json(r.test_accuracy) : json(nullptr);
  j["time_s"] = r.time_s;
  j["time_kind"] = r.simulated ? "simulated" : "measured";
  j["samples_per_s"] = r.samples_per_s;
  j["weights_checksum"] = r.weights_checksum.empty() ? json(nullptr) : json(r.weights_checksum);
  j["launch"] = r.config.launch;
  j["stopped"] = r.stopped;
  j["equivalence"] = r.max_rel_diff >= 0 ? json{{"max_rel_diff", r.max_rel_diff}} : json(nullptr);
  j["amp"] = r.config.amp == "off" ? json(nullptr)
                                   : json{{"dtype", r.config.amp},
                                          {"loss_scale", r.loss_scale},
                                          {"skipped_steps", r.skipped_steps}};
  j["bubble_fraction"] = r.metrics.bubble_fraction;
  j["overlap_pct"] = r.metrics.overlap_pct;
  j["bytes_moved"] = r.metrics.bytes_moved;
  json per = json::array();
  for (const DeviceSummary& s : r.per_device) {
    json peak;
    for (int c = 0; c < kMemoryCategoryCount; ++c) peak[memory_category_name(static_cast<MemoryCategory>(c))] = s.peak_bytes[c];
    peak["total"] = s.peak_total;
    per.push_back({{"device", s.name},
                   {"busy_pct", s.busy_pct},
                   {"comm_pct", s.comm_pct},
                   {"idle_pct", s.idle_pct},
                   {"capacity_bytes", s.capacity},
                   {"peak_bytes", peak}});
  }
  j["per_device"] = per;
  return j;
}

std::string format_summary(const TrainResult& r) {
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf, "strategy %s on %d × %s%s, model %s, %s\n", r.config.strategy.c_str(), r.config.devices,
                device_kind_name(r.config.device), r.hw_name.empty() ? "" : (" (" + r.hw_name + ")").c_str(),
                r.config.model.c_str(), r.config.dataset.c_str());
  s += buf;
  if (std::isfinite(r.final_loss)) {
    std::snprintf(buf, sizeof buf, "  final loss      %.4f (mean of the last %zu steps)\n", r.final_loss,
                  std::min<size_t>(100, r.losses.size()));
    s += buf;
  } else {
    s += "  final loss      — (dry run: no numerics)\n";
  }
  if (r.test_accuracy >= 0) {
    std::snprintf(buf, sizeof buf, "  test accuracy   %.4f\n", r.test_accuracy);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  time            %.3f s %s for %lld steps (%.3f ms/step)\n", r.time_s,
                r.simulated ? "simulated" : "measured", static_cast<long long>(r.steps),
                r.steps ? 1e3 * r.time_s / static_cast<double>(r.steps) : 0.0);
  s += buf;
  std::snprintf(buf, sizeof buf, "  throughput      %.0f samples/s\n", r.samples_per_s);
  s += buf;
  if (!r.weights_checksum.empty()) s += "  weights         checksum " + r.weights_checksum + "\n";
  if (r.max_rel_diff >= 0) {
    std::snprintf(buf, sizeof buf, "  equivalence     max relative weight difference to single %.3g\n", r.max_rel_diff);
    s += buf;
  }
  if (r.config.amp == "fp16") {
    std::snprintf(buf, sizeof buf,
                  "  mixed precision fp16, f32 master weights; loss scale %g, %lld of %lld steps skipped (overflow)\n",
                  r.loss_scale, static_cast<long long>(r.skipped_steps), static_cast<long long>(r.steps));
    s += buf;
  } else if (r.config.amp == "bf16") {
    s += "  mixed precision bf16, f32 master weights; no loss scaling\n";
  }
  if (r.config.devices > 1) {
    std::snprintf(buf, sizeof buf, "  overlap         %.1f%% of communication hidden under compute; bubbles %.1f%%\n",
                  r.metrics.overlap_pct, 100 * r.metrics.bubble_fraction);
    s += buf;
  }
  s += "  per device      busy%  comm%  idle%   peak memory: params grads optimizer activations comm_buffers workspace = total\n";
  for (const DeviceSummary& d : r.per_device) {
    std::snprintf(buf, sizeof buf, "    %-22s %5.1f  %5.1f  %5.1f   ", d.name.c_str(), d.busy_pct, d.comm_pct, d.idle_pct);
    s += buf;
    for (int c = 0; c < kMemoryCategoryCount; ++c) s += format_bytes(d.peak_bytes[c]) + (c + 1 < kMemoryCategoryCount ? " | " : "");
    s += " = " + format_bytes(d.peak_total) + "\n";
  }
  return s;
}

TrainResult train(const TrainConfig& config, EventBus& bus, const ProgressFn& progress, const std::atomic<bool>* stop) {
  config.validate();
  const StrategyInfo& info = find_strategy(config.strategy);
  if (info.devices_per_rank == 0 && config.launch != "threads")
    throw UsageError("train", "--launch " + config.launch + " starts one process per rank, but " + config.strategy +
                                  (config.strategy == "multiprocessing" ? " forks its own worker processes"
                                                                        : " drives every device from one controller") +
                                  " — drop --launch");
  if (config.launch == "mpi") {
    if (!launched_by_mpirun())
      throw UsageError("train", "--launch mpi: start the ranks with `mpirun -np " +
                                    std::to_string(config.devices / std::max(1, info.devices_per_rank)) +
                                    " scalelab train ... --launch mpi --comm mpi`");
    if (!config.comm.empty() && config.comm != "mpi" && config.comm != "nccl")
      throw UsageError("train", "--launch mpi talks through --comm mpi (or nccl on GPUs), not " + config.comm);
    auto group = make_mpi_group(comm_options(config));
    return train_ranks(config, bus, group->rank() == 0 ? progress : ProgressFn{}, group.get(), nullptr);
  }
  if (config.launch == "procs") {
    if (!config.comm.empty() && config.comm != "shm")
      throw UsageError("train", "--launch procs talks through --comm shm, not " + config.comm);
    if (!config.resume_path.empty()) {
      // A checkpoint that is damaged or does not fit: say so once, here, not from every rank.
      // (The ranks check again, the size of the training set included.)
      const CheckpointHeader saved = load_checkpoint(config.resume_path).header;
      check_resumable(saved, checkpoint_header(config, saved.train_count, 0), config.resume_path);
    }
    // Each rank is a forked process; rank 0 reports its result through a file the parent reads.
    const std::string result_path = (std::filesystem::temp_directory_path() /
                                     ("scalelab-procs-" + std::to_string(::getpid()) + ".json"))
                                        .string();
    launch_procs(config.devices / info.devices_per_rank, parse_shm_sharing(config.shm_sharing), comm_options(config),
                 [&](ProcessGroup& group) {
                   EventBus rank_bus;
                   TrainResult r = train_ranks(config, rank_bus, group.rank() == 0 ? progress : ProgressFn{}, &group, nullptr);
                   if (group.rank() == 0) {
                     nlohmann::json j = to_json(r);
                     j["losses"] = r.losses;
                     write_file_atomically(result_path, j.dump(), "train");
                   }
                 });
    std::ifstream in(result_path);
    nlohmann::json j = nlohmann::json::parse(in);
    std::error_code ec;
    std::filesystem::remove(result_path, ec);
    return from_json(j, config);
  }
  return train_ranks(config, bus, progress, nullptr, stop);
}

TrainResult from_json(const nlohmann::json& j, const TrainConfig& config) {
  TrainResult r;
  r.config = config;
  r.hw_name = j["hw"].is_string() ? j["hw"].get<std::string>() : "";
  r.steps = j.value("steps", int64_t{0});
  r.samples = r.steps * config.batch;
  r.final_loss = j["final_loss"].is_number() ? j["final_loss"].get<double>() : std::nan("");
  r.test_accuracy = j["test_accuracy"].is_number() ? j["test_accuracy"].get<double>() : -1;
  r.time_s = j.value("time_s", 0.0);
  r.simulated = j.value("time_kind", std::string()) == "simulated";
  r.samples_per_s = j.value("samples_per_s", 0.0);
  r.weights_checksum = j["weights_checksum"].is_string() ? j["weights_checksum"].get<std::string>() : "";
  if (j["equivalence"].is_object()) r.max_rel_diff = j["equivalence"].value("max_rel_diff", -1.0);
  if (j.contains("amp") && j["amp"].is_object()) {
    r.loss_scale = j["amp"].value("loss_scale", 1.0);
    r.skipped_steps = j["amp"].value("skipped_steps", int64_t{0});
  }
  r.metrics.overlap_pct = j.value("overlap_pct", 0.0);
  r.metrics.bubble_fraction = j.value("bubble_fraction", 0.0);
  if (j.contains("losses")) r.losses = j["losses"].get<std::vector<double>>();
  for (const auto& d : j["per_device"]) {
    DeviceSummary s;
    s.name = d.value("device", std::string());
    s.busy_pct = d.value("busy_pct", 0.0);
    s.comm_pct = d.value("comm_pct", 0.0);
    s.idle_pct = d.value("idle_pct", 0.0);
    s.capacity = d.value("capacity_bytes", int64_t{0});
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      s.peak_bytes[c] = d["peak_bytes"].value(memory_category_name(static_cast<MemoryCategory>(c)), int64_t{0});
    s.peak_total = d["peak_bytes"].value("total", int64_t{0});
    r.per_device.push_back(s);
  }
  return r;
}

}  // namespace scalelab
