#pragma once
// Checkpoints: save a run, and continue it later — exactly, under any strategy and any number of
// devices. As the lecture's save_checkpoint / torch.load, with what a long run on a shared cluster
// needs besides: rank 0 writes while the other ranks wait at a barrier; the file is written
// atomically (a temporary file, fsync, rename: a run killed while saving leaves the previous
// checkpoint whole); and loading verifies the file before trusting a byte of it.
//
// The file, little-endian:
//
//   offset 0   magic "SCLBCKPT"              8 bytes
//          8   format version                u32 (kCheckpointVersion)
//         12   file size                     u64, every byte of the file, this field included
//         20   CRC-32 of bytes [0, 20)       u32: a flipped size is "corrupt", not "truncated"
//         24   header                        what the run was: model, optimizer, data, seed, step
//              training state                weights, optimizer state per parameter, loss scaler
//   size − 4   CRC-32 of bytes [0, size − 4) u32
//
// Nothing in it depends on the strategy that wrote it: the weights and the optimizer state are
// whole, in the model's parameter order (core/checkpoint/training_state.h).
#include <cstdint>
#include <string>

#include "core/checkpoint/training_state.h"
#include "core/nn/optimizer.h"

namespace scalelab {

inline constexpr char kCheckpointMagic[8] = {'S', 'C', 'L', 'B', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;

// What the run was. Everything that must match for a resumed run to continue the same training;
// the strategy and the number of devices are recorded for people, and may differ on resume.
struct CheckpointHeader {
  std::string model;      // the --model spec, as given: "mlp:784-256-128-10"
  OptimizerConfig optimizer;
  std::string dataset;    // fashion-mnist | synthetic
  int64_t train_count = 0;  // samples in the training set: the loader's permutation is over them
  int64_t batch = 0;
  uint64_t seed = 0;      // initial weights and every epoch's data order (Loader: seed, epoch)
  std::string amp = "off";
  int64_t step = 0;       // steps completed: the next run starts with step `step`
  std::string strategy;   // who wrote it (information)
  int devices = 0;
};

struct Checkpoint {
  CheckpointHeader header;
  TrainingState state;
};

// The bytes of the file, and back. decode verifies magic, version, size and checksum first and
// throws Error("checkpoint", "<path>: …") saying what is wrong and what to do.
std::string encode_checkpoint(const Checkpoint& checkpoint);
Checkpoint decode_checkpoint(const std::string& bytes, const std::string& path);

// Writes atomically (write_file_atomically): the file at `path` is the old one or the new one.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Also refuses numbers no healthy run writes (Error("checkpoint", "<path>: …")): a negative step
// count, a non-finite weight or optimizer state, an fp16 loss scale that is not a positive finite
// float — a CRC proves only that the bytes are those written.
Checkpoint load_checkpoint(const std::string& path);

// Throws UsageError("checkpoint", …) naming the option that differs between the checkpoint and
// this run (--model, --optimizer, --lr, …, --dataset, --batch, --seed, --amp) and how to fix it.
void check_resumable(const CheckpointHeader& saved, const CheckpointHeader& now, const std::string& path);

}  // namespace scalelab
