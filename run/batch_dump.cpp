// --dump-batches: which samples each step trained on, as indices into the training set.
#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "run/run_parts.h"

namespace scalelab {

void BatchDump::record(int64_t step) {
  const int64_t b = run_.config.batch, first = (step % run_.per_epoch) * b;
  const std::vector<int64_t>& order = run_.loader->order();
  steps_.emplace_back(step, std::vector<int64_t>(order.begin() + first, order.begin() + first + b));
}

void BatchDump::write() const {
  using Shards = StrategyInfo::BatchShards;
  const Shards rule = run_.info.batch_shards;
  const int n = rule == Shards::whole ? 1 : run_.config.devices / std::max(1, run_.info.devices_per_rank);
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& [step, global] : steps_) {
    const int64_t rows = static_cast<int64_t>(global.size()) / n;
    nlohmann::json shards = nlohmann::json::array();
    for (int k = 0; k < n; ++k) {
      std::vector<int64_t> shard(static_cast<size_t>(rows));
      for (int64_t j = 0; j < rows; ++j)  // the strategies' own rules: distributed_sampler.h, data_parallel.cpp
        shard[static_cast<size_t>(j)] = global[static_cast<size_t>(rule == Shards::interleaved ? j * n + k : k * rows + j)];
      shards.push_back(shard);
    }
    steps.push_back({{"step", step}, {"epoch", step / run_.per_epoch}, {"global", global}, {"shards", shards}});
  }
  const char* names[] = {"whole", "interleaved", "contiguous"};
  const nlohmann::json j{{"strategy", run_.config.strategy},
                         {"batch", run_.config.batch},
                         {"shards", n},
                         {"shard_rule", names[static_cast<int>(rule)]},
                         {"seed", run_.config.seed},
                         {"steps", steps}};
  write_file_atomically(run_.config.dump_batches_path, j.dump() + "\n", "dump-batches");
}

}  // namespace scalelab
