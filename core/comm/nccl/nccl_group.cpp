// The `nccl` backend: tensors on CUDA devices, one rank per GPU, NCCL's own collectives (rings and
// trees over NVLink, PCIe and the network, chosen by NCCL). The ranks agree on NCCL's unique id
// through MPI or a file, then every collective is queued on a communication stream of this rank's
// GPU, ordered after the work that produced its tensors.
//
// NCCL, like MPI, would wait forever for a rank that never comes. So the communicator is
// non-blocking (ncclConfig_t::blocking = 0): every call returns at once, and the host polls
// cudaStreamQuery / ncclCommGetAsyncError until CommOptions::timeout, then aborts the
// communicator (ncclCommAbort stops its kernels) and throws, naming the collective.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backends.h"
#include "core/device/cuda/cuda_check.h"
#include "core/device/cuda/cuda_executor.h"
#include "core/device/device.h"
#include "core/error.h"
#include "core/io/atomic_file.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "scalelab's nccl backend needs NCCL >= 2.14 (non-blocking communicators, ncclCommFinalize)"
#endif

namespace scalelab {

namespace detail {

inline const char* nccl_hint(ncclResult_t r) {
  switch (r) {
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed — check nvidia-smi for GPU errors, and rerun with NCCL_DEBUG=WARN";
    case ncclSystemError:
      return "a system call failed: the network, or shared memory (in a container, give it more: docker --shm-size=1g) "
             "— rerun with NCCL_DEBUG=INFO";
    case ncclInvalidArgument:
      return "check that the tensors live on this rank's GPU and that every rank passes the same sizes and dtypes";
    case ncclInvalidUsage:
      return "every rank needs a GPU of its own, and every rank must issue the same collectives in the same order "
             "— rerun with NCCL_DEBUG=WARN";
    case ncclRemoteError:
      return "another rank failed or its connection broke — look at the other ranks' errors";
    default: return "rerun with NCCL_DEBUG=INFO to see what NCCL was doing";
  }
}

// The check macro's error: the call's text, file:line, NCCL's words (and its last message) and a hint.
[[noreturn]] inline void throw_nccl_error(ncclResult_t r, const char* call, const char* file, int line,
                                          ncclComm_t comm = nullptr) {
  const char* last = ncclGetLastError(comm);
  throw Error("nccl", std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                          ncclGetErrorString(r) + (last && *last ? std::string(" (") + last + ")" : std::string()) +
                          " — " + nccl_hint(r));
}

}  // namespace detail

// On a non-blocking communicator, ncclInProgress is a normal answer: the call was queued and the
// host polls ncclCommGetAsyncError before the next one (see NcclGroup::wait).
#define SCALELAB_NCCL_CHECK(call)                                                              \
  do {                                                                                         \
    const ncclResult_t scalelab_nccl_r_ = (call);                                              \
    if (scalelab_nccl_r_ != ncclSuccess && scalelab_nccl_r_ != ncclInProgress)                 \
      ::scalelab::detail::throw_nccl_error(scalelab_nccl_r_, #call, __FILE__, __LINE__);       \
  } while (0)

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// As the mpi backend: give the core away while data is in flight, sleep a little once a rank is late.
void pause_between_polls(SteadyClock::duration waited) {
  if (waited < std::chrono::milliseconds(50)) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(200));
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

bool overlaps(const void* a, int64_t n, const void* b, int64_t m) {
  if (!a || !b || n == 0 || m == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(m) && pb < pa + static_cast<uintptr_t>(n);
}

// ---- the unique id ----------------------------------------------------------------------------

std::string to_hex(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s + "\n";
}

bool from_hex(const std::string& text, ncclUniqueId* id) {
  std::string hex;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) hex += c;
  if (hex.size() != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// Rank 0 makes the id and writes it (atomically: a reader never sees half of it); the others
// poll for it until the timeout.
ncclUniqueId id_through_file(int rank, const std::string& path, std::chrono::milliseconds timeout) {
  ncclUniqueId id{};
  if (rank == 0) {
    SCALELAB_NCCL_CHECK(ncclGetUniqueId(&id));
    write_file_atomically(path, to_hex(id), "nccl");
    return id;
  }
  const auto start = SteadyClock::now();
  std::string last;
  for (;;) {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      last = text.str();
      if (from_hex(last, &id)) return id;
    }
    const auto waited = SteadyClock::now() - start;
    if (waited >= timeout)
      throw Error("comm", "nccl: rank " + std::to_string(rank) + " waited " + seconds(timeout) + " for rank 0 to write " +
                              "the NCCL unique id to " + path +
                              (last.empty() ? std::string(", which never appeared")
                                            : ", which holds no unique id (" + std::to_string(last.size()) + " bytes)") +
                              " — rank 0 died or has not started, or the ranks were given different files (raise "
                              "--comm-timeout if rank 0 is merely slow)");
    std::this_thread::sleep_for(std::chrono::milliseconds(waited < std::chrono::seconds(1) ? 2 : 20));
  }
}

// Rank 0 makes the id and broadcasts it over MPI (which mpirun has already wired up).
ncclUniqueId id_through_mpi(int rank, int size, CommOptions options) {
  auto mpi = make_mpi_group(options);
  if (mpi->rank() != rank || mpi->size() != size)
    throw UsageError("nccl", "the NCCL rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                 " differs from the MPI rank " + std::to_string(mpi->rank()) + " of " +
                                 std::to_string(mpi->size()) +
                                 " — through MPI, each process's NCCL rank is its rank of mpirun; pass those, or "
                                 "bootstrap through a unique-id file");
  ncclUniqueId id{};
  if (rank == 0) SCALELAB_NCCL_CHECK(ncclGetUniqueId(&id));
  // The 128 bytes as a host tensor of 32 i32 words, with no device: the broadcast moves raw bytes.
  static_assert(sizeof id.internal % 4 == 0);
  auto storage = std::make_shared<Storage>();
  storage->data = id.internal;
  storage->bytes = sizeof id.internal;
  const Tensor bytes(storage, {static_cast<int64_t>(sizeof id.internal / 4)}, DType::i32);
  mpi->broadcast(bytes, 0);
  return id;
}

// ---- the group ---------------------------------------------------------------------------------

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(int rank, int size, int cuda_device, const ncclUniqueId& id, CommOptions options)
      : ProcessGroup(rank, size, options), device_(cuda_device) {
    try {
      SCALELAB_CUDA_CHECK(cudaSetDevice(device_));
      // Non-blocking: the collectives do not serialise with the legacy default stream.
      SCALELAB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      SCALELAB_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
      SCALELAB_CUDA_CHECK(cudaMalloc(&scratch_, 2 * sizeof(int64_t)));
      SCALELAB_CUDA_CHECK(cudaMemset(scratch_, 0, 2 * sizeof(int64_t)));  // the barrier sums it: no NaN bits
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;  // every call returns at once; we poll, so a missing rank cannot hang us
      SCALELAB_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size, id, rank, &config));
      wait("ncclCommInitRank (the other ranks joining the communicator)", /*initialising=*/true);
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclGroup() override {
    stop_worker();  // queued async calls finish while this object is whole
    release();
  }

  const char* backend() const override { return "nccl"; }

 protected:
  void run(const Call& call) override {
    const std::string what = collective_name(call.op);
    guarded(what, [&] {
      for (const Tensor* t : {call.in, call.out})
        if (t && t->defined()) check_tensor(*t, what);
      activate();
      for (const Tensor* t : {call.in, call.out})
        if (t && t->defined()) after_producer(*t);
      issue(call);
      wait(what);
    });
  }

  int64_t max_over_ranks(int64_t value) override {
    int64_t result = value;
    guarded("the start-time agreement of a collective", [&] {
      activate();
      // Host to device from pageable memory returns once the value is staged; device to host
      // would wait for the stream, so it comes only after the collective has finished.
      SCALELAB_CUDA_CHECK(cudaMemcpyAsync(scratch_, &value, sizeof value, cudaMemcpyHostToDevice, stream_));
      SCALELAB_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclMax, comm_, stream_));
      wait("the start-time agreement of a collective");
      SCALELAB_CUDA_CHECK(cudaMemcpy(&result, scratch_, sizeof result, cudaMemcpyDeviceToHost));
    });
    return result;
  }

  int64_t exchange_with(int peer, int64_t value) override {
    int64_t result = value;
    guarded("the start-time agreement of send / recv", [&] {
      activate();
      auto* words = static_cast<int64_t*>(scratch_);
      SCALELAB_CUDA_CHECK(cudaMemcpyAsync(words, &value, sizeof value, cudaMemcpyHostToDevice, stream_));
      in_group([&] {
        SCALELAB_NCCL_CHECK(ncclSend(words, 1, ncclInt64, peer, comm_, stream_));
        SCALELAB_NCCL_CHECK(ncclRecv(words + 1, 1, ncclInt64, peer, comm_, stream_));
      });
      wait("the start-time agreement of send / recv");
      SCALELAB_CUDA_CHECK(cudaMemcpy(&result, words + 1, sizeof result, cudaMemcpyDeviceToHost));
    });
    return result;
  }

 private:
  void activate() const { SCALELAB_CUDA_CHECK(cudaSetDevice(device_)); }

  // Runs a call unless the communicator was aborted (after a timeout or an asynchronous error);
  // then every later call fails at once, naming the first error.
  template <typename Fn>
  void guarded(const std::string& what, Fn fn) {
    if (!comm_)
      throw Error("comm", "nccl: rank " + std::to_string(rank()) + " cannot run " + what +
                              ": the communicator was aborted after an earlier failure — end the run (the earlier "
                              "error: " + broken_ + ")");
    try {
      fn();
    } catch (const Error& e) {
      if (!comm_ && broken_.empty()) broken_ = e.message();
      throw;
    }
  }

  // NCCL moves GPU memory of this rank's GPU only.
  void check_tensor(const Tensor& t, const std::string& what) const {
    const std::string where = "cuda:" + std::to_string(device_);
    if (Device* dev = t.device()) {
      auto* cuda = dynamic_cast<CudaExecutor*>(&dev->executor());
      if (!cuda)
        throw Error("comm", "nccl: " + what + ": a tensor " + t.shape_string() + " lives on " + dev->name() +
                                " — nccl moves GPU memory: put it on " + where +
                                " (--device cuda), or use --comm mpi|threads|shm for host tensors");
      if (cuda->ordinal() != device_)
        throw Error("comm", "nccl: " + what + ": a tensor " + t.shape_string() + " lives on " + dev->name() +
                                ", but this rank's communicator is on " + where + " — allocate it on " + where);
      return;
    }
    if (!t.raw()) return;  // an empty bare tensor: nothing to move
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, t.raw());
    if (e != cudaSuccess || attr.type != cudaMemoryTypeDevice || attr.device != device_) {
      (void)cudaGetLastError();
      throw Error("comm", "nccl: " + what + ": a tensor " + t.shape_string() + " is not memory of " + where +
                              " — allocate it on this rank's GPU");
    }
  }

  // The collective reads and writes the tensor after everything already queued on the stream of
  // the device it lives on. (When the call returns the collective has finished, so later work on
  // that stream needs no event back.)
  void after_producer(const Tensor& t) {
    Device* dev = t.device();
    auto* cuda = dev ? dynamic_cast<CudaExecutor*>(&dev->executor()) : nullptr;
    if (!cuda) return;
    SCALELAB_CUDA_CHECK(cudaEventRecord(produced_, cuda->stream()));
    SCALELAB_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0));
  }

  // A stream-ordered copy of `bytes` at src: the input of a call whose output overlaps it in a way
  // NCCL's in-place convention does not cover. Freed in stream order once the call has run.
  const void* staged(const void* src, int64_t bytes) {
    void* copy = nullptr;
    SCALELAB_CUDA_CHECK(cudaMallocAsync(&copy, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream_));
    staging_.push_back(copy);
    SCALELAB_CUDA_CHECK(cudaMemcpyAsync(copy, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
    return copy;
  }
  void free_staging() {
    for (void* p : staging_) (void)cudaFreeAsync(p, stream_);
    staging_.clear();
  }

  static char* at(const Tensor& t, int64_t elems) { return static_cast<char*>(t.raw()) + elems * dtype_size(t.dtype()); }

  // Point-to-point calls between ncclGroupStart and ncclGroupEnd run together; the group is
  // closed even when a call inside it fails, so the communicator stays consistent.
  template <typename Fn>
  void in_group(Fn fn) {
    SCALELAB_NCCL_CHECK(ncclGroupStart());
    try {
      fn();
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    SCALELAB_NCCL_CHECK(ncclGroupEnd());
  }

  void issue(const Call& c) {
    const int n = size(), r = rank();
    switch (c.op) {
      case Collective::all_reduce: {
        const void* in = c.in->raw();
        if (in != c.out->raw() && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
          in = staged(in, c.in->nbytes());
        SCALELAB_NCCL_CHECK(ncclAllReduce(in, c.out->raw(), static_cast<size_t>(c.out->numel()),
                                          nccl_type(c.out->dtype()), nccl_op(c.reduce_op), comm_, stream_));
        return;
      }
      case Collective::broadcast:
        SCALELAB_NCCL_CHECK(ncclBroadcast(c.out->raw(), c.out->raw(), static_cast<size_t>(c.out->numel()),
                                          nccl_type(c.out->dtype()), c.root, comm_, stream_));
        return;
      case Collective::reduce: {
        const void* in = c.in->raw();
        void* out = c.out ? c.out->raw() : nullptr;  // only the root has an output
        if (out && in != out && overlaps(in, c.in->nbytes(), out, c.out->nbytes())) in = staged(in, c.in->nbytes());
        SCALELAB_NCCL_CHECK(ncclReduce(in, out, static_cast<size_t>(c.in->numel()), nccl_type(c.in->dtype()),
                                       nccl_op(c.reduce_op), c.root, comm_, stream_));
        return;
      }
      case Collective::all_gather: {
        // NCCL's in place: the input is this rank's block of the output.
        const int64_t block = c.in->numel();
        const void* in = c.in->raw();
        if (in != at(*c.out, r * block) && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
          in = staged(in, c.in->nbytes());
        SCALELAB_NCCL_CHECK(ncclAllGather(in, c.out->raw(), static_cast<size_t>(block), nccl_type(c.in->dtype()),
                                          comm_, stream_));
        return;
      }
      case Collective::reduce_scatter: {
        // NCCL's in place: the output is this rank's block of the input.
        const int64_t block = c.out->numel();
        const void* in = c.in->raw();
        if (c.out->raw() != at(*c.in, r * block) && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
          in = staged(in, c.in->nbytes());
        SCALELAB_NCCL_CHECK(ncclReduceScatter(in, c.out->raw(), static_cast<size_t>(block), nccl_type(c.out->dtype()),
                                              nccl_op(c.reduce_op), comm_, stream_));
        return;
      }
      case Collective::scatter: {
        // NCCL has no scatter: the root sends each rank its block, in one group so they overlap.
        const int64_t block = c.out->numel();
        const ncclDataType_t type = nccl_type(c.out->dtype());
        const char* in = c.in ? static_cast<const char*>(c.in->raw()) : nullptr;
        if (in && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()) && c.out->raw() != at(*c.in, r * block))
          in = static_cast<const char*>(staged(in, c.in->nbytes()));
        in_group([&] {
          if (r == c.root) {
            for (int k = 0; k < n; ++k)
              if (k != r)
                SCALELAB_NCCL_CHECK(ncclSend(in + k * block * dtype_size(c.out->dtype()), static_cast<size_t>(block),
                                             type, k, comm_, stream_));
          } else {
            SCALELAB_NCCL_CHECK(ncclRecv(c.out->raw(), static_cast<size_t>(block), type, c.root, comm_, stream_));
          }
        });
        const void* own = in ? in + r * block * dtype_size(c.out->dtype()) : nullptr;
        if (r == c.root && own != c.out->raw() && block > 0) {
          settle("scatter");  // the group call must have been queued before the next stream op
          SCALELAB_CUDA_CHECK(cudaMemcpyAsync(c.out->raw(), own, static_cast<size_t>(c.out->nbytes()),
                                              cudaMemcpyDeviceToDevice, stream_));
        }
        return;
      }
      case Collective::gather: {
        const int64_t block = c.in->numel();
        const ncclDataType_t type = nccl_type(c.in->dtype());
        const void* in = c.in->raw();
        if (c.out && in != at(*c.out, r * block) && overlaps(in, c.in->nbytes(), c.out->raw(), c.out->nbytes()))
          in = staged(in, c.in->nbytes());
        in_group([&] {
          if (r == c.root) {
            for (int k = 0; k < n; ++k)
              if (k != r)
                SCALELAB_NCCL_CHECK(ncclRecv(at(*c.out, k * block), static_cast<size_t>(block), type, k, comm_, stream_));
          } else {
            SCALELAB_NCCL_CHECK(ncclSend(in, static_cast<size_t>(block), type, c.root, comm_, stream_));
          }
        });
        if (r == c.root && in != at(*c.out, r * block) && block > 0) {
          settle("gather");
          SCALELAB_CUDA_CHECK(cudaMemcpyAsync(at(*c.out, r * block), in, static_cast<size_t>(c.in->nbytes()),
                                              cudaMemcpyDeviceToDevice, stream_));
        }
        return;
      }
      case Collective::send:
        SCALELAB_NCCL_CHECK(ncclSend(c.in->raw(), static_cast<size_t>(c.in->numel()), nccl_type(c.in->dtype()), c.root,
                                     comm_, stream_));
        return;
      case Collective::recv:
        SCALELAB_NCCL_CHECK(ncclRecv(c.out->raw(), static_cast<size_t>(c.out->numel()), nccl_type(c.out->dtype()),
                                     c.root, comm_, stream_));
        return;
      case Collective::barrier:
        // A barrier is an all-reduce of one float: it completes only when every rank has joined.
        SCALELAB_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
        return;
    }
  }

  // Waits until the communicator has queued the last call (a non-blocking communicator may still
  // be enqueueing it), up to the timeout.
  void settle(const std::string& what) {
    const auto start = SteadyClock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      SCALELAB_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(state, what);
      const auto waited = SteadyClock::now() - start;
      if (waited >= options().timeout) time_out(what);
      pause_between_polls(waited);
    }
  }

  // Waits until everything queued on the communication stream has run, polling so that a rank
  // that never arrives ends in an error, not a hang.
  void wait(const std::string& what, bool initialising = false) {
    const auto start = SteadyClock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      SCALELAB_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress) fail(state, what);
      if (state == ncclSuccess) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) {
          free_staging();
          return;
        }
        if (e != cudaErrorNotReady) detail::throw_cuda_error(e, "cudaStreamQuery (the collective's stream)", __FILE__, __LINE__);
      }
      const auto waited = SteadyClock::now() - start;
      if (waited >= options().timeout) time_out(what, initialising);
      pause_between_polls(waited);
    }
  }

  [[noreturn]] void fail(ncclResult_t state, const std::string& what) {
    const std::string last = ncclGetLastError(comm_) ? ncclGetLastError(comm_) : "";
    abort_communicator();
    throw Error("nccl", what + " failed on rank " + std::to_string(rank()) + ": " + ncclGetErrorString(state) +
                            (last.empty() ? "" : " (" + last + ")") + " — " + detail::nccl_hint(state));
  }

  [[noreturn]] void time_out(const std::string& what, bool initialising = false) {
    abort_communicator();
    if (initialising)
      throw Error("comm", "nccl: rank " + std::to_string(rank()) + " waited " + seconds(options().timeout) + " in " +
                              what + " for the other ranks of " + std::to_string(size()) +
                              " — a rank died or never started, was given another unique id (a stale unique-id "
                              "file?), or uses the same GPU as another (raise --comm-timeout if they are merely slow)");
    throw Error("comm", "nccl: rank " + std::to_string(rank()) + " waited " + seconds(options().timeout) + " in " + what +
                            " on cuda:" + std::to_string(device_) +
                            ", which never completed — a rank died or skipped the collective (NCCL cannot tell "
                            "which); every rank must issue the same collectives in the same order. The communicator "
                            "is aborted: end the run (raise --comm-timeout if the ranks are merely slow)");
  }

  // ncclCommAbort stops the communicator's kernels, so the stream drains and memory can be freed.
  void abort_communicator() noexcept {
    if (!comm_) return;
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  void release() noexcept {
    // Destructors never throw: every error here is ignored.
    (void)cudaSetDevice(device_);
    if (comm_) {
      // Finalize flushes what is queued and waits for the peers; bounded by the timeout, then abort.
      const ncclResult_t finalizing = ncclCommFinalize(comm_);
      bool clean = finalizing == ncclSuccess || finalizing == ncclInProgress;
      const auto start = SteadyClock::now();
      for (ncclResult_t state = ncclInProgress; clean && state == ncclInProgress;) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) clean = false;
        if (state != ncclSuccess && state != ncclInProgress) clean = false;
        if (SteadyClock::now() - start > options().timeout) clean = false;
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (clean) (void)ncclCommDestroy(comm_);
      else (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    if (stream_) {
      for (void* p : staging_) (void)cudaFreeAsync(p, stream_);  // from cudaMallocAsync: freed in stream order
      (void)cudaStreamSynchronize(stream_);
    }
    staging_.clear();
    if (scratch_) (void)cudaFree(scratch_);
    if (produced_) (void)cudaEventDestroy(produced_);
    if (stream_) (void)cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    produced_ = nullptr;
    stream_ = nullptr;
    (void)cudaGetLastError();
  }

  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;    // the communication stream: compute streams keep running beside it
  cudaEvent_t produced_ = nullptr;   // marks the end of a tensor's producing work on its stream
  void* scratch_ = nullptr;          // two int64 words: barrier and start-time agreement
  std::vector<void*> staging_;
  std::string broken_;               // once aborted, every later call fails at once
};

}  // namespace

bool nccl_available() { return cuda_device_count() > 0; }

std::unique_ptr<ProcessGroup> make_nccl_group(int rank, int size, int cuda_device, const NcclBootstrap& bootstrap,
                                              CommOptions options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw UsageError("nccl", "rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank of the world");
  const int gpus = cuda_device_count();
  if (gpus == 0)
    throw UsageError("nccl", "no CUDA device is visible — nccl needs a GPU per rank (check nvidia-smi and "
                             "CUDA_VISIBLE_DEVICES), or use --comm mpi|threads|shm");
  if (cuda_device < 0 || cuda_device >= gpus)
    throw UsageError("nccl", "GPU " + std::to_string(cuda_device) + " asked for, but " + std::to_string(gpus) +
                                 " visible — give each rank a GPU in [0, " + std::to_string(gpus) + ")");
  const ncclUniqueId id = bootstrap.unique_id_file.empty()
                              ? id_through_mpi(rank, size, options)
                              : id_through_file(rank, bootstrap.unique_id_file, options.timeout);
  return std::make_unique<NcclGroup>(rank, size, cuda_device, id, options);
}

}  // namespace scalelab
