// 1. Run set-up and 2. the equivalence probe (run/run_parts.h).
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "core/checkpoint/weights_file.h"
#include "core/data/text.h"
#include "core/comm/backends.h"
#include "core/comm/threads/threads_group.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/limits.h"
#include "run/run_parts.h"

namespace scalelab {

namespace {

// A dry run's data are sizes only: it computes nothing from them.
DataSplit load_data(const TrainConfig& c, const ModelSpec& spec) {
  if (spec.family == ModelFamily::gpt) {
    // A GPT reads tokens: a corpus as characters or bytes, or a synthetic stream (any vocabulary).
    if (c.dataset == "synthetic")
      return make_synthetic_tokens(c.synthetic_train, c.synthetic_test, spec.gpt.context, spec.gpt.vocab, c.seed,
                                   !c.dry_run);
    return load_text(c.data_dir.empty() ? default_text_corpus() : c.data_dir, spec.gpt.context, spec.gpt.vocab,
                     !c.dry_run);
  }
  if (c.dataset == "synthetic")
    return make_synthetic(c.synthetic_train, c.synthetic_test, spec.inputs(), static_cast<int>(spec.outputs()), c.seed,
                          !c.dry_run);
  DataSplit d = load_fashion_mnist(c.data_dir.empty() ? default_fashion_mnist_dir() : c.data_dir, !c.dry_run);
  if (spec.inputs() != d.train.features || spec.outputs() != d.train.classes)
    throw UsageError("model", "--model " + spec.text + " has " + std::to_string(spec.inputs()) + " inputs and " +
                                  std::to_string(spec.outputs()) + " outputs, but " + d.train.name + " has " +
                                  std::to_string(d.train.features) + " features and " +
                                  std::to_string(d.train.classes) + " classes — use mlp:" +
                                  std::to_string(d.train.features) + "-...-" + std::to_string(d.train.classes));
  return d;
}

// The process groups of a threads launch: every rank in this process.
std::vector<std::unique_ptr<ProcessGroup>> local_groups(const TrainConfig& c, int ranks, int ranks_run) {
  CommBackend comm = c.comm;
  // NCCL serves ranks on distinct GPUs; logical devices sharing a GPU talk through the threads
  // backend, whose copies and reductions then run on the GPU (Executor::buffer_ops).
  const int gpus = c.device == DeviceKind::cuda ? cuda_device_count() : 0;
  const bool one_gpu_per_device = c.device == DeviceKind::cuda && c.devices <= gpus;
  if (comm == CommBackend::automatic) comm = one_gpu_per_device ? CommBackend::nccl : CommBackend::threads;
  if (comm == CommBackend::threads) return make_threads_groups(ranks, comm_options(c), ranks_run);
  if (comm == CommBackend::nccl) {
    if (!one_gpu_per_device)
      throw UsageError("comm", "--comm nccl needs a GPU of its own for every device, but --devices " +
                                   std::to_string(c.devices) + " share " + std::to_string(gpus) +
                                   " GPU(s) as logical devices — use --comm threads (its collectives run on the GPU)");
    const int per_rank = c.devices / ranks;
    NcclBootstrap boot;
    boot.unique_id_file =
        (std::filesystem::temp_directory_path() / ("scalelab-nccl-id-" + std::to_string(::getpid()))).string();
    std::vector<std::unique_ptr<ProcessGroup>> groups(static_cast<size_t>(ranks));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    // ncclCommInitRank blocks until every rank has called it.
    std::vector<std::thread> threads = start_threads(ranks, [&](int r) {
      try {
        groups[r] = make_nccl_group(r, ranks, place_cuda_device(r * per_rank, c.devices, gpus).gpu, boot,
                                    comm_options(c));
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
  throw UsageError("train", "--comm " + std::string(comm_backend_name(comm)) +
                                " with --launch threads: the ranks are threads of this process — use --comm threads "
                                "(or nccl on GPUs), or --launch procs for shm, --launch mpi for mpi");
}

}  // namespace

ModelSpec model_spec(const TrainConfig& c) {
  ModelSpec spec = ModelSpec::parse(c.model);
  spec.dropout = c.dropout;
  spec.dropout_seed = c.seed;
  return spec;
}

HostWeights initial_weights(const TrainConfig& c, const ModelSpec& spec) {
  if (!c.init_weights_path.empty()) return load_weights_npz(c.init_weights_path, spec);
  return init_weights(spec, c.seed, !c.dry_run);  // a dry run's: shapes only (no host floats)
}

CommOptions comm_options(const TrainConfig& c) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(c.comm_timeout_ms);
  o.algorithm = parse_comm_algorithm(c.comm_algo);
  return o;
}

RunSetup::RunSetup(const TrainConfig& c, EventBus& b, ProcessGroup* group, std::optional<WallClock::time_point> epoch)
    : config(c),
      bus(b),
      info(find_strategy(c.strategy)),
      spec(model_spec(c)),
      local_group(group),
      leader(!group || group->rank() == 0) {
  const int per_rank = info.devices_per_rank;
  device_options.kind = c.device;
  device_options.count = c.devices;
  device_options.dry_run = c.dry_run;
  device_options.bus = &bus;
  device_options.epoch = epoch;
  if (c.device == DeviceKind::sim) device_options.profile = reshaped(load_profile(c.hw), c.hw_nodes, c.hw_devices_per_node);
  if (c.tf32 && c.device == DeviceKind::cuda) device_options.tf32 = true;  // cuBLAS's TF32 tensor-op math
  if (c.tf32 && c.device != DeviceKind::cuda) {
    if (c.device != DeviceKind::sim)
      throw UsageError("train", "--tf32 runs f32 GEMMs as TF32 on a GPU's tensor cores (cuda) or prices them so (sim); --device " +
                                    std::string(device_kind_name(c.device)) + " computes in f32 — add --device cuda, or --device sim --hw PROFILE, or drop --tf32");
    if (device_options.profile.peak_flops_tf32 <= 0)
      throw UsageError("hw", "--tf32: profile " + device_options.profile.name + " has no TF32 peak (" +
                                 device_options.profile.device_model + " has no TF32 tensor cores) — drop --tf32");
    device_options.profile.tf32 = true;
  }
  if (group) {
    if (group->size() * per_rank != c.devices)
      throw UsageError("train", "--devices " + std::to_string(c.devices) + " but " + std::to_string(group->size()) +
                                    " ranks were started, with " + std::to_string(per_rank) + " device(s) each — start " +
                                    std::to_string(c.devices / per_rank) + " ranks (mpirun -np)");
    device_options.run_count = c.devices;
    device_options.count = per_rank;
    device_options.first_index = group->rank() * per_rank;
  }
  devices_run = group ? per_rank : c.devices;
  const bool threads_comm = c.comm == CommBackend::automatic || c.comm == CommBackend::threads;
  // (A 3D run's pipeline stages differ: every rank runs.)
  if (!group && c.dry_run && c.device == DeviceKind::sim && info.alike_ranks && c.pp == 1 && info.devices_per_rank == 1 &&
      threads_comm && c.devices > c.detailed_devices + 1) {
    devices_run = c.detailed_devices + 1;
    device_options.count = devices_run;
    device_options.run_count = c.devices;  // the others still share its node's host
  }
  // Every op of the first devices, a tally of the others (a dry run on 1,024 devices would keep
  // some 15 million events). Only this process's bus tallies: ranks of other processes keep all.
  if (!group) bus.tally_devices(std::min(c.detailed_devices, devices_run), devices_run);
  devices = make_devices(device_options);
  for (auto& d : devices) device_list.push_back(d.get());

  data = load_data(c, spec);
  loader = std::make_unique<Loader>(data.train, c.batch, c.seed);
  per_epoch = loader->batches_per_epoch();
  total = c.steps > 0 ? c.steps : c.epochs * per_epoch;
  // A window past the last step would keep no event of the run (validate() catches it for --steps).
  if (c.trace_first_step >= total)
    throw UsageError("train", "--trace-steps " + std::to_string(c.trace_first_step) + ":" + std::to_string(c.trace_last_step) +
                                  " starts after the run's last step: --epochs " + std::to_string(c.epochs) + " runs steps 0–" +
                                  std::to_string(total - 1) + " (" + std::to_string(per_epoch) + " batches of --batch " +
                                  std::to_string(c.batch) + " an epoch) — choose a window inside them, or raise --epochs");
  epochs = (total + per_epoch - 1) / per_epoch;

  if (per_rank > 0) {
    if (group) ranks = std::make_unique<RankSet>(device_list, *group);
    else ranks = std::make_unique<RankSet>(device_list, local_groups(c, c.devices / per_rank, devices_run / per_rank));
  }
  StrategyContext ctx{c, device_list, bus, initial_weights(c, spec), ranks.get(), device_options};
  strategy = info.make(ctx);
}

void RunSetup::leave_step() const {
  for (auto& d : devices) d->set_step(-1);
}

EquivalenceProbe::EquivalenceProbe(const RunSetup& run) : config_(run.config), halves_(run.config.batch % 2 == 0) {
  config_.strategy = kReferenceStrategy;
  config_.devices = 1;
  make(reference_, config_, run);
  TrainConfig split = config_;
  if (halves_) split.no_sync *= 2;  // an optimizer step every two halves, from their mean gradient
  make(split_, split, run);
}

void EquivalenceProbe::make(Single& single, const TrainConfig& config, const RunSetup& run) {
  DeviceOptions o = run.device_options;
  o.count = 1;
  o.first_index = 0;
  o.bus = &single.bus;
  single.devices = make_devices(o);
  StrategyContext ctx{config, {single.devices[0].get()}, single.bus, initial_weights(config, run.spec), nullptr, o};
  single.strategy = find_strategy(kReferenceStrategy).make(ctx);
}

void EquivalenceProbe::step(const HostBatch& batch, int64_t step, EventBus& bus) {
  bus.emit(Metric{step, "loss_single", reference_.strategy->train_step(batch, step)});
  if (!halves_) {
    bus.emit(Metric{step, "loss_roundoff", split_.strategy->train_step(batch, step)});
    return;
  }
  // The split single's steps count halves: batch `step`'s are 2·step and 2·step + 1.
  const int64_t rows = batch.size / 2;
  const auto features = static_cast<std::ptrdiff_t>(batch.features);
  double loss = 0;
  for (int64_t h = 0; h < 2; ++h) {
    const auto labels = static_cast<std::ptrdiff_t>(rows * batch.labels_per_sample);
    half_.size = rows;
    half_.features = batch.features;
    half_.labels_per_sample = batch.labels_per_sample;
    half_.x.assign(batch.x.begin() + h * rows * features, batch.x.begin() + (h + 1) * rows * features);
    half_.y.assign(batch.y.begin() + h * labels, batch.y.begin() + (h + 1) * labels);
    half_.part_of_step = step;  // --dropout: the whole batch's masks
    half_.first_sample = h * rows;
    loss += split_.strategy->train_step(half_, 2 * step + h) / 2;
  }
  bus.emit(Metric{step, "loss_roundoff", loss});
}

void EquivalenceProbe::load_state(const TrainingState& state) {
  reference_.strategy->load_state(state);
  split_.strategy->load_state(state);
}

double EquivalenceProbe::max_rel_diff(const HostWeights& weights) {
  return max_relative_difference(weights, reference_.strategy->weights());
}

double EquivalenceProbe::roundoff_rel_diff() {
  return max_relative_difference(split_.strategy->weights(), reference_.strategy->weights());
}

}  // namespace scalelab
