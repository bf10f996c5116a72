#include "core/checkpoint/checkpoint.h"

#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/nn/loss_scaler.h"

namespace scalelab {

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian, as this host is");

namespace {

constexpr size_t kPrefixBytes = 24;  // magic, version, size, the prefix's CRC

uint32_t crc32_of(const char* data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(::crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), n));
}

// Appends fixed-size values and length-prefixed strings and arrays.
class Writer {
 public:
  template <typename T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void put_floats(const std::vector<float>& v) {
    put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Reads what Writer wrote; every read is bounds-checked (the checksum has passed by then, so a
// failure here means a writer bug rather than a damaged file — still an error, never a crash).
class Reader {
 public:
  Reader(const std::string& bytes, size_t first, size_t end, const std::string& path)
      : bytes_(bytes), pos_(first), end_(end), path_(path) {}

  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<float> get_floats() {
    const uint64_t n = get<uint64_t>();
    if (n > (end_ - pos_) / sizeof(float)) malformed("an array of " + std::to_string(n) + " values");
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), bytes_.data() + pos_, static_cast<size_t>(n) * sizeof(float));
    pos_ += static_cast<size_t>(n) * sizeof(float);
    return v;
  }
  // A u32 count of entries of at least `min_bytes` each, refused when the file cannot hold them.
  uint32_t get_count(size_t min_bytes, const char* what) {
    const uint32_t n = get<uint32_t>();
    if (n > (end_ - pos_) / min_bytes) malformed(std::to_string(n) + " " + what);
    return n;
  }
  size_t position() const { return pos_; }
  [[noreturn]] void malformed(const std::string& what) const {
    throw Error("checkpoint", path_ + ": malformed at byte " + std::to_string(pos_) + " (" + what +
                                  ") although its checksum is right — it was not written by this version of "
                                  "scalelab; use a checkpoint written by it");
  }

 private:
  void need(size_t n) const {
    if (n > end_ - pos_) malformed(std::to_string(n) + " more bytes than the file has");
  }
  const std::string& bytes_;
  size_t pos_, end_;
  const std::string& path_;
};

// The shortest text that reads back as the same float: 0.9, not 0.899999976.
std::string number(float v) {
  char buf[32];
  for (int digits = 6; digits < 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// The numbers a CRC cannot vouch for: a file altered and re-summed, or written by a broken run.
// A NaN or infinite loss scale skips every step; a negative step count or Adam step bends the
// bias correction; a non-finite weight poisons the first step. Refused here, before a run
// continues from them.
void check_numbers(const Checkpoint& ck, const std::string& path) {
  auto refuse = [&](const std::string& what) {
    throw Error("checkpoint", path + ": " + what +
                                  " — the file was altered or written by a broken run; use an earlier checkpoint, or "
                                  "start afresh without --resume");
  };
  const CheckpointHeader& h = ck.header;
  const TrainingState& s = ck.state;
  if (h.step < 0) refuse("step " + std::to_string(h.step) + ": a count of steps done cannot be negative");
  if (s.optimizer_steps < 0)
    refuse("the optimizer's step count is " + std::to_string(s.optimizer_steps) + ": it cannot be negative");
  const OptimizerConfig& o = h.optimizer;
  for (const auto& [name, v] : {std::pair<const char*, float>{"learning rate", o.lr}, {"momentum", o.momentum},
                                {"weight decay", o.weight_decay}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}})
    if (!std::isfinite(v)) refuse(std::string("the optimizer's ") + name + " is " + number(v) + ": it must be finite");
  // The fp16 loss scaler's state; every other --amp has none and writes 0.
  const int64_t growth_interval = LossScalerOptions{}.growth_interval;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", s.loss_scale);
  if (h.amp == "fp16") {
    // The scaler keeps it as a float and divides by it: it must be a normal float (above FLT_MAX
    // it would be inf, below FLT_MIN its inverse would be).
    if (!(s.loss_scale >= std::numeric_limits<float>::min() && s.loss_scale <= std::numeric_limits<float>::max()))
      refuse(std::string("the fp16 loss scale is ") + scale + ": it must be a positive finite float, at least 1.2e-38 "
                                                             "(a run starts at 65536)");
    if (s.scaler_good_steps < 0 || s.scaler_good_steps >= growth_interval)
      refuse("the loss scaler's good steps in a row are " + std::to_string(s.scaler_good_steps) + ": they run from 0 to " +
             std::to_string(growth_interval - 1) + " (the scale grows after " + std::to_string(growth_interval) + ")");
  } else if (s.loss_scale != 0 || s.scaler_good_steps != 0) {
    refuse(std::string("a loss scaler's state (scale ") + scale + ", " +
           std::to_string(s.scaler_good_steps) + " good steps) with --amp " + h.amp + ", which has no loss scaler");
  }
  // Weights and optimizer state: finite; Adam's second moment (a mean of squares) not negative.
  auto check_finite = [&](const std::vector<float>& values, const std::string& what) {
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i])) refuse(what + " holds " + number(values[i]) + " at index " + std::to_string(i));
  };
  const std::vector<TensorSpec>& tensors = s.weights.spec.tensors();
  auto parameter = [&](size_t p) { return p < tensors.size() ? tensors[p].name : "parameter " + std::to_string(p); };
  for (size_t p = 0; p < s.weights.values.size(); ++p) check_finite(s.weights.values[p], parameter(p));
  for (size_t p = 0; p < s.optimizer.size(); ++p)
    for (size_t k = 0; k < s.optimizer[p].size(); ++k) {
      const std::vector<float>& t = s.optimizer[p][k];
      check_finite(t, "the optimizer state of " + parameter(p));
      if (o.kind == "adam" && k == 1)
        for (size_t i = 0; i < t.size(); ++i)
          if (t[i] < 0) refuse("Adam's exp_avg_sq of " + parameter(p) + " holds " + number(t[i]) + " at index " +
                               std::to_string(i) + ": a mean of squares cannot be negative");
    }
}

}  // namespace

std::string encode_checkpoint(const Checkpoint& ck) {
  const CheckpointHeader& h = ck.header;
  const TrainingState& s = ck.state;
  Writer w;
  // 1. The prefix: magic, version, and room for the size and its CRC (filled in at the end).
  w.bytes().append(kCheckpointMagic, sizeof kCheckpointMagic);
  w.put<uint32_t>(kCheckpointVersion);
  w.put<uint64_t>(0);
  w.put<uint32_t>(0);
  // 2. The header: what the run was.
  w.put_string(h.model);
  w.put_string(h.optimizer.kind);
  for (float v : {h.optimizer.lr, h.optimizer.momentum, h.optimizer.weight_decay, h.optimizer.beta1, h.optimizer.beta2,
                  h.optimizer.eps})
    w.put<float>(v);
  w.put_string(h.dataset);
  w.put<int64_t>(h.train_count);
  w.put<int64_t>(h.batch);
  w.put<uint64_t>(h.seed);
  w.put_string(h.amp);
  w.put<int64_t>(h.step);
  w.put_string(h.strategy);
  w.put<int32_t>(h.devices);
  // 3. The training state: weights layer by layer (an MLP's W, b; each layer's tensors in
  //    state_dict order), the optimizer's state per parameter, the loss scaler.
  w.put<uint32_t>(static_cast<uint32_t>(s.weights.spec.layer_count()));
  for (const std::vector<float>& v : s.weights.values) w.put_floats(v);
  w.put<int64_t>(s.optimizer_steps);
  w.put<uint32_t>(static_cast<uint32_t>(s.optimizer.size()));
  for (const auto& tensors : s.optimizer) {
    w.put<uint32_t>(static_cast<uint32_t>(tensors.size()));
    for (const auto& t : tensors) w.put_floats(t);
  }
  w.put<double>(s.loss_scale);
  w.put<int64_t>(s.scaler_good_steps);
  // 4. The size (the CRC to come included), the prefix's CRC, and the CRC of everything.
  std::string& out = w.bytes();
  const uint64_t size = out.size() + sizeof(uint32_t);
  std::memcpy(out.data() + 12, &size, sizeof size);
  const uint32_t prefix_crc = crc32_of(out.data(), 20);
  std::memcpy(out.data() + 20, &prefix_crc, sizeof prefix_crc);
  w.put<uint32_t>(crc32_of(out.data(), out.size()));
  return std::move(out);
}

Checkpoint decode_checkpoint(const std::string& bytes, const std::string& path) {
  auto fail = [&](const std::string& why) { return Error("checkpoint", path + ": " + why); };
  const std::string use_earlier = "; use an earlier checkpoint";
  // 1. The prefix: is it ours, and is it intact?
  const size_t n = bytes.size();
  if (n >= sizeof kCheckpointMagic && std::memcmp(bytes.data(), kCheckpointMagic, sizeof kCheckpointMagic) != 0)
    throw fail("not a scalelab checkpoint (it does not begin with SCLBCKPT) — pass a file written by "
               "`scalelab train --checkpoint`");
  if (n < kPrefixBytes)
    throw fail("truncated (" + std::to_string(n) + " bytes, not even the " + std::to_string(kPrefixBytes) +
               "-byte header) — the file is incomplete" + use_earlier);
  uint32_t version = 0, prefix_crc = 0;
  uint64_t size = 0;
  std::memcpy(&version, bytes.data() + 8, sizeof version);
  std::memcpy(&size, bytes.data() + 12, sizeof size);
  std::memcpy(&prefix_crc, bytes.data() + 20, sizeof prefix_crc);
  if (crc32_of(bytes.data(), 20) != prefix_crc) throw fail("checksum mismatch — the file is corrupt" + use_earlier);
  if (version != kCheckpointVersion)
    throw fail("format version " + std::to_string(version) + ", this scalelab reads version " +
               std::to_string(kCheckpointVersion) + " — resume it with the scalelab that wrote it");
  // 2. All of it there, and every byte as written?
  if (n < size)
    throw fail("truncated (" + std::to_string(n) + " of " + std::to_string(size) +
               " bytes) — the file is incomplete" + use_earlier);
  if (n > size)
    throw fail(std::to_string(n) + " bytes where its header says " + std::to_string(size) +
               " — the file is corrupt (data after its end)" + use_earlier);
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + n - sizeof crc, sizeof crc);
  if (crc32_of(bytes.data(), n - sizeof crc) != crc) throw fail("checksum mismatch — the file is corrupt" + use_earlier);

  // 3. Now its contents can be trusted: the header, then the state.
  Reader r(bytes, kPrefixBytes, n - sizeof crc, path);
  Checkpoint ck;
  CheckpointHeader& h = ck.header;
  h.model = r.get_string();
  h.optimizer.kind = r.get_string();
  for (float* v : {&h.optimizer.lr, &h.optimizer.momentum, &h.optimizer.weight_decay, &h.optimizer.beta1,
                   &h.optimizer.beta2, &h.optimizer.eps})
    *v = r.get<float>();
  h.dataset = r.get_string();
  h.train_count = r.get<int64_t>();
  h.batch = r.get<int64_t>();
  h.seed = r.get<uint64_t>();
  h.amp = r.get_string();
  h.step = r.get<int64_t>();
  h.strategy = r.get_string();
  h.devices = r.get<int32_t>();

  TrainingState& s = ck.state;
  try {
    s.weights.spec = ModelSpec::parse(h.model);
  } catch (const Error&) {
    r.malformed("its model '" + h.model + "' is not a model spec");
  }
  const uint32_t layers = r.get<uint32_t>();
  if (static_cast<int>(layers) != s.weights.spec.layer_count())
    r.malformed(std::to_string(layers) + " layers for " + h.model);
  for (const TensorSpec& t : s.weights.spec.tensors()) {
    s.weights.values.push_back(r.get_floats());
    if (static_cast<int64_t>(s.weights.values.back().size()) != t.numel())
      r.malformed(t.name + " has the wrong number of weights for " + h.model);
  }
  s.optimizer_steps = r.get<int64_t>();
  // Counts are bounded by the bytes left (each entry takes at least 4, each tensor 8), so a
  // damaged count cannot ask for billions of entries.
  s.optimizer.resize(r.get_count(4, "optimizer entries"));
  for (auto& tensors : s.optimizer) {
    tensors.resize(r.get_count(8, "optimizer tensors"));
    for (auto& t : tensors) t = r.get_floats();
  }
  s.loss_scale = r.get<double>();
  s.scaler_good_steps = r.get<int64_t>();
  if (r.position() != n - sizeof crc) r.malformed("bytes left over after the training state");
  return ck;
}

namespace {

Checkpoint read_checkpoint(const std::string& path) {
  // A directory, a FIFO, /dev/zero or a symlink loop is refused before anything is read.
  const std::string bytes = read_regular_file(path, "checkpoint", int64_t{1} << 38,
                                              "check the path given to --resume: a checkpoint file written by --checkpoint");
  return decode_checkpoint(bytes, path);
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  // Read back and checked (magic, size, CRC, every field) before it replaces the previous one.
  // Its numbers are not judged here: a run kept going by --allow-divergence saves what it has.
  write_file_atomically(path, encode_checkpoint(checkpoint), "checkpoint",
                        [&](const std::string& written) { read_checkpoint(written); });
}

Checkpoint load_checkpoint(const std::string& path) {
  Checkpoint ck = read_checkpoint(path);
  check_numbers(ck, path);
  return ck;
}

void check_resumable(const CheckpointHeader& saved, const CheckpointHeader& now, const std::string& path) {
  auto differs = [&](const std::string& option, const std::string& then, const std::string& here) {
    throw UsageError("checkpoint", path + ": was written for " + option + " " + then + ", this run has " + here +
                                       " — pass " + option + " " + then + " to resume it (or start afresh without --resume)");
  };
  if (!ModelSpec::parse(saved.model).same_model(ModelSpec::parse(now.model)))
    differs("--model", saved.model, now.model);
  const OptimizerConfig &a = saved.optimizer, &b = now.optimizer;
  if (a.kind != b.kind) differs("--optimizer", a.kind, b.kind);
  if (a.lr != b.lr) differs("--lr", number(a.lr), number(b.lr));
  if (a.weight_decay != b.weight_decay) differs("--weight-decay", number(a.weight_decay), number(b.weight_decay));
  if (a.kind == "sgd" && a.momentum != b.momentum) differs("--momentum", number(a.momentum), number(b.momentum));
  if (a.kind == "adam" && (a.beta1 != b.beta1 || a.beta2 != b.beta2 || a.eps != b.eps))
    throw UsageError("checkpoint", path + ": was written with Adam betas (" + number(a.beta1) + ", " + number(a.beta2) +
                                       ") and eps " + number(a.eps) + ", this run has (" + number(b.beta1) + ", " +
                                       number(b.beta2) + ") and " + number(b.eps) + " — resume with the same Adam settings");
  if (saved.dataset != now.dataset) differs("--dataset", saved.dataset, now.dataset);
  if (saved.train_count != now.train_count)
    throw UsageError("checkpoint", path + ": was written for a training set of " + std::to_string(saved.train_count) +
                                       " samples, this run's has " + std::to_string(now.train_count) +
                                       " — the data order would differ; resume on the same data");
  if (saved.batch != now.batch) differs("--batch", std::to_string(saved.batch), std::to_string(now.batch));
  if (saved.seed != now.seed) differs("--seed", std::to_string(saved.seed), std::to_string(now.seed));
  if (saved.amp != now.amp) differs("--amp", saved.amp, now.amp);
}

}  // namespace scalelab
