// 3. The checkpointer (run/run_parts.h).
#include "core/checkpoint/checkpoint.h"
#include "core/error.h"
#include "run/run_parts.h"

namespace scalelab {

CheckpointHeader checkpoint_header(const TrainConfig& c, int64_t train_count, int64_t step) {
  CheckpointHeader h;
  h.model = c.model;
  h.optimizer = c.optimizer;
  h.dataset = c.dataset;
  h.train_count = train_count;
  h.batch = c.batch;
  h.seed = c.seed;
  h.amp = amp_name(c.amp);
  h.step = step;
  h.strategy = c.strategy;
  h.devices = c.devices;
  return h;
}

Checkpointer::Checkpointer(RunSetup& run) : run_(run) {
  const TrainConfig& c = run.config;
  if (c.dry_run && (!c.checkpoint_path.empty() || !c.resume_path.empty()))
    throw UsageError("checkpoint", "--dry-run computes no weights to save or continue — drop --checkpoint / --resume");
  if (c.no_sync > 1 && !c.checkpoint_path.empty() &&
      (c.checkpoint_every % c.no_sync != 0 || run.total % c.no_sync != 0))
    throw UsageError("checkpoint", "--no-sync " + std::to_string(c.no_sync) +
                                       " accumulates gradients that a checkpoint does not hold — make --checkpoint-every "
                                       "and the run's steps multiples of " + std::to_string(c.no_sync));
}

int64_t Checkpointer::resume(EquivalenceProbe* probe) {
  const TrainConfig& c = run_.config;
  if (c.resume_path.empty()) return 0;
  Checkpoint ck = load_checkpoint(c.resume_path);
  check_resumable(ck.header, checkpoint_header(c, run_.data.train.count, 0), c.resume_path);
  if (ck.header.step > run_.total)
    throw UsageError("checkpoint", c.resume_path + ": is at step " + std::to_string(ck.header.step) + ", past this run's " +
                                       std::to_string(run_.total) + " steps — raise --steps (it counts from step 0)");
  // The one check that the state fits this model and optimizer: the strategies take it apart
  // without checking again.
  validate_resume(ck.state, run_.spec, c.optimizer, c.resume_path);
  run_.leave_step();
  run_.strategy->load_state(ck.state);
  if (probe) probe->load_state(ck.state);
  return ck.header.step;
}

namespace {

const char* const kStepPattern = "{step}";

// --checkpoint's path for the save after `steps_done` steps: {step} replaced by the number.
std::string checkpoint_file(const std::string& path, int64_t steps_done) {
  std::string out = path;
  for (size_t at = out.find(kStepPattern); at != std::string::npos; at = out.find(kStepPattern, at))
    out.replace(at, std::string(kStepPattern).size(), std::to_string(steps_done));
  return out;
}

}  // namespace

void Checkpointer::at_start(int64_t first_step) {
  const std::string& path = run_.config.checkpoint_path;
  if (first_step == 0 && path.find(kStepPattern) != std::string::npos) save(0);
}

void Checkpointer::after_step(int64_t steps_done) {
  const int64_t every = run_.config.checkpoint_every;
  if (every > 0 && steps_done % every == 0) save(steps_done);
}

void Checkpointer::at_end(int64_t last_step) {
  if (!run_.config.checkpoint_path.empty() && saved_step_ != last_step) save(last_step);
}

// slide: checkpoint-rank0
void Checkpointer::save(int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  run_.leave_step();  // the state's downloads are not part of a step
  Checkpoint ck{checkpoint_header(run_.config, run_.data.train.count, steps_done),
                run_.strategy->state()};
  if (run_.leader)
    save_checkpoint(checkpoint_file(run_.config.checkpoint_path, steps_done), ck);
  // No rank runs ahead before the file is in place.
  if (run_.local_group) run_.local_group->barrier();
  saved_step_ = steps_done;
// end slide
  time_ += std::chrono::steady_clock::now() - t0;
}

}  // namespace scalelab
