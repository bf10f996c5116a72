#include "core/data/dataset.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/memory_ledger.h"
#include "core/proc/host_memory.h"
#include "core/rng.h"

namespace scalelab {

namespace fs = std::filesystem;

namespace {

// Reads a whole IDX file; gzopen reads plain files too, so .gz and raw take the same path.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (fs::symlink_status(path, ec).type() == fs::file_type::not_found)
      throw Error("data", path + ": not found — apt-get install dataset-fashion-mnist, pass --data-dir DIR, "
                                 "or pass --dataset synthetic");
    // A FIFO would block gzopen, /dev/zero would read without end: only a regular file is read.
    size_ = check_regular_file(path, "data", int64_t{4} << 30, "the IDX files must be regular files");
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw Error("data", path + ": cannot open — check its permissions");
  }
  ~GzFile() {
    if (file_) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly n bytes or says the file is truncated (or not valid gzip).
  void read(void* dst, size_t n, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      const int got = gzread(file_, p, chunk);
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        throw Error("data", path_ + ": corrupt while reading the " + what + " (" + msg +
                                ") — reinstall it: apt-get install --reinstall dataset-fashion-mnist");
      }
      if (got == 0)
        throw Error("data", path_ + ": truncated: the " + what + " ends early — the file is incomplete; " +
                                "reinstall it or download it again");
      p += got;
      n -= static_cast<size_t>(got);
    }
  }

  uint32_t read_u32(const char* what) {
    unsigned char b[4];
    read(b, 4, what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  const std::string& path() const { return path_; }
  // The most bytes the file can hold: its size, or deflate's largest ratio (1032:1) times it.
  int64_t max_content() const { return gzdirect(file_) ? size_ : size_ * 1032 + 64; }
  // A header may promise, within that ratio, gigabytes from a small .gz (a gzip bomb): what it
  // promises must fit in half the host's memory (or of its address-space limit, ulimit -v), refused
  // by name before it is read.
  void check_fits(int64_t bytes, const std::string& what) const {
    double cap = static_cast<double>(default_inflate_cap()) * 2;
    if (host_memory().bytes > 0) cap = std::min(cap, host_memory().bytes / 2);
    if (cap > 0 && static_cast<double>(bytes) > cap)
      throw Error("data", path_ + ": header says " + what + ", " + format_bytes(bytes) + " in memory, more than the " +
                              format_bytes(static_cast<int64_t>(cap)) +
                              " (half this machine's memory, or of its address-space limit) a data file may take — is it the right file?");
  }

 private:
  std::string path_;
  int64_t size_ = 0;
  gzFile file_ = nullptr;
};

void check_magic(const GzFile& f, uint32_t magic, uint32_t expected, const char* kind) {
  if (magic != expected) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "bad magic number 0x%08x, expected 0x%08x for %s", magic, expected, kind);
    throw Error("data", f.path() + ": " + buf + " — is this an IDX " + kind + " file?");
  }
}

// A dimension the header states: bounded so a corrupt header cannot ask for terabytes.
int64_t checked_dim(const GzFile& f, uint32_t v, const char* what) {
  if (v > (1u << 28)) throw Error("data", f.path() + ": header says " + std::to_string(v) + " " + what + ", which is implausible — the file is corrupt");
  return static_cast<int64_t>(v);
}

}  // namespace

std::vector<float> read_idx_images(const std::string& path, int64_t* count, int64_t* rows, int64_t* cols) {
  GzFile f(path);
  check_magic(f, f.read_u32("header"), 0x00000803u, "image (idx3-ubyte)");
  const int64_t n = checked_dim(f, f.read_u32("header"), "images");
  const int64_t r = checked_dim(f, f.read_u32("header"), "rows");
  const int64_t c = checked_dim(f, f.read_u32("header"), "columns");
  if (r * c > (1 << 20)) throw Error("data", path + ": images of " + std::to_string(r) + "×" + std::to_string(c) + " pixels are implausible — the file is corrupt");
  if (n * r * c > f.max_content())
    throw Error("data", path + ": header says " + std::to_string(n) + " images of " + std::to_string(r) + "×" +
                            std::to_string(c) + " pixels, more than the file can hold — the file is truncated or corrupt");
  f.check_fits(n * r * c * 5, std::to_string(n) + " images of " + std::to_string(r) + "×" + std::to_string(c) +
                                  " pixels (a byte and a float each)");
  std::vector<unsigned char> bytes(static_cast<size_t>(n * r * c));
  f.read(bytes.data(), bytes.size(), "pixel data");
  std::vector<float> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<float>(bytes[i]) * (1.0f / 255.0f);
  if (count) *count = n;
  if (rows) *rows = r;
  if (cols) *cols = c;
  return out;
}

std::vector<int32_t> read_idx_labels(const std::string& path, int64_t* count) {
  GzFile f(path);
  check_magic(f, f.read_u32("header"), 0x00000801u, "label (idx1-ubyte)");
  const int64_t n = checked_dim(f, f.read_u32("header"), "labels");
  if (n > f.max_content())
    throw Error("data", path + ": header says " + std::to_string(n) +
                            " labels, more than the file can hold — the file is truncated or corrupt");
  f.check_fits(n * 5, std::to_string(n) + " labels (a byte and an int each)");
  std::vector<unsigned char> bytes(static_cast<size_t>(n));
  f.read(bytes.data(), bytes.size(), "label data");
  if (count) *count = n;
  return std::vector<int32_t>(bytes.begin(), bytes.end());
}

// Pixel statistics of the Fashion-MNIST training set on the [0, 1] scale.
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;

std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

namespace {

// The .gz name when present, else the plain one; the .gz name is the one reported when neither is.
std::string find_idx(const std::string& dir, const std::string& stem) {
  const fs::path gz = fs::path(dir) / (stem + ".gz"), plain = fs::path(dir) / stem;
  std::error_code ec;  // a symlink loop is found here, and refused by the reader by name
  if (fs::symlink_status(gz, ec).type() != fs::file_type::not_found) return gz.string();
  if (fs::symlink_status(plain, ec).type() != fs::file_type::not_found) return plain.string();
  return gz.string();
}

// The header of an IDX file: its dimensions, checked as read_idx_images / read_idx_labels check them.
std::vector<int64_t> read_idx_dims(const std::string& path, uint32_t magic, const char* kind, int dims) {
  GzFile f(path);
  check_magic(f, f.read_u32("header"), magic, kind);
  std::vector<int64_t> d;
  for (int i = 0; i < dims; ++i) d.push_back(checked_dim(f, f.read_u32("header"), i == 0 ? "items" : "pixels"));
  return d;
}

Dataset load_split(const std::string& dir, const std::string& prefix, bool values) {
  const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  Dataset d;
  d.name = "fashion-mnist";
  int64_t rows = 0, cols = 0, label_count = 0;
  if (!values) {
    const std::vector<int64_t> image_dims = read_idx_dims(images_path, 0x00000803u, "image (idx3-ubyte)", 3);
    d.count = image_dims[0];
    d.features = image_dims[1] * image_dims[2];
    d.classes = 10;
    label_count = read_idx_dims(labels_path, 0x00000801u, "label (idx1-ubyte)", 1)[0];
    if (label_count != d.count)
      throw Error("data", images_path + " has " + std::to_string(d.count) + " images but " + labels_path + " has " +
                              std::to_string(label_count) + " labels: the counts disagree — the files do not belong "
                              "together; reinstall dataset-fashion-mnist");
    return d;
  }
  d.images = read_idx_images(images_path, &d.count, &rows, &cols);
  d.labels = read_idx_labels(labels_path, &label_count);
  if (label_count != d.count)
    throw Error("data", images_path + " has " + std::to_string(d.count) + " images but " + labels_path + " has " +
                            std::to_string(label_count) + " labels: the counts disagree — the files do not belong "
                            "together; reinstall dataset-fashion-mnist");
  if (d.count == 0)
    throw Error("data", images_path + ": holds 0 images — nothing to " + (prefix == "train" ? "train on" : "test on") +
                            "; reinstall dataset-fashion-mnist, or pass --dataset synthetic");
  d.features = rows * cols;
  d.classes = 10;
  // Standardised with the training set's pixel mean and standard deviation (as the PyTorch
  // tutorials' Normalize((0.2860,), (0.3530,))): zero-centred inputs let SGD take larger steps.
  for (float& v : d.images) v = (v - kFashionMnistMean) / kFashionMnistStd;
  for (int64_t i = 0; i < d.count; ++i)
    if (d.labels[i] < 0 || d.labels[i] >= d.classes)
      throw Error("data", labels_path + ": label " + std::to_string(d.labels[i]) + " at index " + std::to_string(i) +
                              " is outside [0, 10) — the file is corrupt");
  return d;
}

}  // namespace

DataSplit load_fashion_mnist(const std::string& dir, bool values) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() != fs::file_type::not_found && st.type() != fs::file_type::directory)
    throw Error("data", dir + ": not a directory" + (ec ? " (" + ec.message() + ")" : std::string()) +
                            " — --data-dir names the directory holding the IDX files");
  DataSplit s;
  s.train = load_split(dir, "train", values);
  s.test = load_split(dir, "t10k", values);
  if (s.train.features != s.test.features)
    throw Error("data", dir + ": training images have " + std::to_string(s.train.features) + " pixels but test images " +
                            std::to_string(s.test.features) + " — the files do not belong together");
  return s;
}

DataSplit make_synthetic(int64_t train_count, int64_t test_count, int64_t features, int classes, uint64_t seed,
                         bool values) {
  if (train_count < 1 || test_count < 0 || features < 1 || classes < 1)
    throw UsageError("data", "synthetic dataset needs ≥ 1 training sample, ≥ 1 feature and ≥ 1 class");
  // One centre per class; samples are the centre plus noise, so the classes are learnable but overlap.
  Rng rng(seed ^ 0x5eed5eedULL);
  std::vector<float> centres(static_cast<size_t>(classes * features));
  for (float& c : centres) c = rng.uniform();
  auto make = [&](int64_t count) {
    Dataset d;
    d.name = "synthetic";
    d.count = count;
    d.features = features;
    d.classes = classes;
    if (!values) return d;
    d.images.resize(static_cast<size_t>(count * features));
    d.labels.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int32_t label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(classes)));
      d.labels[i] = label;
      const float* c = centres.data() + label * features;
      float* x = d.images.data() + i * features;
      for (int64_t j = 0; j < features; ++j) x[j] = c[j] + 0.35f * rng.normal();
    }
    return d;
  };
  DataSplit s;
  s.train = make(train_count);
  s.test = make(test_count);
  return s;
}

Loader::Loader(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last)
    : data_(data), batch_size_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  if (batch_size < 1) throw UsageError("data", "--batch must be ≥ 1, got " + std::to_string(batch_size));
  if (data.labels_per_sample < 1)
    throw Error("data", data.name + " has " + std::to_string(data.labels_per_sample) +
                            " labels per sample — a dataset holds at least one label per sample");
  if (drop_last && batch_size > data.count)
    throw UsageError("data", "--batch " + std::to_string(batch_size) + " is larger than the " + data.name +
                                 " training set (" + std::to_string(data.count) + " samples) — use a smaller batch");
  set_epoch(0);
}

int64_t Loader::batches_per_epoch() const {
  return drop_last_ ? data_.count / batch_size_ : (data_.count + batch_size_ - 1) / batch_size_;
}

void Loader::set_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(data_.count));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  // Fisher–Yates with our own generator: the same (seed, epoch) gives the same order everywhere.
  Rng rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = data_.count - 1; i > 0; --i)
    std::swap(order_[static_cast<size_t>(i)], order_[rng.below(static_cast<uint64_t>(i + 1))]);
}

void Loader::fill(int64_t index, HostBatch& out) const {
  if (index < 0 || index >= batches_per_epoch())
    throw Error("data", "batch " + std::to_string(index) + " is outside the epoch's " +
                            std::to_string(batches_per_epoch()) + " batches");
  const int64_t first = index * batch_size_;
  const int64_t size = std::min(batch_size_, data_.count - first);
  const int64_t per = data_.labels_per_sample;
  out.size = size;
  out.features = data_.features;
  out.labels_per_sample = per;
  out.x.resize(static_cast<size_t>(size * data_.features));
  out.y.resize(static_cast<size_t>(size * per));
  if (!data_.has_values()) return;  // sizes only (a dry run): the batch stays as it was, zeros
  for (int64_t r = 0; r < size; ++r) {
    const int64_t src = order_[static_cast<size_t>(first + r)];
    std::memcpy(out.x.data() + r * data_.features, data_.images.data() + src * data_.features,
                static_cast<size_t>(data_.features) * sizeof(float));
    std::memcpy(out.y.data() + r * per, data_.labels.data() + src * per, static_cast<size_t>(per) * sizeof(int32_t));
  }
}

}  // namespace scalelab
