#pragma once
// A pipeline's schedule: the order in which each stage runs the forwards and backwards of the
// micro-batches in one training step. The two the lecture teaches (GPipe, 1F1B), Megatron-LM's
// interleaved 1F1B (each device holding several chunks of layers), zero-bubble ZB-H1 (the backward
// split in two), the check that a list is one a stage can run, and the order of a stage's sends
// and receives are here; what a stage does for each task is strategies/pipeline.cpp.
#include <cstdint>
#include <functional>
#include <vector>

namespace scalelab {

// forward (F), backward (B), and W: the weight gradients of a backward, where a schedule runs them
// as a task of their own (zero bubble). In a list with W tasks, B computes only what the stage
// before needs — the input's gradient, and the cheap gradients of biases and LayerNorms — and W
// the GEMMs of the weights' gradients, from the inputs and output gradients B kept for it.
enum class PipelinePass : uint8_t { forward, backward, weight };

// One task of a stage: the forward, the backward or the weight gradients of one micro-batch
// through one of the stage's chunks of layers (chunk 0 unless the schedule is interleaved).
struct PipelineTask {
  PipelinePass pass;
  int micro_batch;
  int chunk = 0;
};

// The tasks stage `stage` (0 … stages − 1) runs in one training step, in order, when the batch is
// cut into `micro_batches`. A pure function of its arguments: it is called once per stage and step.
using PipelineSchedule = std::function<std::vector<PipelineTask>(int stages, int stage, int micro_batches)>;

// The lecture's two schedules (drawn in strategies/pipeline_schedule.cpp). GPipe: every forward,
// then every backward, the same list on every stage. 1F1B (PipeDream-Flush): a warm-up of
// min(p − s − 1, m) forwards, then one forward and one backward in turn, then the backwards left.
std::vector<PipelineTask> gpipe_schedule(int stages, int stage, int micro_batches);
std::vector<PipelineTask> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// Interleaved 1F1B (Narayanan et al. 2021, §2.2.2): the layers cut into stages · chunks virtual
// stages, device s holding virtual stages s, s + p, … as its chunks 0, 1, …; a warm-up of
// forwards, then one forward and one backward in turn over (chunk, micro-batch) tasks, then the
// backwards left. micro_batches must be a multiple of stages (Megatron's rule; throws Error).
std::vector<PipelineTask> interleaved_schedule(int stages, int chunks, int stage, int micro_batches);

// Zero bubble, ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B with each backward
// split into B and W. Stage s runs the triples (F x, B x − (p − 1 − s), W x − (p − 1)) for
// x = 0 … m + p − 2, each task that names a micro-batch outside 0 … m − 1 left out: the Ws fill
// the slots where 1F1B waits for a gradient. With F, B and W each one slot the bubble is p − 1
// slots against 1F1B's 3(p − 1); a stage holds at most p micro-batches' activations, as in 1F1B.
std::vector<PipelineTask> zero_bubble_schedule(int stages, int stage, int micro_batches);

// Throws Error("pipeline", …) naming the stage and what is wrong unless `tasks` runs the forward and
// the backward of every micro-batch 0 … micro_batches − 1 through every chunk 0 … chunks − 1
// exactly once, each backward after its forward, a chunk's backwards in the order of its forwards
// (each layer keeps the inputs of its forwards in a queue and its backward takes the oldest); and
// W tasks for every micro-batch or for none, each W after its B, in the order of the Bs.
// Whether the stages' lists fit together — each send meeting its receive — is
// check_pipeline_programs' question.
void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches,
                             int chunks = 1);

// What a stage does, in order, to run its tasks: receive a task's input (activations from the
// virtual stage before, or the gradient from the one after), compute a task, send a task's output.
// `task` is the task whose input is received, that is computed, or whose output is sent. The peer
// is the device of the virtual stage before or after: s − 1 or s + 1, around the ring. A W task
// neither receives nor sends.
struct PipelineOp {
  enum Kind : uint8_t { receive, compute, send } kind;
  PipelineTask task;
};
using PipelineProgram = std::vector<PipelineOp>;

// Where a task's data come from and go to. The virtual stage of (stage, chunk) is chunk·p + stage.
struct PipelineLinks {
  int stages, chunks;
  int virtual_stage(int stage, const PipelineTask& t) const { return t.chunk * stages + stage; }
  bool receives(int stage, const PipelineTask& t) const;  // F: not the first virtual stage; B: not the last
  bool sends(int stage, const PipelineTask& t) const;     // F: not the last virtual stage; B: not the first
  int peer_of_input(int stage, const PipelineTask& t) const;   // F: s − 1; B: s + 1 (mod p)
  int peer_of_output(int stage, const PipelineTask& t) const;  // F: s + 1; B: s − 1 (mod p)
};

// The program of one stage with one chunk, from its list alone (GPipe, 1F1B, a lab's list): each
// input received when its task needs it, each output sent as soon as it is computed — except that
// after a backward followed by a forward, the forward's input is received before the gradient is
// sent (strategies/pipeline.cpp says why); W tasks between the two run before both, so that a
// zero-bubble stage works while the stage before computes that input. Lists that do not fit
// together wait on each other.
PipelineProgram stage_program(const std::vector<PipelineTask>& tasks, int stages, int stage);

// Every stage's program for lists that send around the ring (chunks > 1), where no local rule
// avoids a wait in a circle: the tasks are timed as if F took 1 unit, B 2 (a backward's two
// GEMMs to a forward's one) and W 1, each message moves at the time its sender finishes it, and every
// stage sends and receives in the order of those times (ties in one order for all). One order of
// events that every program follows: no stage waits for ever, and a stage's link is used in the
// order its messages come. Throws Error when the lists wait on each other's tasks.
std::vector<PipelineProgram> timed_programs(const std::vector<std::vector<PipelineTask>>& tasks, int chunks);

// Runs the programs with rendezvous sends (a send waits for its receive, a receive for its send,
// messages between two stages matched in order) and throws Error("pipeline", …) naming the stages
// that wait on each other, or a send met by the receive of another message.
void check_pipeline_programs(const std::vector<PipelineProgram>& programs, int chunks);

}  // namespace scalelab
