#pragma once
// Datasets live on the host as normalised floats; a Loader cuts them into batches in a seeded order.
#include <cstdint>
#include <string>
#include <vector>

namespace scalelab {

struct Dataset {
  std::string name;
  int64_t count = 0;
  int64_t features = 0;        // 784 for 28×28 images
  int classes = 0;
  // Labels per sample: 1 for an image (its class), T for a window of text (each position's next token).
  int64_t labels_per_sample = 1;
  std::vector<float> images;   // count × features (Fashion-MNIST: standardised pixels; text: token ids)
  std::vector<int32_t> labels; // count × labels_per_sample, in [0, classes)

  // False for a dry run's dataset: its sizes alone (the batches it hands out hold zeros).
  bool has_values() const { return !labels.empty(); }
};

struct DataSplit {
  Dataset train;
  Dataset test;
};

// IDX files (optionally .gz): the format of MNIST and Fashion-MNIST. Errors name the file and say
// what is wrong: missing, bad magic number, truncated, counts that disagree.
std::vector<float> read_idx_images(const std::string& path, int64_t* count, int64_t* rows, int64_t* cols);
std::vector<int32_t> read_idx_labels(const std::string& path, int64_t* count);
// train-images-idx3-ubyte(.gz), train-labels-idx1-ubyte(.gz), t10k-... in `dir`. values = false
// reads the files' headers alone (counts and sizes, checked as a full load checks them): a dry run
// needs no pixels, and decompressing 60 000 images would cost it a second and 190 MB.
DataSplit load_fashion_mnist(const std::string& dir, bool values = true);
std::string default_fashion_mnist_dir();  // /usr/share/datasets/fashion-mnist

// A learnable synthetic set: `classes` Gaussian clusters in `features` dimensions, from a seed.
DataSplit make_synthetic(int64_t train_count, int64_t test_count, int64_t features, int classes, uint64_t seed,
                         bool values = true);

// A batch on the host: x is batch × features, y holds size × labels_per_sample labels (row by row).
struct HostBatch {
  int64_t size = 0;
  int64_t features = 0;
  int64_t labels_per_sample = 1;
  std::vector<float> x;
  std::vector<int32_t> y;
  // A part of another step's batch (the equivalence probe's single taking a batch in two
  // halves): that step, and where row 0 sits in its batch — so --dropout drops what it drops in
  // the whole batch. −1: the batch is its step's own.
  int64_t part_of_step = -1;
  int64_t first_sample = 0;
};

// Iterates a dataset in batches. Each epoch's order is a permutation drawn from (seed, epoch),
// so a run can resume mid-epoch and see the same order. drop_last drops the incomplete batch.
class Loader {
 public:
  Loader(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle = true, bool drop_last = true);
  int64_t batches_per_epoch() const;
  void set_epoch(int64_t epoch);  // draws that epoch's order
  // Fills `out` with batch `index` of the current epoch (zeros from a dataset without values).
  void fill(int64_t index, HostBatch& out) const;
  const std::vector<int64_t>& order() const { return order_; }
  const Dataset& data() const { return data_; }
  int64_t batch_size() const { return batch_size_; }

 private:
  const Dataset& data_;
  int64_t batch_size_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  std::vector<int64_t> order_;
};

}  // namespace scalelab
