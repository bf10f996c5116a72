// ProcessGroup::gather_bytes: arbitrary host bytes to one rank, through the backend's own
// point-to-point path but outside the device (no clock, no ledger, no events): what it carries —
// a rank's trace and summary at the end of a run — must not change what it describes.
#include <cstring>

#include "core/comm/process_group.h"
#include "core/error.h"

namespace scalelab {

namespace {

// A tensor over host memory that belongs to no device: the backends copy its bytes, nothing
// records or frees them.
Tensor host_view(void* data, int64_t words) {
  auto storage = std::make_shared<Storage>();
  storage->data = data;
  storage->bytes = words * 4;
  return Tensor(std::move(storage), {words}, DType::i32);
}

}  // namespace

std::vector<std::vector<uint8_t>> ProcessGroup::gather_bytes(const std::vector<uint8_t>& mine, int root) {
  if (root < 0 || root >= size_)
    throw Error("comm", "gather_bytes: root " + std::to_string(root) + " is not a rank of this group of " +
                            std::to_string(size_));
  drain_queue();  // after every asynchronous call this rank has issued
  std::vector<std::vector<uint8_t>> all;
  // Sizes first (as two 32-bit words), then the bytes, padded to whole words; root receives from
  // each rank in rank order, so every send has its matching receive.
  auto words_for = [](uint64_t bytes) { return static_cast<int64_t>((bytes + 3) / 4); };
  std::vector<Chunk> ignored;  // the backends report their steps here; nothing is traced
  if (rank_ != root) {
    uint64_t size = mine.size();
    Tensor size_t_view = host_view(&size, 2);
    run(Call{Collective::send, ReduceOp::sum, &size_t_view, nullptr, root, &ignored});
    std::vector<uint8_t> padded(mine);
    padded.resize(static_cast<size_t>(words_for(size)) * 4);
    if (!padded.empty()) {
      Tensor payload = host_view(padded.data(), words_for(size));
      run(Call{Collective::send, ReduceOp::sum, &payload, nullptr, root, &ignored});
    }
    return all;
  }
  all.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == root) {
      all[static_cast<size_t>(r)] = mine;
      continue;
    }
    uint64_t size = 0;
    Tensor size_view = host_view(&size, 2);
    run(Call{Collective::recv, ReduceOp::sum, nullptr, &size_view, r, &ignored});
    std::vector<uint8_t>& bytes = all[static_cast<size_t>(r)];
    bytes.resize(static_cast<size_t>(words_for(size)) * 4);
    if (!bytes.empty()) {
      Tensor payload = host_view(bytes.data(), words_for(size));
      run(Call{Collective::recv, ReduceOp::sum, nullptr, &payload, r, &ignored});
    }
    bytes.resize(size);
  }
  return all;
}

}  // namespace scalelab
