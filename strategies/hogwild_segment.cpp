#include "strategies/hogwild_segment.h"

#include "core/nn/optimizer.h"
#include "core/proc/child_device.h"
#include "core/proc/commands.h"

namespace scalelab::hogwild {
namespace {

// What a device's description takes in a message (core/trace/wire.cpp: three strings and its capacity).
int64_t description_bytes(const DeviceDescription& d) {
  return static_cast<int64_t>(d.name.size() + d.label.size() + d.profile.size()) + 3 * 8 + 8;
}

}  // namespace

Layout::Layout(const StrategyContext& ctx)
    : config(ctx.config),
      devices(with_parent_epoch(ctx.device_options, *ctx.devices.front())),
      workers(static_cast<int>(ctx.devices.size())),
      features(ctx.initial_weights.spec.inputs()),
      labels(ctx.initial_weights.spec.labels_per_sample()),
      max_rows((config.batch + workers - 1) / workers),
      segment(command_block_bytes(workers)),
      params(ctx.initial_weights.spec, segment),
      slots(segment.place(workers * int64_t{sizeof(RoundSlot)})),
      shards(segment.place_each(workers, max_rows * (features + labels) * 4)),
      // A round records 2 uploads, ≤ 2 ops per layer forward, the loss, ≤ 3 per layer backward and
      // an update per parameter: 7L + 3 events of ~100 bytes (a transformer block is some 40 ops,
      // and 12 parameters), and the ledger — whose description carries a sim device's whole profile
      // (a calibrated one with its raw measurements: 15 KB).
      outboxes(segment.place_each(workers, MessageArea::bytes_for((48 * params.spec().layer_count() +
                                                                   2 * static_cast<int64_t>(params.numel().size()) + 16) * 256 + 4096 +
                                                                  description_bytes(ctx.devices.front()->description())))),
      state_bytes(MessageArea::bytes_for(buffers_bytes(params.numel(), optimizer_state_tensors(config.optimizer)))),
      state(segment.place(state_bytes, 4096)) {}

}  // namespace scalelab::hogwild
