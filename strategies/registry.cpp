#include "strategies/registry.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/nn/optimizer.h"

namespace scalelab {

namespace {
using O = StrategyOption;
const std::vector<Launch> kRankLaunches = {Launch::threads, Launch::procs, Launch::mpi};

StrategyInfo entry(std::string name, std::string summary, std::function<std::unique_ptr<Strategy>(StrategyContext&)> make,
                   int devices_per_rank = 0) {
  StrategyInfo s;
  s.name = std::move(name);
  s.summary = std::move(summary);
  s.make = std::move(make);
  s.devices_per_rank = devices_per_rank;
  return s;
}
}  // namespace

// In the order the tour shows them: the reference, the single-controller strategies, the ranks,
// then the asynchronous one.
const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> registry = [] {
    std::vector<StrategyInfo> r;
    StrategyInfo single = entry("single", "the whole model on one device: the reference every strategy is checked against",
                        make_single);
    single.options = {O::no_sync, O::amp};
    single.device_count = {1, 1, 1};
    r.push_back(single);

    StrategyInfo dp = entry("data-parallel",
                    "DataParallel: one controller scatters the batch, replicates the model, gathers outputs and sums "
                    "gradients on device 0",
                    make_data_parallel);
    dp.options = {O::amp};
    dp.batch_shards = StrategyInfo::BatchShards::contiguous;
    r.push_back(dp);

    StrategyInfo mp = entry("model-parallel",
                    "layers split over devices, activations copied between them; the waiting devices stand idle",
                    make_model_parallel);
    mp.options = {O::amp};
    mp.check_shape = [](const TrainConfig& c) { check_model_parallel_shape(c.devices, ModelSpec::parse(c.model)); };
    r.push_back(mp);

    StrategyInfo ddp = entry("ddp", "DistributedDataParallel: a replica per rank, bucketed gradient all-reduce overlapping backward",
                     make_ddp, 1);
    ddp.options = {O::no_sync, O::buckets, O::amp, O::comm};
    ddp.launches = kRankLaunches;
    ddp.batch_shards = StrategyInfo::BatchShards::interleaved;
    ddp.alike_ranks = true;
    r.push_back(ddp);

    StrategyInfo ddp_mp = entry("ddp-mp", "DDP whose replicas each span two devices (model parallel inside, DDP across)",
                        make_ddp_mp, 2);
    ddp_mp.options = {O::no_sync, O::buckets, O::amp, O::comm};
    ddp_mp.launches = kRankLaunches;
    ddp_mp.device_count = {2, 0, 2};
    ddp_mp.batch_shards = StrategyInfo::BatchShards::interleaved;
    r.push_back(ddp_mp);

    StrategyInfo pipeline = entry("pipeline", "stages on ranks, micro-batches flowing through them; GPipe, 1F1B or interleaved 1F1B schedule",
                          make_pipeline, 1);
    pipeline.options = {O::micro_batches, O::schedule, O::amp, O::comm};
    pipeline.launches = kRankLaunches;
    pipeline.check_shape = [](const TrainConfig& c) {
      check_pipeline_shape(c.devices, c.micro_batches, c.batch, ModelSpec::parse(c.model),
                           c.schedule == Schedule::interleaved ? c.virtual_stages : 1);
    };
    pipeline.showcase = [](TrainConfig& c) {
      c.micro_batches = 4;
      c.schedule = Schedule::one_f_one_b;
    };
    r.push_back(pipeline);

    StrategyInfo zero = entry("zero",
                      "ZeroRedundancyOptimizer: data parallel with the optimizer state (stage 2: gradients too; 3: "
                      "weights too, gathered a layer at a time — fsdp) sharded over ranks",
                      make_zero, 1);
    zero.options = {O::zero_stage, O::amp, O::comm};
    zero.launches = kRankLaunches;
    zero.showcase = [](TrainConfig& c) { c.zero_stage = 1; };
    zero.batch_shards = StrategyInfo::BatchShards::interleaved;
    zero.alike_ranks = true;
    r.push_back(zero);

    StrategyInfo tp = entry("tensor-parallel",
                    "Megatron-LM: each GPT block's heads and MLP split over ranks, two all-reduces forward and two "
                    "backward per block; --dp D and --pp P make it 3D",
                    make_tensor_parallel, 1);
    tp.options = {O::amp, O::comm, O::sequence_parallel, O::data_parallel, O::pipeline_parallel, O::micro_batches,
                  O::schedule, O::zero_stage};
    tp.launches = kRankLaunches;
    tp.alike_ranks = true;
    tp.check_shape = check_tensor_parallel_shape;
    // Its lesson needs a transformer: on the tour's default MLP it shows a small GPT instead.
    tp.showcase = [](TrainConfig& c) {
      if (ModelSpec::parse(c.model).family == ModelFamily::gpt) return;
      c.model = "gpt:2-64-4-32-96";
      if (c.dataset != "synthetic") c.dataset = "text";
    };
    r.push_back(tp);

    StrategyInfo hogwild = entry("multiprocessing",
                         "Hogwild: N processes, the parameters in shared memory, lock-free asynchronous updates",
                         make_multiprocessing);
    hogwild.synchronous = false;
    hogwild.workers_are_processes = true;
    // Forked workers share host memory, and CUDA does not survive a fork: cpu, or sim to model GPUs.
    hogwild.device_kinds = {DeviceKind::cpu, DeviceKind::sim};
    hogwild.device_count = {1, 64, 1};
    hogwild.batch_shards = StrategyInfo::BatchShards::interleaved;
    r.push_back(hogwild);
    return r;
  }();
  return registry;
}

const char* strategy_option_flags(StrategyOption option) {
  switch (option) {
    case O::no_sync: return "--no-sync";
    case O::buckets: return "--bucket-mb / --first-bucket-mb";
    case O::micro_batches: return "--micro-batches";
    case O::schedule: return "--schedule / --virtual-stages";
    case O::zero_stage: return "--zero-stage";
    case O::amp: return "--amp";
    case O::comm: return "--comm / --comm-algo";
    case O::sequence_parallel: return "--sequence-parallel";
    case O::data_parallel: return "--dp";
    case O::pipeline_parallel: return "--pp";
  }
  return "?";
}

bool StrategyInfo::takes(StrategyOption option) const {
  for (StrategyOption o : options)
    if (o == option) return true;
  return false;
}

bool StrategyInfo::supports(Launch launch) const {
  for (Launch l : launches)
    if (l == launch) return true;
  return false;
}

bool StrategyInfo::supports(DeviceKind kind) const {
  for (DeviceKind k : device_kinds)
    if (k == kind) return true;
  return false;
}

namespace {

// The strategies that take an option, for the message that refuses it elsewhere.
std::string takers(StrategyOption option) {
  std::string names;
  for (const StrategyInfo& s : strategy_registry())
    if (s.takes(option)) names += (names.empty() ? "" : " | ") + s.name;
  return names;
}

// The option as the config gives it ("--zero-stage 1"), or "" where it is left at its default
// (an option at its default is not "given", whatever the strategy).
std::string given(const TrainConfig& c, StrategyOption option) {
  const TrainConfig d;
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  switch (option) {
    case O::no_sync: return c.no_sync != d.no_sync ? "--no-sync " + std::to_string(c.no_sync) : "";
    case O::buckets:
      if (c.bucket_mb != d.bucket_mb) return "--bucket-mb " + number(c.bucket_mb);
      return c.first_bucket_mb != d.first_bucket_mb ? "--first-bucket-mb " + number(c.first_bucket_mb) : "";
    case O::micro_batches: return c.micro_batches != d.micro_batches ? "--micro-batches " + std::to_string(c.micro_batches) : "";
    case O::schedule:
      if (c.schedule != d.schedule) return "--schedule " + std::string(schedule_name(c.schedule));
      return c.virtual_stages != d.virtual_stages ? "--virtual-stages " + std::to_string(c.virtual_stages) : "";
    case O::zero_stage: return c.zero_stage != d.zero_stage ? "--zero-stage " + std::to_string(c.zero_stage) : "";
    case O::amp:
      if (c.amp != d.amp) return "--amp " + std::string(amp_name(c.amp));
      return c.amp_initial_scale != d.amp_initial_scale ? "--amp-initial-scale " + number(c.amp_initial_scale) : "";
    case O::comm:
      if (c.comm != d.comm) return "--comm " + std::string(comm_backend_name(c.comm));
      return c.comm_algo != d.comm_algo ? "--comm-algo " + c.comm_algo : "";
    case O::sequence_parallel: return c.sequence_parallel ? "--sequence-parallel" : "";
    case O::data_parallel: return c.dp != d.dp ? "--dp " + std::to_string(c.dp) : "";
    case O::pipeline_parallel: return c.pp != d.pp ? "--pp " + std::to_string(c.pp) : "";
  }
  return "";
}

// What an option is part of: the component its refusal is reported under.
const char* option_family(StrategyOption option) {
  switch (option) {
    case O::no_sync:
    case O::buckets: return "ddp";
    case O::micro_batches:
    case O::schedule: return "pipeline";
    case O::zero_stage: return "zero";
    case O::amp: return "amp";
    case O::comm: return "comm";
    case O::sequence_parallel: return "tensor-parallel";
    case O::data_parallel:
    case O::pipeline_parallel: return "tensor-parallel";
  }
  return "train";
}

std::string device_count_text(const DeviceCountRule& r) {
  if (r.max == r.min) return "exactly " + std::to_string(r.min);
  std::string t = std::to_string(r.min) + (r.max > 0 ? "–" + std::to_string(r.max) : " or more");
  if (r.multiple_of > 1) t += ", a multiple of " + std::to_string(r.multiple_of);
  return t;
}

}  // namespace

void StrategyInfo::check_takes(StrategyOption option, const std::string& option_text) const {
  if (takes(option)) return;
  const std::string who = takers(option);
  const bool few = std::count(who.begin(), who.end(), '|') < 3;  // else: "see `scalelab strategies`"
  throw UsageError(option_family(option), option_text + " does not apply to --strategy " + name +
                                              " (it would be ignored) — " +
                                              (few ? "use --strategy " + who + ", or drop "
                                                   : "see `scalelab strategies` for those that take it, or drop ") +
                                              strategy_option_flags(option));
}

void StrategyInfo::validate(const TrainConfig& c) const {
  for (O option : {O::no_sync, O::buckets, O::micro_batches, O::schedule, O::zero_stage, O::amp, O::comm,
                   O::sequence_parallel, O::data_parallel, O::pipeline_parallel}) {
    const std::string option_text = given(c, option);
    if (!option_text.empty()) check_takes(option, option_text);
  }
  if (!supports(c.device)) {
    std::string kinds;
    for (DeviceKind k : device_kinds) kinds += (kinds.empty() ? "" : " or ") + std::string(device_kind_name(k));
    throw UsageError(name, "--device " + std::string(device_kind_name(c.device)) + ": " + name + " runs on " + kinds +
                               (c.device == DeviceKind::cuda && !synchronous
                                    ? " (its workers are forked processes sharing host memory, and CUDA does not "
                                      "survive a fork) — use --device sim to model GPUs"
                                    : " — pick one of those"));
  }
  if (!supports(c.launch)) {
    throw UsageError(name, "--launch " + std::string(launch_name(c.launch)) + " starts one process per rank, but " +
                               name +
                               (synchronous ? " drives every device from one controller" : " forks its own worker processes") +
                               " — drop --launch");
  }
  const DeviceCountRule& r = device_count;
  if (c.devices % r.multiple_of != 0)
    throw UsageError(name, "--devices " + std::to_string(c.devices) + " must be a multiple of " +
                               std::to_string(r.multiple_of) + " (" + std::to_string(devices_per_rank) +
                               " devices per rank) — pass --devices " +
                               std::to_string(std::max(r.min, c.devices / r.multiple_of * r.multiple_of)));
  if (c.devices < r.min || (r.max > 0 && c.devices > r.max))
    throw UsageError(name, "--devices " + std::to_string(c.devices) + ": " + name + " takes " + device_count_text(r) +
                               " device" + (r.max == 1 ? "" : "s") + " — pass --devices " +
                               std::to_string(c.devices < r.min ? r.min : r.max));
  if (check_shape) check_shape(c);
  if (c.check_equivalence && !synchronous)
    throw UsageError(name, "--check-equivalence compares weights with single's step by step, but " + name +
                               " is asynchronous (its workers race on the weights), so it is held to test accuracy "
                               "instead — drop --check-equivalence and compare the test accuracy with --strategy single");
}

std::string describe_strategies() {
  std::string out;
  for (const StrategyInfo& s : strategy_registry()) {
    out += s.name + std::string(s.name.size() < 16 ? 16 - s.name.size() : 1, ' ') + s.summary + "\n";
    std::string takes;
    for (O o : s.options) takes += (takes.empty() ? "" : ", ") + std::string(strategy_option_flags(o));
    std::string launches;
    for (Launch l : s.launches) launches += (launches.empty() ? "" : " | ") + std::string(launch_name(l));
    std::string kinds;
    for (DeviceKind k : s.device_kinds) kinds += (kinds.empty() ? "" : " | ") + std::string(device_kind_name(k));
    out += "                devices " + device_count_text(s.device_count) + " (" + kinds + "); --launch " + launches +
           "; " + (s.synchronous ? "synchronous: equals single" : "asynchronous: held to accuracy") +
           (takes.empty() ? "" : "; takes " + takes) + "\n";
  }
  return out;
}

LossScaler make_loss_scaler(const TrainConfig& config) {
  LossScalerOptions o;
  o.init_scale = config.amp_initial_scale;
  return LossScaler(config.amp_dtype(), o);
}

TrainingState whole_model_state(Model& model, Optimizer& optimizer, const LossScaler& scaler) {
  TrainingState s;
  s.weights = model.download();
  s.optimizer_steps = optimizer.steps_taken();
  s.optimizer = optimizer.download_state();
  s.loss_scale = scaler.state_scale();
  s.scaler_good_steps = scaler.good_steps();
  return s;
}

void load_whole_model_state(Model& model, Optimizer& optimizer, LossScaler& scaler, const TrainingState& s) {
  model.upload(s.weights);
  optimizer.set_steps_taken(s.optimizer_steps);
  optimizer.upload_state(s.optimizer);
  scaler.load_state(s.loss_scale, s.scaler_good_steps);
}

const StrategyInfo& find_strategy(const std::string& name) {
  std::string known;
  for (const auto& s : strategy_registry()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw UsageError("strategy", "--strategy '" + name + "' is unknown — use one of: " + known + " (or fsdp: zero stage 3)");
}

void resolve_strategy_alias(std::string& strategy, int& zero_stage) {
  if (strategy != "fsdp") return;
  if (zero_stage != 0 && zero_stage != 3)
    throw UsageError("zero", "--strategy fsdp --zero-stage " + std::to_string(zero_stage) +
                                 ": fsdp is zero stage 3 (weights, gradients and optimizer state sharded) — drop "
                                 "--zero-stage, or use --strategy zero --zero-stage " + std::to_string(zero_stage));
  strategy = "zero";
  zero_stage = 3;
}

}  // namespace scalelab
