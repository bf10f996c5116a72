#pragma once
// A device = executor (runs the numerics) + clock (stamps each op) + memory ledger (counts every
// byte by category). Every op goes through here, so each one becomes an Event with its lane, its
// bytes and its FLOPs, on cpu, cuda and sim alike: strategies never ask which kind they run on.
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device/clock.h"
#include "core/device/executor.h"
#include "core/device/host_traffic.h"
#include "core/device/sim/profile.h"
#include "core/memory_ledger.h"
#include "core/tensor.h"
#include "core/trace/events.h"
#include "core/trace/wire.h"

namespace scalelab {

enum class DeviceKind : uint8_t { cpu, sim, cuda };
const char* device_kind_name(DeviceKind kind);
DeviceKind parse_device_kind(const std::string& name);  // throws UsageError

// What an op is for, as it will appear in the trace and the dashboard.
struct OpTag {
  std::string name;
  Phase phase = Phase::fwd;
  int layer = -1;
  int micro_batch = -1;
  int bucket = -1;
  Role role = Role::none;  // what the op does in the lesson (DataParallel's scatter …); uploads and
                           // downloads get theirs by themselves
};

class Device {
 public:
  // A sim device passes its hardware profile: it describes itself on the bus with it.
  Device(int index, DeviceKind kind, std::string name, std::unique_ptr<Executor> executor,
         std::unique_ptr<Clock> clock, int64_t capacity_bytes, EventBus* bus,
         const HardwareProfile* profile = nullptr);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int index() const { return index_; }
  DeviceKind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  Executor& executor() { return *executor_; }
  Clock& clock() { return *clock_; }
  MemoryLedger& memory() { return *ledger_; }
  const MemoryLedger& memory() const { return *ledger_; }
  // Who it is, as it described itself on its bus: name, "<kind>:<index>", its profile if sim.
  const DeviceDescription& description() const { return description_; }
  EventBus* bus() const { return bus_; }
  bool computes() const { return executor_->computes(); }
  // A sim device on a profile with a host calibration meters what the devices of its host thread
  // move through the host's cache (core/device/host_traffic.h); null for every other device.
  HostTrafficMeter* host_meter() { return host_meter_.get(); }
  // The calling thread's devices' traffic, as of its last op on each; none without a meter.
  HostTraffic host_traffic() const { return host_meter_ ? host_meter_->traffic(ledger_->peak_total()) : HostTraffic{}; }
  // Stamped on every event this device emits from now on.
  void set_step(int64_t step) {
    if (step != step_ && host_meter_) host_meter_->next_step();
    step_ = step;
  }
  int64_t step() const { return step_; }

  Tensor empty(std::vector<int64_t> shape, DType dtype, MemoryCategory category, const std::string& what = "");
  Tensor zeros(std::vector<int64_t> shape, DType dtype, MemoryCategory category, const std::string& what = "");

  // c = alpha · op(a) · op(b) + beta · c. A and B are f32, or both f16 or both bf16 (then the
  // products are summed in f32 and C, in their dtype or f32, is rounded once: a tensor core).
  // The element-wise ops take f32, f16 or bf16, one dtype per op, and compute in f32.
  void gemm(const OpTag& tag, bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c,
            float beta = 0.0f, float alpha = 1.0f);
  void bias_act(const OpTag& tag, const Tensor& y, const Tensor& bias, Activation act);
  void bias_act_backward(const OpTag& tag, const Tensor& dy, const Tensor& y, const Tensor& dbias, Activation act,
                         bool accumulate = false);
  // Mean loss; dlogits (if defined) gets grad_scale · d(mean loss)/d(logits).
  double softmax_xent(const OpTag& tag, const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                      float grad_scale = 1.0f);
  double mse(const OpTag& tag, const Tensor& pred, const Tensor& target, const Tensor& dpred, float grad_scale = 1.0f);
  void sgd(const OpTag& tag, const Tensor& w, const Tensor& g, const Tensor& momentum_buf, const SgdOptions& o);
  void adam(const OpTag& tag, const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
            const AdamOptions& o, int64_t t);
  // y += alpha · x; y in x's dtype, or f32 (a half gradient added into an f32 master gradient).
  void axpy(const OpTag& tag, float alpha, const Tensor& x, const Tensor& y);
  void scale(const OpTag& tag, float alpha, const Tensor& x);
  void fill(const OpTag& tag, const Tensor& x, float value);
  void cast(const OpTag& tag, const Tensor& src, const Tensor& dst);
  bool has_non_finite(const OpTag& tag, const Tensor& x);
  // Host <-> device over the host link, on the copy lane. A device that computes nothing takes
  // src = nullptr (shape-only weights); one that computes refuses it.
  void upload(const OpTag& tag, const Tensor& dst, const void* src);
  void download(const OpTag& tag, void* dst, const Tensor& src);
  // An f32 tensor downloaded into a new host vector; empty when the device computes nothing (a
  // dry run has no values to bring back, and a 1e9-parameter model must not cost the host 4 GB).
  std::vector<float> download_f32(const OpTag& tag, const Tensor& src);
  // Copies src (on this or another device) into dst on this device, on the copy lane.
  void copy(const OpTag& tag, const Tensor& src, const Tensor& dst);
  // dst = src's rows regrouped, one op: src is `outer` groups of `inner` blocks of equal rows,
  // block (o, i); dst holds block (o, i) at (i, o) — a transpose of row blocks. Sequence parallel
  // regroups the ranks' gathered shards (rank, sequence) into whole sequences (sequence, rank).
  void regroup_rows(const OpTag& tag, const Tensor& src, const Tensor& dst, int64_t outer, int64_t inner);

  // ---- transformer ops (a GPT's layers: core/nn/transformer_layers.h) ----
  // LayerNorm and the embedding take f32 (autocast keeps them in f32); GELU and attention f32, f16
  // or bf16, one dtype per op, computed in f32 and rounded once where stored.
  // Per row: y = (x − mean) · rstd · gamma + beta over x's columns; mean and rstd {rows} are kept
  // for the backward (rstd = 1 / √(var + eps)).
  void layer_norm(const OpTag& tag, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd, float eps = 1e-5f);
  // dx (written), dgamma and dbeta (written, or added to with accumulate).
  void layer_norm_backward(const OpTag& tag, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                           const Tensor& dbeta, bool accumulate = false);
  // The exact (erf) GELU, as torch.nn.GELU(). Its backward takes the forward's input x and output
  // y (Φ(x) = y / x: no erf again); dx may be dy.
  void gelu(const OpTag& tag, const Tensor& x, const Tensor& y);
  void gelu_backward(const OpTag& tag, const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx);
  // out {B·T, C}: row b·T + t = wte[ids[b, t]] + wpe[t]; ids {B, T} f32 holding whole token ids in
  // [0, V) (anything else throws). wte {V, C}, wpe {T, C}.
  void embedding(const OpTag& tag, const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out);
  // dwte (+)= rows of dout scattered by id, dwpe (+)= dout summed over the batch; deterministic.
  void embedding_backward(const OpTag& tag, const Tensor& dout, const Tensor& ids, const Tensor& dwte,
                          const Tensor& dwpe, bool accumulate = false);
  // Causal multi-head self-attention as one op: qkv {B·T, 3C} (q | k | v, head h at columns
  // h·d … (h+1)·d of each, d = C / heads) → y {B·T, C}; probs {B·heads·T, T} receives the softmax P
  // (kept for the backward). T is probs' column count. Priced as a GEMM (4·B·heads·T²·d FLOPs).
  void attention(const OpTag& tag, const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y);
  // dqkv {B·T, 3C} from dy {B·T, C}; dscores (probs' shape) is workspace for dP and dS. 8·B·heads·T²·d FLOPs.
  void attention_backward(const OpTag& tag, const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t heads,
                          const Tensor& dscores, const Tensor& dqkv);
  // ---- the ConvNet's ops (core/nn/conv_layers.h), f32, images as rows of C·H·W (NCHW) ----
  // y = act(conv(x, W) + b): x {N, C·H·W}, weight {OC, C, K, K}, bias {OC}, y {N, OC·OH·OW}, as
  // im2col + GEMM, priced as the GEMM (m = OC, n = N·OH·OW, k = C·K·K). Its im2col workspace is a
  // `workspace` tensor in the ledger for the op's duration.
  void conv2d(const OpTag& tag, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
              const Conv2dGeometry& g, Activation act);
  // Two ops, two events: dy ← dy ⊙ act'(y) in place, dbias and dweight written (or, with accumulate,
  // added to); then, when dx is defined, dx = the input's gradient (col2im of Wᵀ · dy).
  void conv2d_backward(const OpTag& tag, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& weight,
                       const Tensor& dweight, const Tensor& dbias, const Tensor& dx, const Conv2dGeometry& g,
                       Activation act, bool accumulate = false);
  // y {N, C·OH·OW} = the max of each window of x {N, C·H·W}; indices (i32, y's shape) = where, as
  // h·W + w within the channel. Backward adds dy into a zeroed dx at those places.
  void max_pool2d(const OpTag& tag, const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g);
  void max_pool2d_backward(const OpTag& tag, const Tensor& dy, const Tensor& indices, const Tensor& dx,
                           const Pool2dGeometry& g);
  // y = x ⊙ mask / (1 − p), the mask hashed from each element's place in the global batch
  // (kernels::DropoutMask); the same op on dy is the backward. y may be x.
  void dropout(const OpTag& tag, const Tensor& x, const Tensor& y, const DropoutMask& mask);

  // Devices driven by the same host thread share when that host last waited for one of them.
  void share_host_with(const Device& other) { host_ready_ns_ = other.host_ready_ns_; }
  void use_own_host() { host_ready_ns_ = std::make_shared<std::atomic<int64_t>>(host_ready_ns_->load()); }
  // One run's devices, made together (make_devices): a thread's record of the devices it drives
  // (host_traffic) holds those of one run.
  void made_with(const Device& first) {
    if (host_meter_ && first.host_meter_) host_meter_->same_run_as(*first.host_meter_);
  }

  // Emits an event for work timed elsewhere (a collective, whose start depends on every rank).
  void record(Event e);

 private:
  template <typename Work>
  Interval run_op(const OpTag& tag, const char* kind, Lane lane, const OpCost& cost,
              std::initializer_list<const Tensor*> inputs, std::initializer_list<const Tensor*> outputs,
              Work&& work, int peer = -1);
  void check_here(const Tensor& t, const char* op, const char* what) const;
  void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* what) const;
  void check_f32(const Tensor& t, const std::string& op, const char* what) const;
  void check_float_like(const Tensor& t, const Tensor& first, const std::string& op, const char* what) const;
  void check_shape(const Tensor& t, const std::vector<int64_t>& shape, const std::string& op, const char* what) const;
  void host_waits_until(int64_t t_ns);

  int index_;
  DeviceKind kind_;
  std::string name_;
  DeviceDescription description_;
  std::shared_ptr<Executor> executor_;  // shared with the storages it allocated: they may outlive the device
  std::unique_ptr<Clock> clock_;
  std::shared_ptr<MemoryLedger> ledger_;
  EventBus* bus_;
  int64_t step_ = -1;
  std::unique_ptr<HostTrafficMeter> host_meter_;  // see host_meter()
  // When the host last waited for a device (it read a loss, or downloaded a tensor): the host
  // issues the next upload only after that, as a training loop that prints loss.item() does.
  // Shared by the devices one host drives: all of a controller's, each rank's own.
  std::shared_ptr<std::atomic<int64_t>> host_ready_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  // sim with a profile of a host that waits for each op (HostCalibration::host_op_gap_s): the gap
  // before this device's next op, and when its last op ended; < 0: the host does not wait. Per
  // device, not per host: the threads that drive a device's ops (a replica thread, a rank) wait for
  // its ops alone, and a shared mark would make the order of racing threads decide the times.
  int64_t host_op_gap_ns_ = -1;
  std::atomic<int64_t> last_op_end_ns_{0};
};

// How to make devices for a run.
struct DeviceOptions {
  DeviceKind kind = DeviceKind::cpu;
  int count = 1;
  HardwareProfile profile;  // required for sim
  bool dry_run = false;     // sim only: shape-only tensors, no numerics
  bool tf32 = false;        // cuda only: f32 GEMMs on the tensor cores as TF32 (sim: profile.tf32)
  EventBus* bus = nullptr;
  // The index (and name) of the first device: rank r of an mpi launch owns device r of the run,
  // so its events and its place in the profile's nodes are the global ones.
  int first_index = 0;
  // How many devices the whole run has (0: `count`). A process of a run of several — a Hogwild
  // worker, an mpi or procs rank — makes only its own devices, but shares the host (the sim: its
  // node's host, whose cache the cost model prices) with the others' as well.
  int run_count = 0;
  // When measured clocks start counting (cpu, cuda); unset: now. Worker processes pass their
  // parent's, so every process's events share one time axis.
  std::optional<WallClock::time_point> epoch;
};

// Where cuda device `index` of a run of `count` lives when this machine has `gpus` GPUs: round-robin,
// so with fewer GPUs than devices several logical devices share one (cuda:0.0 … cuda:0.3 on one GPU).
struct CudaPlacement {
  int gpu = 0;      // the physical GPU (CUDA ordinal)
  int local = 0;    // which of that GPU's logical devices
  int sharing = 1;  // how many of the run's devices that GPU holds
  bool logical = false;  // the run has more devices than GPUs: names carry the local index
  std::string name() const;  // "cuda:1", or "cuda:0.2" when logical
};
CudaPlacement place_cuda_device(int index, int count, int gpus);

// cpu devices compute for real on this machine's cores; more than this is a mistake, not a run
// (sim devices with --dry-run are the way to thousands).
constexpr int kMaxCpuDevices = 256;

std::vector<std::unique_ptr<Device>> make_devices(const DeviceOptions& options);

// The device's ledger as the wire codec ships it (core/trace/wire.h): index, description,
// capacity and peaks — what the summary's memory columns show for it.
DeviceRecord device_record(const Device& device);

// Provided by core/device/cuda (or its stub when CUDA is absent).
bool cuda_available();
int cuda_device_count();
// GPU `ordinal`, shown as `name` (empty: "cuda:<ordinal>"), with the GPU's memory over `sharing`
// devices placed on it (logical devices: several cuda devices of a run on one GPU).
// tf32: f32 GEMMs on the tensor cores in TF32 (PyTorch's allow_tf32); off, they are full f32.
std::unique_ptr<Executor> make_cuda_executor(int ordinal, const std::string& name = "", int sharing = 1,
                                             bool tf32 = false);
// The GPU's name as the driver gives it ("NVIDIA H100 80GB HBM3"); empty without CUDA.
std::string cuda_device_name(int ordinal);
std::unique_ptr<Clock> make_cuda_clock(Executor& executor, WallClock::time_point epoch);

}  // namespace scalelab
