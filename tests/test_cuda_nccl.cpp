// The nccl backend on real GPUs: every collective against its closed form, every dtype, on one
// GPU (a world of one) and on every GPU of this machine (one thread per GPU, bootstrapped through
// a unique-id file); an async all_reduce; a rank that skips a collective; a unique-id file that
// never appears. Skipped, saying why, where there is no GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

#include "comm_checks.h"
#include "core/comm/backends.h"
#include "core/error.h"

using namespace scalelab;

namespace {

// A fresh directory per test: a stale unique-id file from an earlier run would hang NCCL's init.
std::string fresh_id_file() {
  std::string dir = (std::filesystem::temp_directory_path() / "scalelab-nccl-XXXXXX").string();
  if (!::mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
  return dir + "/nccl-unique-id";
}

std::vector<std::unique_ptr<Device>> gpus(int n) {
  DeviceOptions o;
  o.kind = DeviceKind::cuda;
  o.count = n;
  return make_devices(o);
}

// Runs fn(rank, device) on one thread per GPU; returns each rank's exception text.
template <typename Fn>
std::vector<std::string> on_every_gpu(int n, Fn fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here: the nccl backend needs a GPU per rank";
    if (!nccl_available()) GTEST_SKIP() << "scalelab was built without NCCL";
  }
};

TEST_F(Nccl, OneGpuWorldOfOneEveryCollectiveEveryDtype) {
  auto devices = gpus(1);
  auto pg = make_nccl_group(0, 1, 0, NcclBootstrap{fresh_id_file()});
  pg->set_device(devices[0].get());
  EXPECT_STREQ(pg->backend(), "nccl");
  comm_test::CollectiveChecker check(*pg, *devices[0]);
  for (const auto& f : check.run_all({0, 1, 7, 1003})) ADD_FAILURE() << f;
}

TEST_F(Nccl, EveryGpuOneThreadEachEveryCollectiveEveryDtype) {
  const int n = cuda_device_count();
  if (n < 2) GTEST_SKIP() << "one GPU: NCCL gives each rank a GPU of its own, so several ranks need several GPUs";
  auto devices = gpus(n);
  const std::string id_file = fresh_id_file();
  std::vector<std::vector<std::string>> failures(static_cast<size_t>(n));
  auto errors = on_every_gpu(n, [&](int r) {
    auto pg = make_nccl_group(r, n, r, NcclBootstrap{id_file});
    Device& dev = *devices[static_cast<size_t>(r)];
    pg->set_device(&dev);
    comm_test::CollectiveChecker check(*pg, dev);
    failures[static_cast<size_t>(r)] = check.run_all({0, 1, 7, 1003});
    // A large async all_reduce, as DDP issues while backward goes on.
    const int64_t m = (1 << 22) + 5;
    Tensor t = comm_test::make_tensor(dev, check.inputs(m, r), DType::f32);
    auto work = pg->all_reduce_async(t);
    work->wait();
    const auto got = comm_test::read_tensor(dev, t);
    for (int64_t i = 0; i < m; i += 65537)
      if (got[static_cast<size_t>(i)] != check.reduced(i, ReduceOp::sum)) {
        failures[static_cast<size_t>(r)].push_back("async all_reduce: element " + std::to_string(i) + " is " +
                                                   std::to_string(got[static_cast<size_t>(i)]));
        break;
      }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    for (const auto& f : failures[static_cast<size_t>(r)]) ADD_FAILURE() << f;
  }
}

TEST_F(Nccl, ARankThatSkipsACollectiveFailsTheOthersWithinTheTimeout) {
  const int n = cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs: one rank must skip while another waits";
  auto devices = gpus(n);
  const std::string id_file = fresh_id_file();
  CommOptions quick;
  quick.timeout = std::chrono::milliseconds(1000);
  std::vector<double> waited(static_cast<size_t>(n), 0);
  auto errors = on_every_gpu(n, [&](int r) {
    auto pg = make_nccl_group(r, n, r, NcclBootstrap{id_file}, quick);
    Device& dev = *devices[static_cast<size_t>(r)];
    Tensor t = dev.zeros({1024}, DType::f32, MemoryCategory::grads, "g");
    pg->all_reduce(t);  // everyone once
    if (r == n - 1) return;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      pg->all_reduce(t);
    } catch (...) {
      waited[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      throw;
    }
  });
  EXPECT_EQ(errors[static_cast<size_t>(n - 1)], "");
  for (int r = 0; r < n - 1; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("[comm] nccl"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce"), std::string::npos) << e;
    EXPECT_NE(e.find("--comm-timeout"), std::string::npos) << e;
    EXPECT_GE(waited[static_cast<size_t>(r)], 0.9);
    EXPECT_LT(waited[static_cast<size_t>(r)], 30.0);
  }
}

TEST_F(Nccl, AUniqueIdFileThatNeverAppearsIsAClearTimeout) {
  CommOptions quick;
  quick.timeout = std::chrono::milliseconds(300);
  const std::string id_file = fresh_id_file();
  try {
    make_nccl_group(1, 2, 0, NcclBootstrap{id_file}, quick);  // rank 0 never comes
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(id_file), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  }
}

TEST_F(Nccl, HostTensorsAreAClearError) {
  auto devices = gpus(1);
  auto cpu = make_devices(DeviceOptions{});
  auto pg = make_nccl_group(0, 1, 0, NcclBootstrap{fresh_id_file()});
  Tensor host = cpu[0]->zeros({4}, DType::f32, MemoryCategory::grads, "h");
  try {
    pg->all_reduce(host);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nccl moves GPU memory"), std::string::npos) << e.what();
  }
  // A bad argument does not break the group.
  Tensor t = devices[0]->zeros({4}, DType::f32, MemoryCategory::grads, "g");
  EXPECT_NO_THROW(pg->all_reduce(t));
}
