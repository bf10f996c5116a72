#pragma once
// The shared-memory segment of the multiprocessing strategy (Hogwild, strategies/multiprocessing.cpp):
// what lies where, so that the parent and its forked workers — each mapping the segment at an
// address of its own — find the same things at the same offsets. The lesson (share the model,
// fork the workers, each trains on its shard, lock-free updates) stays in multiprocessing.cpp.
//
//   commands (core/proc/commands.h) | PARAMETERS (the model they all train) | per worker: its round
//   slot, its shard of the batch, its outbox (the round's events and ledger) | the optimizer state
//
// Nothing in it is locked, least of all the parameters; the command protocol orders the rest: the
// parent writes a worker's order and shard before it issues the command, the worker its result and
// outbox before it reports.
#include <cstdint>
#include <string>

#include "core/device/device.h"
#include "core/proc/layout.h"
#include "core/proc/message_area.h"
#include "core/nn/shared_weights.h"
#include "strategies/strategy.h"

namespace scalelab::hogwild {

// What the parent hands worker r for a round: the step, the rows of its shard, when the shard is
// ready (on the simulated clock), and the optimizer's step count to take on (load_state only).
struct RoundOrder {
  int64_t step = -1, rows = 0, start_ns = 0, optimizer_steps = 0;
};
// What worker r reports back: its rows' summed loss, how many, its optimizer's step count.
struct RoundResult {
  double loss_sum = 0;
  int64_t rows = 0, optimizer_steps = 0;
};
// Worker r's place for the two: each on a cache line of its own, since each has one writer.
struct RoundSlot {
  alignas(64) RoundOrder order;
  alignas(64) RoundResult result;
};

// Where everything lies in the segment, and the run each worker needs to make its device and
// model. The parent makes it before it forks, so every worker has it as it was.
struct Layout {
  TrainConfig config;
  DeviceOptions devices;  // the run's: each worker makes its own device by them
  int workers;
  int64_t features, labels, max_rows;  // a shard: up to max_rows rows of `features` floats and `labels` labels
  SegmentLayout segment;
  SharedWeights params;
  int64_t slots;                // offset of the RoundSlots, one per worker
  Areas shards, outboxes;       // one of each per worker
  int64_t state_bytes, state;   // the optimizer state on its way out or in: its size, its offset

  explicit Layout(const StrategyContext& ctx);
};

// One process's mapping of the segment: its own address of it, and the layout to find things by.
struct Mapping {
  char* base;
  const Layout* layout;

  RoundSlot& slot(int r) const { return reinterpret_cast<RoundSlot*>(base + layout->slots)[r]; }
  float* shard_x(int r) const { return reinterpret_cast<float*>(layout->shards.at(base, r)); }
  int32_t* shard_y(int r) const { return reinterpret_cast<int32_t*>(shard_x(r) + layout->max_rows * layout->features); }
  MessageArea outbox(int r) const {
    return {layout->outboxes.at(base, r), layout->outboxes.bytes, "worker " + std::to_string(r) + "'s outbox"};
  }
  MessageArea state() const { return {base + layout->state, layout->state_bytes, "the optimizer state's area"}; }
};

}  // namespace scalelab::hogwild
