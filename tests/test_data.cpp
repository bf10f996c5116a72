// Datasets: the IDX reader on files written here (plain and gzipped, good and broken), the
// Fashion-MNIST loader's file choice and its errors, the Loader's seeded order, the synthetic set,
// the real Fashion-MNIST when the Debian package is installed; text for a GPT (tokenizers, windows,
// the test split, a corpus directory, dry-run sizes, errors, a Loader's T labels per sample), the
// synthetic token stream, and the fortunes corpus when installed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/text.h"
#include "core/error.h"
#include "support/errors.h"

using namespace scalelab;
namespace fs = std::filesystem;

namespace {

// Big-endian 32-bit, as IDX headers are.
void put_be32(std::vector<unsigned char>& out, uint32_t v) {
  out.push_back(static_cast<unsigned char>(v >> 24));
  out.push_back(static_cast<unsigned char>(v >> 16));
  out.push_back(static_cast<unsigned char>(v >> 8));
  out.push_back(static_cast<unsigned char>(v));
}

std::vector<unsigned char> idx_images(uint32_t count, uint32_t rows, uint32_t cols, const std::vector<unsigned char>& pixels,
                                      uint32_t magic = 0x00000803) {
  std::vector<unsigned char> b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

std::vector<unsigned char> idx_labels(uint32_t count, const std::vector<unsigned char>& labels, uint32_t magic = 0x00000801) {
  std::vector<unsigned char> b;
  put_be32(b, magic);
  put_be32(b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_plain(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::vector<unsigned char> ramp(size_t n, unsigned step = 37) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * step) % 256);
  v[0] = 0;
  if (n > 1) v[n - 1] = 255;  // both ends of the scale
  return v;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// load_fashion_mnist standardises pixels with the training set's mean and standard deviation
// (PyTorch's Normalize((0.2860,), (0.3530,))); read_idx_images gives the raw byte / 255.
constexpr float kMean = 0.2860f, kStd = 0.3530f;
float standardised(unsigned char byte) { return (static_cast<float>(byte) / 255.0f - kMean) / kStd; }

struct TempDir : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "scalelab-test-data-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string p(const std::string& name) const { return (dir / name).string(); }

  // The error's message, checked to be a [data] error naming `path`.
  template <typename F>
  std::string data_error(F&& f, const std::string& path) {
    try {
      f();
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_EQ(what.rfind("[data] ", 0), 0u) << what;
      EXPECT_TRUE(contains(what, path)) << "message does not name " << path << ": " << what;
      return what;
    }
    ADD_FAILURE() << "no scalelab::Error for " << path;
    return "";
  }

  // A small Fashion-MNIST-shaped directory: 28×28 images, labels in [0, 10).
  void write_split(const std::string& prefix, uint32_t images, uint32_t labels, bool gz, unsigned seed,
                   unsigned char max_label = 9) {
    auto pixels = ramp(static_cast<size_t>(images) * 784, seed);
    std::vector<unsigned char> lab(labels);
    for (uint32_t i = 0; i < labels; ++i) lab[i] = static_cast<unsigned char>((i * seed) % (max_label + 1u));
    if (labels > 0) lab[labels - 1] = max_label;
    const std::string ext = gz ? ".gz" : "";
    auto write = gz ? write_gz : write_plain;
    write(dir / (prefix + "-images-idx3-ubyte" + ext), idx_images(images, 28, 28, pixels));
    write(dir / (prefix + "-labels-idx1-ubyte" + ext), idx_labels(labels, lab));
  }
};

using IdxFiles = TempDir;

}  // namespace

// ---------------------------------------------------------------------------------------------
// IDX reader on good files

TEST_F(IdxFiles, PlainImagesReadWithDimsAndPixelsScaledToUnit) {
  const auto pixels = ramp(3 * 4 * 5);
  write_plain(dir / "img", idx_images(3, 4, 5, pixels));
  int64_t count = -1, rows = -1, cols = -1;
  std::vector<float> v = read_idx_images(p("img"), &count, &rows, &cols);
  EXPECT_EQ(count, 3);
  EXPECT_EQ(rows, 4);  // the header is big-endian: a little-endian read would give 0x04000000
  EXPECT_EQ(cols, 5);
  ASSERT_EQ(v.size(), pixels.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_FLOAT_EQ(v[i], static_cast<float>(pixels[i]) / 255.0f) << i;
  EXPECT_EQ(v.front(), 0.0f);
  EXPECT_EQ(v.back(), 1.0f);
}

TEST_F(IdxFiles, GzippedImagesReadTheSameAsPlain) {
  const auto pixels = ramp(7 * 3 * 2, 101);
  write_plain(dir / "img", idx_images(7, 3, 2, pixels));
  write_gz(dir / "img.gz", idx_images(7, 3, 2, pixels));
  // The gzip file really is compressed (starts with the gzip magic 1f 8b), so zlib did decode it.
  std::ifstream raw(dir / "img.gz", std::ios::binary);
  unsigned char head[2] = {};
  raw.read(reinterpret_cast<char*>(head), 2);
  ASSERT_EQ(head[0], 0x1f);
  ASSERT_EQ(head[1], 0x8b);

  int64_t c1, r1, k1, c2, r2, k2;
  auto plain = read_idx_images(p("img"), &c1, &r1, &k1);
  auto gz = read_idx_images(p("img.gz"), &c2, &r2, &k2);
  EXPECT_EQ(c2, 7);
  EXPECT_EQ(r2, 3);
  EXPECT_EQ(k2, 2);
  EXPECT_EQ(std::make_tuple(c1, r1, k1), std::make_tuple(c2, r2, k2));
  EXPECT_EQ(plain, gz);
  for (size_t i = 0; i < gz.size(); ++i) ASSERT_FLOAT_EQ(gz[i], static_cast<float>(pixels[i]) / 255.0f) << i;
}

TEST_F(IdxFiles, LabelsPlainAndGzipped) {
  const std::vector<unsigned char> labels{0, 9, 3, 3, 7, 1, 255};
  write_plain(dir / "lab", idx_labels(7, labels));
  write_gz(dir / "lab.gz", idx_labels(7, labels));
  for (const char* name : {"lab", "lab.gz"}) {
    int64_t count = -1;
    std::vector<int32_t> v = read_idx_labels(p(name), &count);
    EXPECT_EQ(count, 7) << name;
    ASSERT_EQ(v.size(), labels.size()) << name;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<int32_t>(labels[i])) << name << " " << i;
  }
}

TEST_F(IdxFiles, ZeroImagesIsAnEmptyButValidFile) {
  write_plain(dir / "img", idx_images(0, 28, 28, {}));
  int64_t count = -1, rows = -1, cols = -1;
  EXPECT_TRUE(read_idx_images(p("img"), &count, &rows, &cols).empty());
  EXPECT_EQ(count, 0);
  EXPECT_EQ(rows, 28);
}

// ---------------------------------------------------------------------------------------------
// IDX reader on broken files: each error is a [data] error naming the file and what is wrong

TEST_F(IdxFiles, MissingFileSaysNotFound) {
  int64_t c, r, k;
  const std::string path = p("no-such-file-idx3-ubyte");
  std::string what = data_error([&] { read_idx_images(path, &c, &r, &k); }, path);
  EXPECT_TRUE(contains(what, "not found")) << what;
  const std::string lpath = p("no-such-labels.gz");
  what = data_error([&] { read_idx_labels(lpath, &c); }, lpath);
  EXPECT_TRUE(contains(what, "not found")) << what;
}

TEST_F(IdxFiles, WrongMagicSaysMagic) {
  int64_t c, r, k;
  // A label file read as images, and an image file read as labels: each other's magic.
  write_plain(dir / "labels-as-images", idx_labels(4, {1, 2, 3, 4}));
  std::string what = data_error([&] { read_idx_images(p("labels-as-images"), &c, &r, &k); }, p("labels-as-images"));
  EXPECT_TRUE(contains(what, "magic")) << what;

  write_gz(dir / "images-as-labels.gz", idx_images(1, 2, 2, {1, 2, 3, 4}));
  what = data_error([&] { read_idx_labels(p("images-as-labels.gz"), &c); }, p("images-as-labels.gz"));
  EXPECT_TRUE(contains(what, "magic")) << what;

  // Little-endian magic (a writer that forgot the byte order).
  write_plain(dir / "le", idx_images(1, 1, 1, {7}, 0x03080000));
  what = data_error([&] { read_idx_images(p("le"), &c, &r, &k); }, p("le"));
  EXPECT_TRUE(contains(what, "magic")) << what;
}

TEST_F(IdxFiles, TruncatedHeaderSaysTruncated) {
  int64_t c, r, k;
  auto full = idx_images(2, 2, 2, ramp(8));
  write_plain(dir / "short-header", std::vector<unsigned char>(full.begin(), full.begin() + 10));  // 16-byte header
  std::string what = data_error([&] { read_idx_images(p("short-header"), &c, &r, &k); }, p("short-header"));
  EXPECT_TRUE(contains(what, "truncated")) << what;

  auto labels = idx_labels(3, {1, 2, 3});
  write_gz(dir / "short-label-header.gz", std::vector<unsigned char>(labels.begin(), labels.begin() + 6));
  what = data_error([&] { read_idx_labels(p("short-label-header.gz"), &c); }, p("short-label-header.gz"));
  EXPECT_TRUE(contains(what, "truncated")) << what;

  write_plain(dir / "empty", {});
  what = data_error([&] { read_idx_images(p("empty"), &c, &r, &k); }, p("empty"));
  EXPECT_TRUE(contains(what, "truncated")) << what;
}

TEST_F(IdxFiles, TruncatedDataSaysTruncated) {
  int64_t c, r, k;
  // The header promises 3 images of 2×2 = 12 bytes; 11 follow.
  write_plain(dir / "short-data", idx_images(3, 2, 2, ramp(11)));
  std::string what = data_error([&] { read_idx_images(p("short-data"), &c, &r, &k); }, p("short-data"));
  EXPECT_TRUE(contains(what, "truncated")) << what;

  write_gz(dir / "short-data.gz", idx_images(3, 2, 2, ramp(5)));
  what = data_error([&] { read_idx_images(p("short-data.gz"), &c, &r, &k); }, p("short-data.gz"));
  EXPECT_TRUE(contains(what, "truncated")) << what;

  write_plain(dir / "short-labels", idx_labels(5, {1, 2, 3}));
  what = data_error([&] { read_idx_labels(p("short-labels"), &c); }, p("short-labels"));
  EXPECT_TRUE(contains(what, "truncated")) << what;
}

// ---------------------------------------------------------------------------------------------
// load_fashion_mnist on a directory of four files

TEST_F(TempDir, FashionMnistFromPlainFiles) {
  write_split("train", 5, 5, false, 3);
  write_split("t10k", 3, 3, false, 7);
  DataSplit d = load_fashion_mnist(dir.string());
  EXPECT_EQ(d.train.name, "fashion-mnist");
  EXPECT_EQ(d.train.count, 5);
  EXPECT_EQ(d.test.count, 3);
  EXPECT_EQ(d.train.features, 784);
  EXPECT_EQ(d.test.features, 784);
  EXPECT_EQ(d.train.classes, 10);
  EXPECT_EQ(d.test.classes, 10);
  ASSERT_EQ(d.train.images.size(), 5u * 784);
  ASSERT_EQ(d.test.images.size(), 3u * 784);
  ASSERT_EQ(d.train.labels.size(), 5u);
  ASSERT_EQ(d.test.labels.size(), 3u);
  const auto px = ramp(5 * 784, 3);
  for (size_t i = 0; i < px.size(); ++i) ASSERT_NEAR(d.train.images[i], standardised(px[i]), 1e-6) << i;
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(d.train.labels[i], i + 1 < 5 ? static_cast<int32_t>((i * 3) % 10) : 9);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(d.test.labels[i], i + 1 < 3 ? static_cast<int32_t>((i * 7) % 10) : 9);
}

TEST_F(TempDir, FashionMnistPrefersGzOverPlain) {
  // Different contents under the two names: the .gz ones must be the ones read.
  write_split("train", 4, 4, false, 3);
  write_split("t10k", 2, 2, false, 3);
  write_split("train", 6, 6, true, 5);
  write_split("t10k", 1, 1, true, 5);
  DataSplit d = load_fashion_mnist(dir.string());
  EXPECT_EQ(d.train.count, 6);
  EXPECT_EQ(d.test.count, 1);
  const auto px = ramp(6 * 784, 5);
  for (size_t i = 0; i < px.size(); ++i) ASSERT_NEAR(d.train.images[i], standardised(px[i]), 1e-6) << i;
}

TEST_F(TempDir, FashionMnistMissingFileSaysHowToGetIt) {
  write_split("train", 5, 5, true, 3);
  write_split("t10k", 3, 3, true, 3);
  fs::remove(dir / "t10k-labels-idx1-ubyte.gz");
  try {
    load_fashion_mnist(dir.string());
    FAIL() << "a missing file was not reported";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[data] ", 0), 0u) << what;
    EXPECT_TRUE(contains(what, "t10k-labels-idx1-ubyte")) << what;
    EXPECT_TRUE(contains(what, dir.string())) << what;
    EXPECT_TRUE(contains(what, "not found")) << what;
    EXPECT_TRUE(contains(what, "apt-get install dataset-fashion-mnist")) << what;
    EXPECT_TRUE(contains(what, "--dataset synthetic")) << what;
  }
  // An empty directory, and one that does not exist, say the same.
  for (const fs::path& d : {dir / "empty", dir / "does-not-exist"}) {
    if (d.filename() == "empty") fs::create_directory(d);
    try {
      load_fashion_mnist(d.string());
      FAIL() << d;
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_TRUE(contains(what, "apt-get install dataset-fashion-mnist")) << what;
      EXPECT_TRUE(contains(what, "--dataset synthetic")) << what;
    }
  }
}

TEST_F(TempDir, FashionMnistCountsThatDisagreeAreNamed) {
  write_split("train", 5, 4, true, 3);  // 5 images, 4 labels
  write_split("t10k", 3, 3, true, 3);
  try {
    load_fashion_mnist(dir.string());
    FAIL() << "5 images with 4 labels were accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[data] ", 0), 0u) << what;
    EXPECT_TRUE(contains(what, "disagree")) << what;
    EXPECT_TRUE(contains(what, "train")) << what;
  }
  // The same on the test split, with plain files.
  fs::remove_all(dir);
  fs::create_directory(dir);
  write_split("train", 5, 5, false, 3);
  write_split("t10k", 2, 3, false, 3);
  try {
    load_fashion_mnist(dir.string());
    FAIL() << "2 images with 3 labels were accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "disagree")) << e.what();
    EXPECT_TRUE(contains(e.what(), "t10k")) << e.what();
  }
}

TEST_F(TempDir, FashionMnistLabelOutOfRangeIsAnError) {
  write_split("train", 4, 4, true, 3, /*max_label=*/10);  // one label is 10: there are 10 classes, 0..9
  write_split("t10k", 2, 2, true, 3);
  try {
    load_fashion_mnist(dir.string());
    FAIL() << "label 10 accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[data] ", 0), 0u) << what;
    EXPECT_TRUE(contains(what, "label")) << what;
  }
}

// ---------------------------------------------------------------------------------------------
// Loader: seeded permutations per epoch

namespace {

Dataset numbered(int64_t count, int64_t features, int classes) {
  Dataset d;
  d.name = "numbered";
  d.count = count;
  d.features = features;
  d.classes = classes;
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < features; ++j) d.images.push_back(static_cast<float>(i * 1000 + j));
    d.labels.push_back(static_cast<int32_t>(i % classes));
  }
  return d;
}

bool is_permutation_of_iota(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

}  // namespace

TEST(Loader, EachEpochIsAPermutationFromSeedAndEpoch) {
  Dataset d = numbered(100, 3, 10);
  Loader a(d, 10, 7), b(d, 10, 7), other_seed(d, 10, 8);
  EXPECT_EQ(a.batches_per_epoch(), 10);
  a.set_epoch(0);
  b.set_epoch(0);
  other_seed.set_epoch(0);
  const std::vector<int64_t> e0 = a.order();
  EXPECT_TRUE(is_permutation_of_iota(e0, 100));
  EXPECT_EQ(e0, b.order());              // same (seed, epoch): same order
  EXPECT_NE(e0, other_seed.order());     // another seed: another order
  std::vector<int64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_NE(e0, iota);                   // shuffled

  a.set_epoch(1);
  const std::vector<int64_t> e1 = a.order();
  EXPECT_TRUE(is_permutation_of_iota(e1, 100));
  EXPECT_NE(e1, e0);                     // epochs differ
  a.set_epoch(2);
  EXPECT_NE(a.order(), e1);
  EXPECT_NE(a.order(), e0);

  // The order depends on (seed, epoch) only, not on what was drawn before: resuming at epoch 1
  // sees the same order as running through epoch 0 first.
  Loader resumed(d, 10, 7);
  resumed.set_epoch(1);
  EXPECT_EQ(resumed.order(), e1);
  a.set_epoch(0);
  EXPECT_EQ(a.order(), e0);
}

TEST(Loader, FillCopiesTheRowsOfTheOrderInBatchOrder) {
  Dataset d = numbered(23, 4, 5);
  Loader l(d, 5, 3);
  EXPECT_EQ(l.batches_per_epoch(), 4);  // 23 / 5 with the last 3 dropped
  l.set_epoch(4);
  HostBatch batch;
  std::set<int64_t> seen;
  for (int64_t i = 0; i < l.batches_per_epoch(); ++i) {
    l.fill(i, batch);
    ASSERT_EQ(batch.size, 5);
    ASSERT_EQ(batch.features, 4);
    ASSERT_EQ(batch.x.size(), 20u);
    ASSERT_EQ(batch.y.size(), 5u);
    for (int64_t r = 0; r < 5; ++r) {
      const int64_t row = l.order()[static_cast<size_t>(i * 5 + r)];
      seen.insert(row);
      for (int64_t j = 0; j < 4; ++j)
        ASSERT_EQ(batch.x[static_cast<size_t>(r * 4 + j)], static_cast<float>(row * 1000 + j)) << i << " " << r;
      ASSERT_EQ(batch.y[static_cast<size_t>(r)], static_cast<int32_t>(row % 5));
    }
  }
  EXPECT_EQ(seen.size(), 20u);  // every row once, the 3 left over dropped
}

TEST(Loader, WithoutShuffleTheOrderIsTheDatasetOrder) {
  Dataset d = numbered(12, 2, 3);
  Loader l(d, 4, 99, /*shuffle=*/false);
  for (int64_t epoch : {0, 1, 5}) {
    l.set_epoch(epoch);
    std::vector<int64_t> iota(12);
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(l.order(), iota) << epoch;
  }
  HostBatch b;
  l.fill(2, b);
  EXPECT_EQ(b.x, (std::vector<float>{8000, 8001, 9000, 9001, 10000, 10001, 11000, 11001}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{2, 0, 1, 2}));
}

TEST(Loader, KeepingTheLastBatchCountsIt) {
  Dataset d = numbered(23, 1, 2);
  EXPECT_EQ(Loader(d, 5, 1, true, true).batches_per_epoch(), 4);
  EXPECT_EQ(Loader(d, 5, 1, true, false).batches_per_epoch(), 5);
  EXPECT_EQ(Loader(d, 23, 1).batches_per_epoch(), 1);
}

// ---------------------------------------------------------------------------------------------
// Synthetic data

TEST(Synthetic, DeterministicFromTheSeedWithLabelsInRange) {
  DataSplit a = make_synthetic(300, 50, 20, 5, 11);
  DataSplit b = make_synthetic(300, 50, 20, 5, 11);
  DataSplit c = make_synthetic(300, 50, 20, 5, 12);
  EXPECT_EQ(a.train.count, 300);
  EXPECT_EQ(a.test.count, 50);
  EXPECT_EQ(a.train.features, 20);
  EXPECT_EQ(a.train.classes, 5);
  EXPECT_EQ(a.test.features, 20);
  EXPECT_EQ(a.test.classes, 5);
  ASSERT_EQ(a.train.images.size(), 300u * 20);
  ASSERT_EQ(a.test.images.size(), 50u * 20);
  ASSERT_EQ(a.train.labels.size(), 300u);
  ASSERT_EQ(a.test.labels.size(), 50u);

  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.train.labels, b.train.labels);
  EXPECT_EQ(a.test.images, b.test.images);
  EXPECT_EQ(a.test.labels, b.test.labels);
  EXPECT_NE(a.train.images, c.train.images);

  std::set<int32_t> classes;
  for (int32_t l : a.train.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 5);
    classes.insert(l);
  }
  for (int32_t l : a.test.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 5);
  }
  EXPECT_EQ(classes.size(), 5u);  // every class is drawn
  for (float v : a.train.images) ASSERT_TRUE(std::isfinite(v));
  for (float v : a.test.images) ASSERT_TRUE(std::isfinite(v));
  // Not a constant: the clusters carry information.
  auto [lo, hi] = std::minmax_element(a.train.images.begin(), a.train.images.end());
  EXPECT_LT(*lo, *hi);
}

// ---------------------------------------------------------------------------------------------
// The real Fashion-MNIST (apt-get install dataset-fashion-mnist)

TEST(FashionMnist, RealDatasetWhenInstalled) {
  const std::string dir = default_fashion_mnist_dir();
  EXPECT_EQ(dir, "/usr/share/datasets/fashion-mnist");
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz") && !fs::exists(fs::path(dir) / "train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << dir << " (apt-get install dataset-fashion-mnist)";
  DataSplit d = load_fashion_mnist(dir);
  EXPECT_EQ(d.train.name, "fashion-mnist");
  EXPECT_EQ(d.train.count, 60000);
  EXPECT_EQ(d.test.count, 10000);
  EXPECT_EQ(d.train.features, 784);
  EXPECT_EQ(d.train.classes, 10);
  ASSERT_EQ(d.train.images.size(), 60000u * 784);
  ASSERT_EQ(d.test.images.size(), 10000u * 784);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  std::vector<int> train_per(10, 0), test_per(10, 0);
  for (int32_t l : d.train.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++train_per[static_cast<size_t>(l)];
  }
  for (int32_t l : d.test.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++test_per[static_cast<size_t>(l)];
  }
  EXPECT_EQ(train_per, std::vector<int>(10, 6000));
  EXPECT_EQ(test_per, std::vector<int>(10, 1000));
  // Pixels 0 and 255 both occur; standardised with the set's own mean and deviation, the
  // training images have mean ≈ 0 and standard deviation ≈ 1.
  auto [lo, hi] = std::minmax_element(d.train.images.begin(), d.train.images.end());
  EXPECT_NEAR(*lo, standardised(0), 1e-6);
  EXPECT_NEAR(*hi, standardised(255), 1e-6);
  double sum = 0, sq = 0;
  for (float v : d.train.images) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(d.train.images.size()), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 1.0, 0.01);
}

// ---------------------------------------------------------------------------------------------
// Text for a GPT: tokenizers, windows of T + 1 tokens, the test split, corpus directories

namespace {

using TextFiles = TempDir;
using scalelab::test::message_of;

void write_text(const fs::path& path, const std::string& text) {
  write_plain(path, std::vector<unsigned char>(text.begin(), text.end()));
}

// Printable text with newlines, n bytes, different for each seed.
std::string some_text(size_t n, unsigned seed) {
  const std::string words[] = {"the ", "gradient ", "all-reduce ", "of ", "a ", "bucket ", "overlaps ", "backward.\n",
                               "Pipeline ", "bubbles ", "(1F1B) ", "shrink; ", "ZeRO ", "shards ", "~state ", "{x} "};
  std::string t;
  for (unsigned i = 0; t.size() < n; ++i) t += words[(i * 7 + seed * 3 + i / 5) % 16];
  return t.substr(0, n);
}

// The corpus's tokens as the windows hold them, in corpus order: each window's x then its last y.
std::vector<int32_t> window_tokens(const DataSplit& s) {
  std::vector<int32_t> out;
  for (const Dataset* d : {&s.train, &s.test}) {
    const int64_t T = d->features;
    for (int64_t w = 0; w < d->count; ++w) {
      for (int64_t t = 0; t < T; ++t) out.push_back(static_cast<int32_t>(d->images[static_cast<size_t>(w * T + t)]));
      out.push_back(d->labels[static_cast<size_t>(w * T + T - 1)]);
    }
  }
  return out;
}

// A set of text windows: T tokens of x and T labels per sample, V classes.
void expect_windows_of(const Dataset& d, int64_t T, int64_t V) {
  EXPECT_EQ(d.features, T);
  EXPECT_EQ(d.labels_per_sample, T);
  EXPECT_EQ(d.classes, V);
  ASSERT_EQ(d.images.size(), static_cast<size_t>(d.count * T));
  ASSERT_EQ(d.labels.size(), static_cast<size_t>(d.count * T));
}

void expect_same_sizes(const DataSplit& dry, const DataSplit& real) {
  for (auto [a, b] : {std::pair{&dry.train, &real.train}, std::pair{&dry.test, &real.test}}) {
    EXPECT_EQ(a->name, b->name);
    EXPECT_EQ(a->count, b->count);
    EXPECT_EQ(a->features, b->features);
    EXPECT_EQ(a->classes, b->classes);
    EXPECT_EQ(a->labels_per_sample, b->labels_per_sample);
    EXPECT_FALSE(a->has_values());
    EXPECT_TRUE(a->images.empty());
  }
}

}  // namespace

TEST(TextTokens, VocabularyPicksCharactersOrBytesAndRefusesTheRest) {
  EXPECT_EQ(text_tokenizer(96), TextTokenizer::chars);
  EXPECT_EQ(text_tokenizer(256), TextTokenizer::bytes);
  EXPECT_EQ(text_tokenizer(50257), TextTokenizer::bytes);
  for (int64_t v : {0, 1, 95, 97, 100, 128, 255}) {
    const std::string m = message_of([&] { text_tokenizer(v); });
    EXPECT_EQ(m.rfind("[data] ", 0), 0u) << m;
    EXPECT_NE(m.find("--model's vocabulary V = " + std::to_string(v) + " "), std::string::npos) << m;
    EXPECT_NE(m.find("V = 96"), std::string::npos) << m;
    EXPECT_NE(m.find("V ≥ 256"), std::string::npos) << m;
    EXPECT_NE(m.find("--dataset synthetic"), std::string::npos) << m;
  }
  const std::string big = message_of([] { text_tokenizer((int64_t{1} << 24) + 1); });
  EXPECT_NE(big.find("2^24"), std::string::npos) << big;
}

TEST(TextTokens, CharactersAreNewlineThenPrintableAscii) {
  EXPECT_EQ(char_token('\n'), 0);
  EXPECT_EQ(char_token(' '), 1);
  EXPECT_EQ(char_token('!'), 2);
  EXPECT_EQ(char_token('A'), 34);
  EXPECT_EQ(char_token('~'), 95);
  for (int32_t t = 0; t < 96; ++t) EXPECT_EQ(char_token(static_cast<unsigned char>(token_char(t))), t) << t;
  // A tab is a space, not counted; other whitespace is a space, counted; any other byte is '?', counted.
  bool replaced = true;
  EXPECT_EQ(char_token('\t', &replaced), 1);
  EXPECT_FALSE(replaced);
  EXPECT_EQ(char_token('\r', &replaced), 1);
  EXPECT_TRUE(replaced);
  for (int b : {0, 8, 27, 127, 0xc3, 0xff}) {
    replaced = false;
    EXPECT_EQ(char_token(static_cast<unsigned char>(b), &replaced), char_token('?')) << b;
    EXPECT_TRUE(replaced) << b;
  }
  EXPECT_NE(message_of<Error>([] { token_char(96); }).find("outside [0, 96)"), std::string::npos);
  EXPECT_NE(message_of<Error>([] { token_char(-1); }).find("outside [0, 96)"), std::string::npos);
}

TEST(TextTokens, EncodeDecodeRoundTrip) {
  const std::string text = "Hello, world!\n\tx = {1, 2}; // ~done\n";
  int64_t replaced = -1;
  const std::vector<int32_t> chars = encode_text(text, 96, &replaced);
  ASSERT_EQ(chars.size(), text.size());  // one token per byte
  EXPECT_EQ(replaced, 0);
  std::string expect = text;
  expect[text.find('\t')] = ' ';
  EXPECT_EQ(decode_text(chars, 96), expect);

  const std::string utf8 = "caf\xc3\xa9\r\n";
  EXPECT_EQ(decode_text(encode_text(utf8, 96, &replaced), 96), "caf?? \n");
  EXPECT_EQ(replaced, 3);
  // Bytes: every byte is its own token, so any file comes back as it was.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> bytes = encode_text(all, 256, &replaced);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(bytes[static_cast<size_t>(b)], b);
  EXPECT_EQ(replaced, 0);
  EXPECT_EQ(decode_text(bytes, 50257), all);
  EXPECT_NE(message_of<Error>([] { decode_text({300}, 50257); }).find("token 300 is not a byte"), std::string::npos);
}

TEST(TextWindows, CountAndTestSplitRule) {
  EXPECT_EQ(text_windows(1000, 9), 100);
  EXPECT_EQ(text_windows(1009, 9), 100);  // the last 9 tokens make no window
  EXPECT_EQ(text_windows(9, 9), 0);
  EXPECT_EQ(text_test_windows(0), 0);
  EXPECT_EQ(text_test_windows(1), 0);   // a single window trains
  EXPECT_EQ(text_test_windows(2), 1);
  EXPECT_EQ(text_test_windows(19), 1);
  EXPECT_EQ(text_test_windows(100), 10);
}

TEST_F(TextFiles, WindowsShiftByOneAndTheLastTenthIsTheTestSplit) {
  const std::string text = some_text(1005, 1);
  write_text(dir / "corpus.txt", text);
  TextStats st;
  const DataSplit s = load_text(p("corpus.txt"), 9, 96, true, &st);
  EXPECT_EQ(st.files, 1);
  EXPECT_EQ(st.tokens, 1005);
  EXPECT_EQ(st.unused, 5);
  EXPECT_EQ(st.replaced, 0);
  EXPECT_EQ(s.train.name, "corpus.txt");
  EXPECT_EQ(s.train.count, 90);
  EXPECT_EQ(s.test.count, 10);
  expect_windows_of(s.train, 9, 96);
  expect_windows_of(s.test, 9, 96);
  // Window w is the characters [10 w, 10 w + 10): x the first 9, y the last 9.
  for (int64_t w = 0; w < 100; ++w) {
    const Dataset& d = w < 90 ? s.train : s.test;
    const int64_t row = w < 90 ? w : w - 90;
    for (int64_t t = 0; t < 9; ++t) {
      const size_t c = static_cast<size_t>(w * 10 + t);
      ASSERT_EQ(d.images[static_cast<size_t>(row * 9 + t)], static_cast<float>(char_token(static_cast<unsigned char>(text[c])))) << w << " " << t;
      ASSERT_EQ(d.labels[static_cast<size_t>(row * 9 + t)], char_token(static_cast<unsigned char>(text[c + 1]))) << w << " " << t;
    }
  }
  // Read back, the windows are the text (the 5 bytes after the last window unused).
  EXPECT_EQ(decode_text(window_tokens(s), 96), text.substr(0, 1000));
}

TEST_F(TextFiles, BytesKeepEveryByteAndDryRunSizesMatch) {
  std::string text = some_text(700, 2);
  text[10] = '\t';
  text[20] = static_cast<char>(0xc3);
  text[21] = static_cast<char>(0xa9);
  write_text(dir / "t.txt", text);
  for (int64_t vocab : {int64_t{256}, int64_t{50257}}) {
    const DataSplit s = load_text(p("t.txt"), 16, vocab);
    EXPECT_EQ(s.train.classes, vocab);
    EXPECT_EQ(decode_text(window_tokens(s), vocab), text.substr(0, 697));  // 41 windows of 17
    expect_same_sizes(load_text(p("t.txt"), 16, vocab, false), s);
  }
  TextStats st;
  const DataSplit chars = load_text(p("t.txt"), 16, 96, true, &st);
  EXPECT_EQ(st.replaced, 2);  // the two bytes of é; the tab is not counted
  TextStats dry;
  expect_same_sizes(load_text(p("t.txt"), 16, 96, false, &dry), chars);
  EXPECT_EQ(dry.tokens, st.tokens);
  EXPECT_EQ(dry.replaced, -1);  // not read
}

TEST_F(TextFiles, DirectoryIsReadRecursivelyInSortedOrderSkippingBinaryHiddenAndLinkedTwice) {
  const std::string a = some_text(300, 3), b = some_text(200, 4), d = some_text(250, 5);
  fs::create_directories(dir / "corpus" / "a");
  fs::create_directories(dir / "corpus" / ".git");
  write_text(dir / "corpus" / "a" / "z.txt", a);
  write_text(dir / "corpus" / "b", b);
  fs::create_symlink("b", dir / "corpus" / "b.u8");                      // fortunes' links: read once
  write_plain(dir / "corpus" / "b.dat", {0, 0, 0, 2, 0, 0, 0, 7, 'x'});  // a strfile index: binary
  write_text(dir / "corpus" / ".git" / "HEAD", "ref: refs/heads/main\n");
  write_text(dir / "corpus" / "empty", "");
  {
    std::vector<unsigned char> bytes(d.begin(), d.end());
    write_gz(dir / "corpus" / "d.txt.gz", bytes);
  }
  TextStats st;
  const DataSplit s = load_text(p("corpus"), 15, 96, true, &st);
  EXPECT_EQ(st.files, 4);  // a/z.txt, b, d.txt.gz, empty
  EXPECT_EQ(st.skipped_binary, 1);
  EXPECT_EQ(st.tokens, 750);
  EXPECT_EQ(s.train.name, "corpus");
  const std::string all = a + b + d;
  EXPECT_EQ(s.train.count + s.test.count, 750 / 16);
  EXPECT_EQ(decode_text(window_tokens(s), 96), all.substr(0, 750 / 16 * 16));
  // A dry run counts the same without reading the text (the gzipped file inflated to count it).
  TextStats dry;
  expect_same_sizes(load_text(p("corpus") + "/", 15, 96, false, &dry), s);
  EXPECT_EQ(dry.tokens, st.tokens);
  EXPECT_EQ(dry.files, st.files);
  EXPECT_EQ(dry.skipped_binary, st.skipped_binary);
}

TEST_F(TextFiles, BadCorporaAreRefusedByName) {
  write_text(dir / "short.txt", "0123456789");
  write_text(dir / "empty.txt", "");
  write_plain(dir / "model.bin", {'P', 'K', 3, 4, 0, 0, 'x'});
  fs::create_directories(dir / "nothing");
  write_plain(dir / "nothing" / "a.dat", {0, 1, 2});
  fs::create_directories(dir / "void");
  for (bool values : {true, false}) {
    SCOPED_TRACE(values ? "values" : "dry run");
    std::string m = data_error([&] { load_text(p("missing"), 8, 96, values); }, p("missing"));
    EXPECT_NE(m.find("not found"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install fortunes"), std::string::npos) << m;
    m = data_error([&] { load_text(p("empty.txt"), 8, 96, values); }, p("empty.txt"));
    EXPECT_NE(m.find("empty"), std::string::npos) << m;
    m = data_error([&] { load_text(p("model.bin"), 8, 96, values); }, p("model.bin"));
    EXPECT_NE(m.find("binary"), std::string::npos) << m;
    m = data_error([&] { load_text(p("nothing"), 8, 96, values); }, p("nothing"));
    EXPECT_NE(m.find("holds no text (1 files, 1 of them binary)"), std::string::npos) << m;
    m = data_error([&] { load_text(p("void"), 8, 96, values); }, p("void"));
    EXPECT_NE(m.find("holds no text"), std::string::npos) << m;
    // 10 tokens make no window of 11 (context 10), and one of 10 (context 9).
    m = data_error([&] { load_text(p("short.txt"), 10, 96, values); }, p("short.txt"));
    EXPECT_NE(m.find("too short: 10 tokens, and one window of context 10 needs 11"), std::string::npos) << m;
    EXPECT_NE(m.find("smaller context"), std::string::npos) << m;
    const DataSplit one = load_text(p("short.txt"), 9, 96, values);
    EXPECT_EQ(one.train.count, 1);
    EXPECT_EQ(one.test.count, 0);
    m = message_of([&] { load_text(p("short.txt"), 0, 96, values); });
    EXPECT_NE(m.find("context of ≥ 1 token, got 0"), std::string::npos) << m;
    m = message_of([&] { load_text(p("short.txt"), 4, 100, values); });
    EXPECT_NE(m.find("--model's vocabulary V = 100"), std::string::npos) << m;
  }
  // A gzipped corpus that ends early: refused whether its text is read or only counted.
  {
    const std::string text = some_text(5000, 7);
    write_gz(dir / "cut.txt.gz", std::vector<unsigned char>(text.begin(), text.end()));
    fs::resize_file(dir / "cut.txt.gz", fs::file_size(dir / "cut.txt.gz") / 2);
    for (bool values : {true, false}) {
      const std::string m = data_error([&] { load_text(p("cut.txt.gz"), 8, 96, values); }, p("cut.txt.gz"));
      EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
    }
  }
  // A FIFO would block a reader: refused by name before it is opened.
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0600), 0);
  const std::string m = data_error([&] { load_text(p("fifo"), 8, 96); }, p("fifo"));
  EXPECT_NE(m.find("a corpus is text files"), std::string::npos) << m;
}

TEST_F(TextFiles, LoaderHandsOutTLabelsPerSample) {
  write_text(dir / "c.txt", some_text(2000, 6));
  const DataSplit s = load_text(p("c.txt"), 7, 96);  // 250 windows: 225 train, 25 test
  ASSERT_EQ(s.train.count, 225);
  Loader plain(s.train, 4, 1, /*shuffle=*/false);
  HostBatch b;
  plain.fill(3, b);
  EXPECT_EQ(b.size, 4);
  EXPECT_EQ(b.features, 7);
  EXPECT_EQ(b.labels_per_sample, 7);
  ASSERT_EQ(b.x.size(), 28u);
  ASSERT_EQ(b.y.size(), 28u);
  EXPECT_EQ(std::vector<float>(b.x.begin(), b.x.end()),
            std::vector<float>(s.train.images.begin() + 12 * 7, s.train.images.begin() + 16 * 7));
  EXPECT_EQ(b.y, std::vector<int32_t>(s.train.labels.begin() + 12 * 7, s.train.labels.begin() + 16 * 7));

  Loader shuffled(s.train, 5, 9);
  shuffled.set_epoch(2);
  shuffled.fill(1, b);
  ASSERT_EQ(b.y.size(), 35u);
  for (int64_t r = 0; r < 5; ++r) {
    const int64_t src = shuffled.order()[static_cast<size_t>(5 + r)];
    for (int64_t t = 0; t < 7; ++t) {
      ASSERT_EQ(b.x[static_cast<size_t>(r * 7 + t)], s.train.images[static_cast<size_t>(src * 7 + t)]);
      ASSERT_EQ(b.y[static_cast<size_t>(r * 7 + t)], s.train.labels[static_cast<size_t>(src * 7 + t)]);
      if (t + 1 < 7) {
        ASSERT_EQ(static_cast<float>(b.y[static_cast<size_t>(r * 7 + t)]), b.x[static_cast<size_t>(r * 7 + t + 1)]);
      }
    }
  }
  // A dry run's batches: the same sizes, zeros.
  const DataSplit dry = load_text(p("c.txt"), 7, 96, false);
  Loader l(dry.train, 4, 1);
  HostBatch z;
  l.fill(0, z);
  EXPECT_EQ(z.labels_per_sample, 7);
  EXPECT_EQ(z.x, std::vector<float>(28, 0.0f));
  EXPECT_EQ(z.y, std::vector<int32_t>(28, 0));
}

TEST(Loader, ImagesKeepOneLabelPerSample) {
  Dataset d = numbered(10, 3, 4);
  EXPECT_EQ(d.labels_per_sample, 1);
  Loader l(d, 5, 2, false);
  HostBatch b;
  l.fill(1, b);
  EXPECT_EQ(b.labels_per_sample, 1);
  EXPECT_EQ(b.y, (std::vector<int32_t>{1, 2, 3, 0, 1}));
  d.labels_per_sample = 0;
  EXPECT_NE(message_of<Error>([&] { Loader bad(d, 5, 2); }).find("0 labels per sample"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The synthetic token stream (dry runs, and any V)

TEST(SyntheticTokens, DeterministicShiftedAndLearnable) {
  const DataSplit a = make_synthetic_tokens(400, 100, 16, 96, 5);
  const DataSplit b = make_synthetic_tokens(400, 100, 16, 96, 5);
  const DataSplit c = make_synthetic_tokens(400, 100, 16, 96, 6);
  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.test.labels, b.test.labels);
  EXPECT_NE(a.train.images, c.train.images);
  for (const Dataset* d : {&a.train, &a.test}) {
    expect_windows_of(*d, 16, 96);
    if (::testing::Test::HasFatalFailure()) return;
    for (int64_t i = 0; i < d->count; ++i)
      for (int64_t t = 0; t < 16; ++t) {
        const float x = d->images[static_cast<size_t>(i * 16 + t)];
        ASSERT_EQ(x, std::floor(x));
        ASSERT_GE(x, 0);
        ASSERT_LT(x, 96);
        ASSERT_GE(d->labels[static_cast<size_t>(i * 16 + t)], 0);
        ASSERT_LT(d->labels[static_cast<size_t>(i * 16 + t)], 96);
        if (t + 1 < 16) {
          ASSERT_EQ(static_cast<float>(d->labels[static_cast<size_t>(i * 16 + t)]), d->images[static_cast<size_t>(i * 16 + t + 1)]);
        }
      }
  }
  // Learnable: the most frequent successor of each token in training predicts the test targets
  // far better than chance (1 / 96): about (7/8)² of the time.
  std::vector<std::vector<int>> follows(96, std::vector<int>(96, 0));
  for (size_t i = 0; i < a.train.labels.size(); ++i)
    ++follows[static_cast<size_t>(a.train.images[i])][static_cast<size_t>(a.train.labels[i])];
  int64_t right = 0;
  for (size_t i = 0; i < a.test.labels.size(); ++i) {
    const auto& f = follows[static_cast<size_t>(a.test.images[i])];
    right += std::max_element(f.begin(), f.end()) - f.begin() == a.test.labels[i];
  }
  EXPECT_GT(static_cast<double>(right) / static_cast<double>(a.test.labels.size()), 0.7);
}

TEST(SyntheticTokens, AnyVocabularyAndDryRunSizes) {
  const DataSplit big = make_synthetic_tokens(50, 10, 32, 50257, 1);
  int32_t top = 0;
  for (int32_t y : big.train.labels) top = std::max(top, y);
  EXPECT_LT(top, 50257);
  EXPECT_GT(top, 255);  // not only byte-sized ids
  const DataSplit dry = make_synthetic_tokens(50, 10, 32, 50257, 1, false);
  expect_same_sizes(dry, big);
  const DataSplit huge = make_synthetic_tokens(int64_t{1} << 30, 1000, 2048, 50257, 1, false);  // sizes alone
  EXPECT_EQ(huge.train.count, int64_t{1} << 30);
  EXPECT_EQ(huge.train.labels_per_sample, 2048);
  std::string m = message_of([] { make_synthetic_tokens(10, 1, 8, 1, 1); });
  EXPECT_NE(m.find("V = 1 is outside [2, 2^24]"), std::string::npos) << m;
  m = message_of([] { make_synthetic_tokens(10, 1, 8, (int64_t{1} << 24) + 1, 1); });
  EXPECT_NE(m.find("outside [2, 2^24]"), std::string::npos) << m;
  m = message_of([] { make_synthetic_tokens(0, 1, 8, 96, 1); });
  EXPECT_NE(m.find("≥ 1 training sample"), std::string::npos) << m;
  m = message_of([] { make_synthetic_tokens(10, 1, 0, 96, 1); });
  EXPECT_NE(m.find("context 0"), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------------
// The default corpus (apt-get install fortunes)

TEST(Fortunes, DefaultCorpusWhenInstalled) {
  const std::string dir = default_text_corpus();
  EXPECT_EQ(dir, "/usr/share/games/fortunes");
  if (!fs::is_directory(dir)) GTEST_SKIP() << "fortunes is not installed in " << dir << " (apt-get install fortunes)";
  int64_t dat = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    dat += e.path().extension() == ".dat" && e.is_regular_file();
  TextStats st;
  const DataSplit s = load_text(dir, 64, 96, true, &st);
  EXPECT_EQ(s.train.name, "fortunes");
  EXPECT_GT(st.tokens, 1'000'000);  // about 2.5 MB of text
  EXPECT_EQ(st.skipped_binary, dat);  // the strfile indexes
  EXPECT_LT(st.replaced, st.tokens / 100);  // nearly all printable ASCII
  const int64_t windows = st.tokens / 65;
  EXPECT_EQ(s.train.count + s.test.count, windows);
  EXPECT_EQ(s.test.count, windows / 10);
  TextStats dry;
  expect_same_sizes(load_text(dir, 64, 96, false, &dry), s);
  EXPECT_EQ(dry.tokens, st.tokens);
  EXPECT_EQ(dry.files, st.files);
}
