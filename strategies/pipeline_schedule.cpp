// The pipeline's schedules: the order in which a stage runs its tasks, F i (the forward of
// micro-batch i) and B i (its backward), in one training step — interleaved, through one of the
// stage's chunks — and the order of its sends and receives around them. What a stage does for
// each task — receive, compute, send — is strategies/pipeline.cpp.
//
// The two schedules for p = 4 stages and m = 8 micro-batches. Each row is the list a stage runs,
// read left to right; a column is a time slot if F and B take one slot each ("..": idle, waiting
// for a neighbour: the bubble).
//
// GPipe: all forwards, then all backwards.
//   stage 0  F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7
//   stage 1  .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. .. .. B0 B1 B2 B3 B4 B5 B6 B7 ..
//   stage 2  .. .. F0 F1 F2 F3 F4 F5 F6 F7 .. .. B0 B1 B2 B3 B4 B5 B6 B7 .. ..
//   stage 3  .. .. .. F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7 .. .. ..
//
// 1F1B: p − s − 1 forwards to fill the pipe (warm-up), then one forward and one backward in turn
// (steady state), then the backwards left (cool-down).
//   stage 0  F0 F1 F2 F3 .. .. .. B0 F4 B1 F5 B2 F6 B3 F7 B4 .. B5 .. B6 .. B7
//   stage 1  .. F0 F1 F2 .. .. B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .. B6 .. B7 ..
//   stage 2  .. .. F0 F1 .. B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .. B7 .. ..
//   stage 3  .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .. .. ..
//
// Both leave each stage idle p − 1 slots of forward and p − 1 of backward out of m + p − 1 each:
// the bubble is (p − 1) / (m + p − 1), 3/11 here, and more micro-batches shrink it. What 1F1B
// changes is memory: a stage keeps each micro-batch's activations from its forward to its
// backward, so under GPipe stage 0 holds all m of them at once, under 1F1B at most p.
//
// Interleaved 1F1B (Narayanan et al. 2021, §2.2.2). The bubble is p − 1 slots because micro-batch
// 0 needs p − 1 slots to reach the last stage and its gradient p − 1 to come back, a slot being one
// stage's share of the layers. Make the shares smaller and the trip gets shorter: cut the layers
// into p·V virtual stages and give device s virtual stages s, s + p, s + 2p, … (its chunks 0, 1,
// …, V − 1). A micro-batch now goes round the devices V times; each task (one micro-batch through
// one chunk) takes 1/V of a slot, and the fill and the drain are p − 1 tasks each, (p − 1)/V
// slots: the bubble shrinks V times,
//     bubble / useful time = (p − 1) / (V·m)      against 1F1B's (p − 1) / m.
// Below, p = 4, V = 2, m = 4, a column being half a slot: F i / B i run micro-batch i through
// chunk 0 (virtual stage s), f i / b i through chunk 1 (virtual stage s + 4). A device runs its
// chunk-0 forwards for p micro-batches, then their chunk-1 forwards (their inputs come round from
// stage 3), and so on; then one forward and one backward in turn.
//   stage 0  F0 F1 F2 F3 f0 f1 f2 f3 .. .. .. b0 .. b1 .. b2 .. b3 B0 B1 B2 B3
//   stage 1  .. F0 F1 F2 F3 f0 f1 f2 f3 .. b0 .. b1 .. b2 .. b3 B0 B1 B2 B3 ..
//   stage 2  .. .. F0 F1 F2 F3 f0 f1 f2 b0 f3 b1 .. b2 .. b3 B0 B1 B2 B3 .. ..
//   stage 3  .. .. .. F0 F1 F2 F3 f0 b0 f1 b1 f2 b2 f3 b3 B0 B1 B2 B3 .. .. ..
// 22 half-slots where 1F1B takes 2 × 14: each device idles 3 slots of 11 instead of 6 of 14
// ((p − 1)/(V·m + p − 1) = 3/11 against 3/7).
//
// What it costs: a micro-batch crosses p·V − 1 boundaries between virtual stages instead of
// p − 1, so V times the point-to-point messages (and bytes) — stage 3 sends virtual stage 3's
// output round to stage 0 for virtual stage 4. Worth it while a message costs less than the slot
// time it saves. And m must be a multiple of p (Megatron's rule): the devices take the
// micro-batches p at a time through a chunk.
//
// Zero bubble, ZB-H1 (Qi et al. 2024). A backward is two jobs: B, the gradient of the stage's
// input, which the stage before waits for, and W, the gradients of the weights, which nobody waits
// for until the optimizer step. Split them, send B's result at once, and run W where 1F1B idles.
// Below, p = 4 and m = 8 with F, B and W one column each (1F1B's backward is B and W together, two
// columns): stage s runs (F x, B x − (p − 1 − s), W x − (p − 1)) for x = 0, 1, …, leaving out the
// tasks of micro-batches outside 0 … m − 1.
//   stage 0  F0 F1 F2 F3 .. .. .. B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7
//   stage 1  .. F0 F1 F2 .. .. B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7
//   stage 2  .. .. F0 F1 .. B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7
//   stage 3  .. .. .. F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7
// 27 columns where 1F1B takes 33: each stage idles p − 1 = 3 (the warm-up's wait for the first
// gradient, which no W can fill: none is due yet) instead of 3(p − 1) = 9. The last stages run
// their Ws late, where 1F1B's cool-down leaves them idle. Stage 0 still holds at most p
// micro-batches' activations (F x waits for W x − p), as in 1F1B; a W holds only its GEMMs' inputs
// and output gradients.
#include "strategies/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "core/error.h"

namespace scalelab {
namespace {
using Pass = PipelinePass;
using Task = PipelineTask;
}  // namespace

// slide: gpipe-schedule
// GPipe: F 0 … F m−1, then B 0 … B m−1, the same list on every stage.
std::vector<Task> gpipe_schedule(int /*stages*/, int /*stage*/, int micro_batches) {
  std::vector<Task> tasks;
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// slide: one-f-one-b-schedule
// 1F1B (PipeDream-Flush): stage s of p runs w = min(p − s − 1, m) forwards, then m − w pairs
// (forward w + i, backward i), then the w backwards left.
std::vector<Task> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<Task> tasks;
  for (int i = 0; i < warmup; ++i) tasks.push_back({Pass::forward, i});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    tasks.push_back({Pass::forward, warmup + i});
    tasks.push_back({Pass::backward, i});
  }
  for (int i = micro_batches - warmup; i < micro_batches; ++i) tasks.push_back({Pass::backward, i});
  return tasks;
// end slide
}

// The interleaved schedule takes the micro-batches p at a time (Megatron's rule).
static void check_micro_batches_in_groups(int stages, int micro_batches) {
  if (micro_batches % stages != 0)
    throw Error("pipeline", "the interleaved schedule takes the micro-batches " + std::to_string(stages) +
                                " at a time, but " + std::to_string(micro_batches) + " is not a multiple of " +
                                std::to_string(stages));
}

// Interleaved 1F1B, as Megatron-LM orders it. The k-th forward of a stage (k = 0 … V·m − 1) runs
// micro-batch ⌊k / pV⌋·p + k mod p through chunk (k mod pV) / p: p micro-batches through chunk 0,
// the same p through chunk 1, …, then the next p. The k-th backward takes the chunks the other way
// round (V − 1 first). The warm-up: every chunk but the last for the first p micro-batches, and
// the tasks micro-batch 0 takes from stage s to the last stage and back.
// slide: interleaved-schedule
// Stage s warms up with (V − 1)·p forwards and 2(p − s − 1) more, never more than V·m; then one
// forward and one backward in turn; then the backwards left.
std::vector<Task> interleaved_schedule(int stages, int chunks, int stage, int micro_batches) {
  check_micro_batches_in_groups(stages, micro_batches);
  const int p = stages, V = chunks, total = V * micro_batches;
  auto task = [&](Pass pass, int k) {
    const int chunk = (k % (p * V)) / p;
    return Task{pass, k / (p * V) * p + k % p, pass == Pass::forward ? chunk : V - 1 - chunk};
  };
  const int warmup = std::min(2 * (p - stage - 1) + (V - 1) * p, total);
  std::vector<Task> tasks;
  for (int k = 0; k < warmup; ++k) tasks.push_back(task(Pass::forward, k));
  for (int k = 0; k < total - warmup; ++k) {
    tasks.push_back(task(Pass::forward, warmup + k));
    tasks.push_back(task(Pass::backward, k));
  }
  for (int k = total - warmup; k < total; ++k) tasks.push_back(task(Pass::backward, k));
  return tasks;
}
// end slide

// slide: zero-bubble-schedule
// ZB-H1: stage s of p runs (F x, B x − (p − 1 − s), W x − (p − 1)) for x = 0 … m + p − 2, leaving
// out every task whose micro-batch is not one of 0 … m − 1.
std::vector<Task> zero_bubble_schedule(int stages, int stage, int micro_batches) {
  std::vector<Task> tasks;
  auto add = [&](Pass pass, int i) {
    if (i >= 0 && i < micro_batches) tasks.push_back({pass, i});
  };
  for (int x = 0; x < micro_batches + stages - 1; ++x) {
    add(Pass::forward, x);
    add(Pass::backward, x - (stages - 1 - stage));
    add(Pass::weight, x - (stages - 1));
  }
  return tasks;
// end slide
}

// A list a stage can run: every (chunk, micro-batch)'s F and B once, each B after its F, a chunk's
// Bs in the order of its Fs (strategies/pipeline_schedule.h says why each);
// with W tasks, one per B, after it, in the order of the Bs.
void check_pipeline_schedule(const std::vector<PipelineTask>& tasks, int stages, int stage, int micro_batches,
                             int chunks) {
  std::string where = "the schedule of stage " + std::to_string(stage) + " (" + std::to_string(stages) + " stages, " +
                      std::to_string(micro_batches) + " micro-batches";
  where += chunks > 1 ? ", " + std::to_string(chunks) + " chunks each)" : ")";
  const size_t C = static_cast<size_t>(std::max(chunks, 1));
  const size_t slots = static_cast<size_t>(micro_batches) * C;
  std::vector<int> seen[3] = {std::vector<int>(slots), std::vector<int>(slots), std::vector<int>(slots)};  // by pass
  // Per chunk: the micro-batches in the order of their Fs, and of their Bs; how many Bs and Ws ran.
  std::vector<std::vector<int>> forward_order(C), backward_order(C);
  std::vector<size_t> backwards_run(C), weights_run(C);
  auto name = [&](Pass pass, int i, int c) {
    const char* letter = pass == Pass::forward ? "F" : pass == Pass::backward ? "B" : "W";
    return std::string(letter) + " " + std::to_string(i) + (chunks > 1 ? " of chunk " + std::to_string(c) : "");
  };
  bool has_weight_tasks = false;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const int i = tasks[k].micro_batch, c = tasks[k].chunk;
    const Pass pass = tasks[k].pass;
    if (pass != Pass::forward && pass != Pass::backward && pass != Pass::weight)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is neither a forward, a backward nor a W");
    const std::string task = name(pass, i, c);
    if (i < 0 || i >= micro_batches)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is " + task +
                                  ", but the micro-batches are 0 … " + std::to_string(micro_batches - 1));
    if (c < 0 || c >= chunks)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " is " + task + ", but the chunks are 0 … " +
                                  std::to_string(chunks - 1));
    const size_t slot = static_cast<size_t>(c) * static_cast<size_t>(micro_batches) + static_cast<size_t>(i);
    if (seen[static_cast<size_t>(pass)][slot]++ > 0)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " a second time");
    const Pass before = pass == Pass::weight ? Pass::backward : Pass::forward;
    if (pass != Pass::forward && seen[static_cast<size_t>(before)][slot] == 0)
      throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " before " + name(before, i, c) +
                                  (pass == Pass::backward ? " — a backward needs its forward's activations"
                                                          : " — W takes what B keeps for it"));
    const size_t chunk = static_cast<size_t>(c);
    if (pass == Pass::forward) {
      forward_order[chunk].push_back(i);
    } else if (pass == Pass::backward) {
      backward_order[chunk].push_back(i);
      const int due = forward_order[chunk][backwards_run[chunk]++];
      // Each layer keeps the inputs of its forwards in a queue and its backward takes the oldest
      // (Linear::backward), so a chunk's backwards must come in the order of its forwards.
      if (due != i)
        throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " where " +
                                    name(Pass::backward, due, c) +
                                    " is due — the backwards run in the order of the forwards (each layer keeps its "
                                    "inputs in a queue, oldest first)");
    } else {
      has_weight_tasks = true;
      const int due = backward_order[chunk][weights_run[chunk]++];
      if (due != i)
        throw Error("pipeline", where + ": task " + std::to_string(k) + " runs " + task + " where " +
                                    name(Pass::weight, due, c) +
                                    " is due — the Ws run in the order of the backwards (B keeps W's inputs in a "
                                    "queue, oldest first)");
    }
  }
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < micro_batches; ++i) {
      const size_t slot = static_cast<size_t>(c) * static_cast<size_t>(micro_batches) + static_cast<size_t>(i);
      for (Pass pass : {Pass::forward, Pass::backward})
        if (seen[static_cast<size_t>(pass)][slot] == 0)
          throw Error("pipeline", where + " never runs " + name(pass, i, c) +
                                      " — every micro-batch needs its forward and its backward" +
                                      (chunks > 1 ? " through every chunk" : ""));
      if (has_weight_tasks && seen[static_cast<size_t>(Pass::weight)][slot] == 0)
        throw Error("pipeline", where + " never runs " + name(Pass::weight, i, c) +
                                    " — a list with W tasks needs one for every backward (its B leaves the weights' "
                                    "gradients to it)");
    }
}

// ---------------------------------------------------------------------------------------------
// The programs: a stage's tasks with its receives and sends in between.

bool PipelineLinks::receives(int stage, const Task& t) const {
  if (t.pass == Pass::weight) return false;  // W works on what its B kept
  return t.pass == Pass::forward ? virtual_stage(stage, t) > 0 : virtual_stage(stage, t) < stages * chunks - 1;
}
bool PipelineLinks::sends(int stage, const Task& t) const {
  if (t.pass == Pass::weight) return false;  // the weights' gradients stay on their stage
  return t.pass == Pass::forward ? virtual_stage(stage, t) < stages * chunks - 1 : virtual_stage(stage, t) > 0;
}
int PipelineLinks::peer_of_input(int stage, const Task& t) const {
  return (stage + (t.pass == Pass::forward ? stages - 1 : 1)) % stages;
}
int PipelineLinks::peer_of_output(int stage, const Task& t) const {
  return (stage + (t.pass == Pass::forward ? 1 : stages - 1)) % stages;
}

PipelineProgram stage_program(const std::vector<Task>& tasks, int stages, int stage) {
  const PipelineLinks links{stages, 1};
  PipelineProgram program;
  // A backward's gradient held back: a backward followed by a forward (its Ws between them run
  // first) receives that forward's input before it sends the gradient (strategies/pipeline.cpp).
  std::optional<Task> held;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const Task& t = tasks[k];
    if (links.receives(stage, t)) program.push_back({PipelineOp::receive, t});
    if (held && t.pass == Pass::forward) {
      program.push_back({PipelineOp::send, *held});
      held.reset();
    }
    program.push_back({PipelineOp::compute, t});
    if (!links.sends(stage, t)) continue;
    size_t after = k + 1;
    while (after < tasks.size() && tasks[after].pass == Pass::weight) ++after;
    if (t.pass == Pass::backward && after < tasks.size() && tasks[after].pass == Pass::forward &&
        links.receives(stage, tasks[after]))
      held = t;
    else
      program.push_back({PipelineOp::send, t});
  }
  return program;
}

namespace {

// A message: the data a task's output carries to the next virtual stage, named by that task and its stage.
using Message = std::tuple<int, int, int, int>;  // (sending stage, pass, micro-batch, chunk)
Message message_of(int stage, const Task& t) { return {stage, static_cast<int>(t.pass), t.micro_batch, t.chunk}; }

// The task of stage `to` that takes message `m` as its input.
Task consumer_of(const Message& m, int stages) {
  const auto [from, pass, i, chunk] = m;
  const int to = chunk * stages + from + (pass == static_cast<int>(Pass::forward) ? 1 : -1);  // virtual stage
  return {static_cast<Pass>(pass), i, to / stages};
}

std::string text_of(const Task& t, int chunks) {
  return std::string(t.pass == Pass::forward ? "F " : t.pass == Pass::backward ? "B " : "W ") + std::to_string(t.micro_batch) +
         (chunks > 1 ? " of chunk " + std::to_string(t.chunk) : "");
}

}  // namespace

std::vector<PipelineProgram> timed_programs(const std::vector<std::vector<Task>>& tasks, int chunks) {
  const int p = static_cast<int>(tasks.size());
  const PipelineLinks links{p, chunks};
  // 1. Time the tasks: each starts when its stage is free and its input has arrived.
  std::map<Message, int64_t> done;  // when each output is ready to go
  std::vector<size_t> next(static_cast<size_t>(p));
  std::vector<int64_t> free(static_cast<size_t>(p));
  // Events in one order for every stage: (time, 0 for a message | 1 for a computation, message or
  // stage, its op). A message moves at the time it is ready, before any task that starts then.
  std::vector<std::tuple<int64_t, int, Message, int, PipelineOp>> events;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const std::vector<Task>& list = tasks[static_cast<size_t>(s)];
      int64_t& stage_free = free[static_cast<size_t>(s)];
      for (size_t& k = next[static_cast<size_t>(s)]; k < list.size(); ++k) {
        const Task& t = list[k];
        int64_t start = stage_free;
        if (links.receives(s, t)) {
          const int sender_virtual_stage = links.virtual_stage(s, t) + (t.pass == Pass::forward ? -1 : 1);
          const auto input = done.find({links.peer_of_input(s, t), static_cast<int>(t.pass), t.micro_batch,
                                        sender_virtual_stage / p});
          if (input == done.end()) break;  // not yet computed: come back to this stage later
          start = std::max(start, input->second);
        }
        stage_free = start + (t.pass == Pass::backward ? 2 : 1);
        events.emplace_back(start, 1, Message{}, s, PipelineOp{PipelineOp::compute, t});
        if (links.sends(s, t)) done[message_of(s, t)] = stage_free;
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    const std::vector<Task>& list = tasks[static_cast<size_t>(s)];
    const size_t k = next[static_cast<size_t>(s)];
    if (k < list.size())
      throw Error("pipeline", "stage " + std::to_string(s) + "'s " + text_of(list[k], chunks) +
                                  " waits for an input that no stage's list computes before waiting itself");
  }
  for (const auto& [m, at] : done) events.emplace_back(at, 0, m, -1, PipelineOp{PipelineOp::send, {}});
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a), std::get<2>(a), std::get<3>(a)) <
           std::tie(std::get<0>(b), std::get<1>(b), std::get<2>(b), std::get<3>(b));
  });
  // 2. Each stage's program: its events in that order, a message being a send on its sender and a
  //    receive on its receiver.
  std::vector<PipelineProgram> programs(static_cast<size_t>(p));
  for (const auto& [at, kind, m, s, op] : events) {
    if (kind == 1) {
      programs[static_cast<size_t>(s)].push_back(op);
      continue;
    }
    const int from = std::get<0>(m);
    const Task produced{static_cast<Pass>(std::get<1>(m)), std::get<2>(m), std::get<3>(m)};
    programs[static_cast<size_t>(from)].push_back({PipelineOp::send, produced});
    programs[static_cast<size_t>(links.peer_of_output(from, produced))].push_back(
        {PipelineOp::receive, consumer_of(m, p)});
  }
  return programs;
}

void check_pipeline_programs(const std::vector<PipelineProgram>& programs, int chunks) {
  const int p = static_cast<int>(programs.size());
  const PipelineLinks links{p, chunks};
  std::vector<size_t> at(static_cast<size_t>(p));  // each stage's next op
  auto next_op = [&](int s) -> const PipelineOp* {
    const PipelineProgram& program = programs[static_cast<size_t>(s)];
    const size_t k = at[static_cast<size_t>(s)];
    return k < program.size() ? &program[k] : nullptr;
  };
  auto op_text = [&](int s) {
    const PipelineOp& op = *next_op(s);
    const char* what = op.kind == PipelineOp::receive ? "receives the input of "
                       : op.kind == PipelineOp::send  ? "sends the output of "
                                                      : "computes ";
    return "stage " + std::to_string(s) + " " + what + text_of(op.task, chunks);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      for (; next_op(s) && next_op(s)->kind == PipelineOp::compute; ++at[static_cast<size_t>(s)]) progress = true;
      if (!next_op(s) || next_op(s)->kind != PipelineOp::send) continue;
      // A send meets the receive its peer is at, if that one receives from this stage.
      const Task& sent = next_op(s)->task;
      const int to = links.peer_of_output(s, sent);
      const PipelineOp* there = next_op(to);
      if (!there || there->kind != PipelineOp::receive || links.peer_of_input(to, there->task) != s) continue;
      const Task expected = consumer_of(message_of(s, sent), p);
      if (std::tie(there->task.pass, there->task.micro_batch, there->task.chunk) !=
          std::tie(expected.pass, expected.micro_batch, expected.chunk))
        throw Error("pipeline", op_text(s) + " while stage " + std::to_string(to) + " receives the input of " +
                                    text_of(there->task, chunks) + " from it — the two lists cross this link in different orders");
      ++at[static_cast<size_t>(s)];
      ++at[static_cast<size_t>(to)];
      progress = true;
    }
  }
  std::string waiting;
  for (int s = 0; s < p; ++s)
    if (next_op(s)) waiting += (waiting.empty() ? "" : "; ") + op_text(s);
  if (!waiting.empty()) throw Error("pipeline", "the stages wait on each other for ever: " + waiting);
}

}  // namespace scalelab
