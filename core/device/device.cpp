#include "core/device/device.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/device/cpu/cpu_executor.h"
#include "core/error.h"

namespace scalelab {

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::sim: return "sim";
    case DeviceKind::cuda: return "cuda";
  }
  return "?";
}

DeviceKind parse_device_kind(const std::string& name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "sim") return DeviceKind::sim;
  if (name == "cuda") return DeviceKind::cuda;
  throw UsageError("device", "unknown device '" + name + "' — use cpu, sim or cuda");
}

Device::Device(int index, DeviceKind kind, std::string name, std::unique_ptr<Executor> executor,
               std::unique_ptr<Clock> clock, int64_t capacity_bytes, EventBus* bus, const HardwareProfile* profile)
    : index_(index),
      kind_(kind),
      name_(std::move(name)),
      // cuda's names are short already, and a logical device's ("cuda:0.2") says which GPU it shares.
      description_{name_, kind_ == DeviceKind::cuda ? name_ : std::string(device_kind_name(kind_)) + ":" + std::to_string(index_),
                   profile ? profile_to_json(*profile) : "", capacity_bytes},
      executor_(std::move(executor)),
      clock_(std::move(clock)),
      ledger_(std::make_shared<MemoryLedger>(name_, capacity_bytes)),
      bus_(bus) {
  if (profile && profile->calibration) {  // a host calibration: this device's ops are priced hot or cold
    if (profile->calibration->host_op_gap_s >= 0) host_op_gap_ns_ = seconds_to_ns(profile->calibration->host_op_gap_s);
    host_meter_ = std::make_unique<HostTrafficMeter>();
  }
  if (bus_) {
    bus_->describe_device(index_, description_);
    ledger_->set_listener([this](MemoryCategory category, int64_t live) {
      bus_->emit(MemorySample{index_, clock_->now_ns(), category, live});
    });
  }
}

Device::~Device() {
  // Tensors may outlive the device in a test; their release must not call back into us.
  ledger_->set_listener(nullptr);
}

Tensor Device::empty(std::vector<int64_t> shape, DType dtype, MemoryCategory category, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("tensor", "negative dimension in shape for " + what);
    n *= d;
  }
  const int64_t bytes = n * dtype_size(dtype);
  ledger_->allocate(category, bytes, what);  // throws the explaining out-of-memory error
  auto storage = std::make_shared<Storage>();
  storage->device = this;
  storage->category = category;
  storage->bytes = bytes;
  try {
    storage->data = executor_->allocate(bytes);
  } catch (...) {
    ledger_->release(category, bytes);
    throw;
  }
  storage->ledger = ledger_;
  storage->free_data = [exec = executor_](void* p) { exec->deallocate(p); };
  return Tensor(std::move(storage), std::move(shape), dtype);
}

Tensor Device::zeros(std::vector<int64_t> shape, DType dtype, MemoryCategory category, const std::string& what) {
  Tensor t = empty(std::move(shape), dtype, category, what);
  if (executor_->computes()) executor_->fill(t, 0.0f);
  return t;
}

void Device::check_here(const Tensor& t, const char* op, const char* what) const {
  if (!t.defined()) throw Error(name_, std::string(op) + ": " + what + " is undefined");
  if (t.device() != this)
    throw Error(name_, std::string(op) + ": " + what + " lives on " + (t.device() ? t.device()->name() : "?") +
                           ", not on " + name_ + " — copy it here first");
}

void Device::check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* what) const {
  if (a.defined() && b.defined() && a.dtype() != b.dtype())
    throw Error(name_, std::string(op) + ": " + what + " are " + a.shape_string() + " and " + b.shape_string() +
                           " — one dtype per op: cast one of them (Device::cast)");
}

namespace {

OpTag with_role(OpTag tag, Role role) {
  tag.role = role;
  return tag;
}

}  // namespace

template <typename Work>
Interval Device::run_op(const OpTag& tag, const char* kind, Lane lane, const OpCost& cost,
                    std::initializer_list<const Tensor*> inputs, std::initializer_list<const Tensor*> outputs,
                    Work&& work, int peer) {
  int64_t ready = 0;
  for (const Tensor* t : inputs)
    if (t && t->defined()) ready = std::max(ready, t->ready_ns());
  for (const Tensor* t : outputs)  // an op that writes must wait for the last write too
    if (t && t->defined()) ready = std::max(ready, t->ready_ns());
  OpCost priced = cost;
  priced.kind = kind;
  if (host_meter_) {  // set-up (weights placed by the main thread, step < 0) does not make a device shared
    const HostTraffic traffic = host_meter_->before_op(cost.bytes, ledger_->peak_total(), step_ >= 0);
    priced.host_bytes = traffic.moved;
    priced.held_bytes = traffic.held;
    priced.host_devices = traffic.devices;
    priced.shared_bytes = traffic.shared;
  }
  if (host_op_gap_ns_ >= 0) ready = std::max(ready, add_ns(last_op_end_ns_.load(), host_op_gap_ns_));
  Interval when = clock_->run(lane, ready, priced, [&] {
    if (executor_->computes()) work();
  });
  if (host_op_gap_ns_ >= 0) last_op_end_ns_ = std::max(last_op_end_ns_.load(), when.end_ns);  // waited for before the next
  for (const Tensor* t : outputs)
    if (t && t->defined()) t->set_ready_ns(when.end_ns);
  if (bus_) {
    Event e;
    e.device = index_;
    e.lane = lane;
    e.kind = kind;
    e.name = tag.name;
    e.phase = tag.phase;
    e.t_begin_ns = when.begin_ns;
    e.t_end_ns = when.end_ns;
    e.bytes = static_cast<int64_t>(cost.bytes);
    e.flops = cost.flops;
    e.step = step_;
    e.micro_batch = tag.micro_batch;
    e.bucket = tag.bucket;
    e.layer = tag.layer;
    e.peer = peer;
    e.role = tag.role;
    e.thread = host_thread_index();
    bus_->emit(std::move(e));
  }
  return when;
}

void Device::gemm(const OpTag& tag, bool ta, bool tb, const Tensor& a, const Tensor& b, const Tensor& c, float beta,
                  float alpha) {
  check_here(a, "gemm", "A");
  check_here(b, "gemm", "B");
  check_here(c, "gemm", "C");
  const int64_t m = ta ? a.cols() : a.rows(), k = ta ? a.rows() : a.cols();
  const int64_t kb = tb ? b.cols() : b.rows(), n = tb ? b.rows() : b.cols();
  // A and B in one dtype: both f32, or both half (a tensor core's inputs); C in theirs or f32.
  check_same_dtype(a, b, "gemm", "A and B");
  if (c.dtype() != a.dtype() && c.dtype() != DType::f32)
    throw Error(name_, "gemm " + tag.name + ": C is " + c.shape_string() + " for " + dtype_name(a.dtype()) +
                           " inputs — write C in the inputs' dtype or in f32");
  if (k != kb || c.rows() != m || c.cols() != n)
    throw Error(name_, "gemm " + tag.name + ": shapes do not match: op(A) " + std::to_string(m) + "x" +
                           std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) + ", C " +
                           c.shape_string());
  OpCost cost{OpClass::gemm, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
              static_cast<double>(a.nbytes() + b.nbytes() + c.nbytes() * (beta != 0.0f ? 2 : 1)), a.dtype(),
              static_cast<double>(m), static_cast<double>(n), static_cast<double>(k)};
  cost.trans_a = ta;
  cost.trans_b = tb;
  cost.accumulates = beta != 0.0f;
  run_op(tag, "gemm", Lane::compute, cost, {&a, &b}, {&c}, [&] { executor_->gemm(ta, tb, alpha, a, b, beta, c); });
}

void Device::bias_act(const OpTag& tag, const Tensor& y, const Tensor& bias, Activation act) {
  check_here(y, "bias_act", "y");
  check_here(bias, "bias_act", "bias");
  if (bias.numel() != y.cols())
    throw Error(name_, "bias_act " + tag.name + ": bias " + bias.shape_string() + " does not match " + y.shape_string());
  check_same_dtype(y, bias, "bias_act", "y and bias");
  OpCost cost{OpClass::elementwise, 2.0 * static_cast<double>(y.numel()),
              static_cast<double>(2 * y.nbytes() + bias.nbytes()), y.dtype()};
  run_op(tag, act == Activation::relu ? "bias_relu" : "bias", Lane::compute, cost, {&bias}, {&y},
         [&] { executor_->bias_act(y, bias, act); });
}

void Device::bias_act_backward(const OpTag& tag, const Tensor& dy, const Tensor& y, const Tensor& dbias,
                               Activation act, bool accumulate) {
  check_here(dy, "bias_act_backward", "dy");
  check_here(dbias, "bias_act_backward", "dbias");
  check_same_dtype(dy, y, "bias_act_backward", "dy and y");
  check_same_dtype(dy, dbias, "bias_act_backward", "dy and dbias");
  OpCost cost{OpClass::elementwise, 2.0 * static_cast<double>(dy.numel()),
              static_cast<double>(2 * dy.nbytes() + (act == Activation::relu ? y.nbytes() : 0) + dbias.nbytes()),
              dy.dtype()};
  run_op(tag, act == Activation::relu ? "bias_relu_bwd" : "bias_bwd", Lane::compute, cost, {&y}, {&dy, &dbias},
         [&] { executor_->bias_act_backward(dy, y, dbias, act, accumulate); });
}

double Device::softmax_xent(const OpTag& tag, const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                            float grad_scale) {
  check_here(logits, "softmax_xent", "logits");
  check_here(labels, "softmax_xent", "labels");
  if (labels.numel() != logits.rows())
    throw Error(name_, "softmax_xent: " + std::to_string(labels.numel()) + " labels for " +
                           std::to_string(logits.rows()) + " rows of logits");
  check_same_dtype(logits, dlogits, "softmax_xent", "logits and dlogits");
  double loss = 0;
  OpCost cost{OpClass::elementwise, 5.0 * static_cast<double>(logits.numel()),
              static_cast<double>(2 * logits.nbytes() + labels.nbytes()), logits.dtype()};
  const Interval when = run_op(tag, "softmax_xent", Lane::compute, cost, {&logits, &labels}, {&dlogits},
                               [&] { loss = executor_->softmax_xent(logits, labels, dlogits, grad_scale); });
  host_waits_until(when.end_ns);  // the loss comes back to the host
  return executor_->computes() ? loss : std::numeric_limits<double>::quiet_NaN();
}

double Device::mse(const OpTag& tag, const Tensor& pred, const Tensor& target, const Tensor& dpred,
                   float grad_scale) {
  check_here(pred, "mse", "pred");
  check_here(target, "mse", "target");
  if (pred.numel() != target.numel())
    throw Error(name_, "mse: prediction " + pred.shape_string() + " and target " + target.shape_string() + " differ");
  double loss = 0;
  OpCost cost{OpClass::elementwise, 3.0 * static_cast<double>(pred.numel()),
              static_cast<double>(3 * pred.nbytes()), pred.dtype()};
  const Interval when = run_op(tag, "mse", Lane::compute, cost, {&pred, &target}, {&dpred},
                               [&] { loss = executor_->mse(pred, target, dpred, grad_scale); });
  host_waits_until(when.end_ns);
  return executor_->computes() ? loss : std::numeric_limits<double>::quiet_NaN();
}

void Device::sgd(const OpTag& tag, const Tensor& w, const Tensor& g, const Tensor& buf, const SgdOptions& o) {
  check_here(w, "sgd", "weights");
  check_here(g, "sgd", "gradient");
  const bool momentum = o.momentum != 0.0f && buf.defined();
  OpCost cost{OpClass::elementwise, (momentum ? 4.0 : 2.0) * static_cast<double>(w.numel()),
              static_cast<double>(w.nbytes() * (momentum ? 5 : 3)), w.dtype()};
  run_op(tag, "sgd", Lane::compute, cost, {&g}, {&w, &buf}, [&] { executor_->sgd(w, g, buf, o); });
}

void Device::adam(const OpTag& tag, const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamOptions& o, int64_t t) {
  check_here(w, "adam", "weights");
  OpCost cost{OpClass::elementwise, 12.0 * static_cast<double>(w.numel()), static_cast<double>(7 * w.nbytes()),
              w.dtype()};
  run_op(tag, "adam", Lane::compute, cost, {&g}, {&w, &m, &v}, [&] { executor_->adam(w, g, m, v, o, t); });
}

void Device::axpy(const OpTag& tag, float alpha, const Tensor& x, const Tensor& y) {
  check_here(x, "axpy", "x");
  check_here(y, "axpy", "y");
  if (x.numel() != y.numel()) throw Error(name_, "axpy: " + x.shape_string() + " and " + y.shape_string() + " differ");
  // y in x's dtype, or f32: a half gradient added into an f32 master gradient.
  if (y.dtype() != DType::f32) check_same_dtype(x, y, "axpy", "x and y");
  OpCost cost{OpClass::elementwise, 2.0 * static_cast<double>(x.numel()),
              static_cast<double>(x.nbytes() + 2 * y.nbytes()), x.dtype()};
  run_op(tag, "axpy", Lane::compute, cost, {&x}, {&y}, [&] { executor_->axpy(alpha, x, y); });
}

void Device::scale(const OpTag& tag, float alpha, const Tensor& x) {
  check_here(x, "scale", "x");
  OpCost cost{OpClass::elementwise, static_cast<double>(x.numel()), static_cast<double>(2 * x.nbytes()), x.dtype()};
  run_op(tag, "scale", Lane::compute, cost, {}, {&x}, [&] { executor_->scale(alpha, x); });
}

void Device::fill(const OpTag& tag, const Tensor& x, float value) {
  check_here(x, "fill", "x");
  OpCost cost{OpClass::elementwise, 0, static_cast<double>(x.nbytes()), x.dtype()};
  run_op(tag, "fill", Lane::compute, cost, {}, {&x}, [&] { executor_->fill(x, value); });
}

void Device::cast(const OpTag& tag, const Tensor& src, const Tensor& dst) {
  check_here(src, "cast", "source");
  check_here(dst, "cast", "destination");
  OpCost cost{OpClass::elementwise, 0, static_cast<double>(src.nbytes() + dst.nbytes()), dst.dtype()};
  run_op(tag, "cast", Lane::compute, cost, {&src}, {&dst}, [&] { executor_->cast(src, dst); });
}

bool Device::has_non_finite(const OpTag& tag, const Tensor& x) {
  check_here(x, "has_non_finite", "x");
  bool found = false;
  OpCost cost{OpClass::elementwise, static_cast<double>(x.numel()), static_cast<double>(x.nbytes()), x.dtype()};
  const Interval when = run_op(tag, "check_finite", Lane::compute, cost, {&x}, {}, [&] { found = executor_->has_non_finite(x); });
  host_waits_until(when.end_ns);
  return found;
}

void Device::upload(const OpTag& tag, const Tensor& dst, const void* src) {
  check_here(dst, "upload", "destination");
  if (!src && dst.nbytes() > 0 && executor_->computes())
    throw Error(name_, "upload " + tag.name + ": the host side has no values (shapes only, as a dry run's weights) "
                       "but this device computes — give it real values (init_weights with values), or run with --dry-run");
  OpCost cost{OpClass::copy_host, 0, static_cast<double>(dst.nbytes()), dst.dtype()};
  // The host issues the copy only once it has what it waited for from this device.
  dst.set_ready_ns(std::max(dst.ready_ns(), host_ready_ns_->load()));
  run_op(with_role(tag, Role::upload), "copy_h2d", Lane::copy, cost, {}, {&dst},
         [&] { executor_->copy_from_host(dst, src, dst.nbytes()); });
}

void Device::download(const OpTag& tag, void* dst, const Tensor& src) {
  check_here(src, "download", "source");
  OpCost cost{OpClass::copy_host, 0, static_cast<double>(src.nbytes()), src.dtype()};
  const Interval when =
      run_op(with_role(tag, Role::download), "copy_d2h", Lane::copy, cost, {&src}, {},
             [&] { executor_->copy_to_host(dst, src, src.nbytes()); });
  host_waits_until(when.end_ns);
}

std::vector<float> Device::download_f32(const OpTag& tag, const Tensor& src) {
  check_here(src, "download", "source");
  if (src.dtype() != DType::f32)
    throw Error(name_, "download " + tag.name + ": " + src.shape_string() + " is not f32 — cast it first");
  std::vector<float> host(executor_->computes() ? static_cast<size_t>(src.numel()) : 0);
  download(tag, host.empty() ? nullptr : host.data(), src);
  return host;
}

void Device::copy(const OpTag& tag, const Tensor& src, const Tensor& dst) {
  check_here(dst, "copy", "destination");
  if (!src.defined()) throw Error(name_, "copy " + tag.name + ": source is undefined");
  if (src.nbytes() != dst.nbytes())
    throw Error(name_, "copy " + tag.name + ": source " + src.shape_string() + " and destination " +
                           dst.shape_string() + " differ in size");
  if (src.dtype() != dst.dtype())
    throw Error(name_, "copy " + tag.name + ": source " + src.shape_string() + " and destination " +
                           dst.shape_string() + " differ in dtype — a copy moves bytes; convert with cast");
  const bool peer = src.device() != this;
  OpCost cost{peer ? OpClass::copy_peer : OpClass::elementwise, 0,
              static_cast<double>(peer ? dst.nbytes() : 2 * dst.nbytes()), dst.dtype()};
  run_op(tag, peer ? "copy_p2p" : "copy", Lane::copy, cost, {&src}, {&dst}, [&] { executor_->copy(src, dst); },
         peer && src.device() ? src.device()->index() : -1);
}

void Device::regroup_rows(const OpTag& tag, const Tensor& src, const Tensor& dst, int64_t outer, int64_t inner) {
  check_here(src, "regroup_rows", "source");
  check_here(dst, "regroup_rows", "destination");
  check_same_dtype(src, dst, "regroup_rows", "destination");
  check_shape(dst, src.shape(), "regroup_rows " + tag.name, "destination");
  if (outer < 1 || inner < 1 || src.rows() % (outer * inner) != 0)
    throw Error(name_, "regroup_rows " + tag.name + ": " + src.shape_string() + " is not " + std::to_string(outer) +
                           " × " + std::to_string(inner) + " blocks of equal rows");
  const int64_t block = src.rows() / (outer * inner);
  OpCost cost{OpClass::elementwise, 0, static_cast<double>(2 * dst.nbytes()), dst.dtype()};
  run_op(tag, "regroup", Lane::copy, cost, {&src}, {&dst}, [&] {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        executor_->copy(src.rows_slice((o * inner + i) * block, block), dst.rows_slice((i * outer + o) * block, block));
  });
}

void Device::host_waits_until(int64_t t_ns) {
  int64_t seen = host_ready_ns_->load();
  while (t_ns > seen && !host_ready_ns_->compare_exchange_weak(seen, t_ns)) {
  }
}

void Device::record(Event e) {
  e.device = index_;
  if (e.step < 0) e.step = step_;
  if (bus_) bus_->emit(std::move(e));
}

DeviceRecord device_record(const Device& device) {
  const MemoryLedger& m = device.memory();
  DeviceRecord r{.index = device.index(), .description = device.description(), .capacity = m.capacity(),
                 .peak = {}, .peak_total = m.peak_total()};
  for (int c = 0; c < kMemoryCategoryCount; ++c) r.peak[c] = m.peak(static_cast<MemoryCategory>(c));
  return r;
}

std::string CudaPlacement::name() const {
  return "cuda:" + std::to_string(gpu) + (logical ? "." + std::to_string(local) : "");
}

CudaPlacement place_cuda_device(int index, int count, int gpus) {
  if (gpus < 1) throw UsageError("cuda", "no GPU to place cuda:" + std::to_string(index) + " on — use --device cpu or sim");
  CudaPlacement p;
  p.gpu = index % gpus;
  p.local = index / gpus;
  p.sharing = count / gpus + (p.gpu < count % gpus ? 1 : 0);
  p.logical = count > gpus;
  return p;
}

std::vector<std::unique_ptr<Device>> make_devices(const DeviceOptions& o) {
  if (o.count < 1) throw UsageError("device", "--devices must be at least 1, got " + std::to_string(o.count));
  std::vector<std::unique_ptr<Device>> devices;
  const auto epoch = o.epoch.value_or(std::chrono::steady_clock::now());
  switch (o.kind) {
    case DeviceKind::cpu:
      if (o.dry_run) throw UsageError("device", "--dry-run runs no numerics, so it needs --device sim");
      if (o.count > kMaxCpuDevices)
        throw UsageError("device", "--devices " + std::to_string(o.count) + " cpu devices: each is a thread computing on "
                                   "this machine's cores, at most " + std::to_string(kMaxCpuDevices) +
                                   " — use fewer, or model them: --device sim --hw h100-ib-1024x8 --dry-run (up to 8192)");
      for (int i = o.first_index; i < o.first_index + o.count; ++i)
        devices.push_back(std::make_unique<Device>(i, DeviceKind::cpu, "cpu:" + std::to_string(i),
                                                   std::make_unique<CpuExecutor>(), std::make_unique<WallClock>(epoch, &host_cores()),
                                                   0, o.bus));
      break;
    case DeviceKind::sim: {
      const HardwareProfile& p = o.profile;
      if (p.name.empty()) throw UsageError("device", "--device sim needs a hardware profile: pass --hw NAME");
      if (o.first_index + o.count > p.device_count())
        throw UsageError("device", "profile " + p.name + " has " + std::to_string(p.device_count()) +
                                       " devices, but " + std::to_string(o.first_index + o.count) +
                                       " were asked for — use --devices ≤ " + std::to_string(p.device_count()) +
                                       " or a larger profile");
      auto model = std::make_shared<const CostModel>(p);
      for (int i = o.first_index; i < o.first_index + o.count; ++i) {
        std::unique_ptr<Executor> exec;
        if (o.dry_run) exec = std::make_unique<MetaExecutor>();
        else exec = std::make_unique<CpuExecutor>();
        devices.push_back(std::make_unique<Device>(i, DeviceKind::sim, "sim:" + std::to_string(i) + " (" + p.name + ")",
                                                   std::move(exec), std::make_unique<SimClock>(model, std::min(o.run_count > 0 ? o.run_count : o.count, p.devices_per_node)),
                                                   p.mem_capacity_bytes, o.bus, &p));
        // A dry run says what each device would need, past its capacity too (the summary flags it).
        if (o.dry_run) devices.back()->memory().record_past_capacity();
      }
      break;
    }
    case DeviceKind::cuda: {
      if (o.dry_run) throw UsageError("device", "--dry-run runs no numerics, so it needs --device sim");
      const int gpus = cuda_device_count();
      if (gpus == 0) make_cuda_executor(0);  // throws the reason: no driver, no GPU, or no CUDA build
      const int total = o.first_index + o.count;  // an mpi rank places its devices as the whole run does
      for (int i = o.first_index; i < total; ++i) {
        const CudaPlacement at = place_cuda_device(i, total, gpus);
        auto exec = make_cuda_executor(at.gpu, at.name(), at.sharing, o.tf32);
        auto clock = make_cuda_clock(*exec, epoch);
        int64_t cap = exec->capacity_bytes();
        devices.push_back(std::make_unique<Device>(i, DeviceKind::cuda, at.name(), std::move(exec), std::move(clock),
                                                   cap, o.bus));
      }
      break;
    }
  }
  // One host drives them all, until a RankSet gives each rank its own.
  for (size_t i = 1; i < devices.size(); ++i) {
    devices[i]->share_host_with(*devices[0]);
    devices[i]->made_with(*devices[0]);
  }
  return devices;
}

}  // namespace scalelab

// ---- the ConvNet's ops ----------------------------------------------------------------------

namespace scalelab {

namespace {

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "{";
  for (int64_t v : d) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
  return s + "}";
}

bool has_shape(const Tensor& t, const std::vector<int64_t>& shape) { return t.shape() == shape; }

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

// Under AMP the convolutions and pools take f16 / bf16 tensors, and every executor's kernels for
// them compute in f32: each half tensor gets an f32 stand-in, a copy of its values where the kernel
// reads them, rounded back where it writes them — what a GPU's half convolution does with its f32
// accumulator. The stand-ins are the kernel's scratch, not the model's memory: the ledger counts
// the half tensors, as it would on a GPU. (A meta executor computes nothing: no copies.)
class F32StandIn {
 public:
  F32StandIn(Executor& exec, const Tensor& t, bool read) : exec_(exec), tensor_(t), f32_(t) {
    if (!t.defined() || !is_half(t.dtype()) || !exec.computes()) return;
    auto storage = std::make_shared<Storage>();
    storage->device = t.device();
    storage->bytes = t.numel() * dtype_size(DType::f32);
    storage->data = exec.allocate(storage->bytes);
    storage->free_data = [&exec](void* p) { exec.deallocate(p); };
    f32_ = Tensor(std::move(storage), t.shape(), DType::f32);
    if (read) exec.cast(t, f32_);
  }
  F32StandIn(const F32StandIn&) = delete;
  F32StandIn& operator=(const F32StandIn&) = delete;
  const Tensor& f32() const { return f32_; }
  // After the kernel: its output rounded into the half tensor.
  void write_back() {
    if (f32_.raw() != tensor_.raw()) exec_.cast(f32_, tensor_);
  }

 private:
  Executor& exec_;
  Tensor tensor_, f32_;
};

// The op's tensors all f32, or all one half dtype (AMP). Throws naming the op and the tensors.
DType one_float_dtype(const std::string& device, const std::string& op, std::initializer_list<const Tensor*> tensors) {
  DType d = DType::f32;
  bool first = true;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first) d = t->dtype();
    first = false;
    if (t->dtype() != d || (d != DType::f32 && !is_half(d))) {
      std::string got;
      for (const Tensor* u : tensors)
        if (u->defined()) got += (got.empty() ? "" : ", ") + u->shape_string();
      throw Error(device, op + ": its tensors must be all f32, or all f16 or all bf16 (AMP), got " + got +
                              " — cast them to one dtype (Device::cast)");
    }
  }
  return d;
}

}  // namespace

void Device::conv2d(const OpTag& tag, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dGeometry& g, Activation act) {
  check_here(x, "conv2d", "x");
  check_here(weight, "conv2d", "weight");
  check_here(bias, "conv2d", "bias");
  check_here(y, "conv2d", "y");
  const DType dtype = one_float_dtype(name_, "conv2d " + tag.name, {&x, &weight, &bias, &y});
  const int64_t N = g.batch, C = g.in_channels, K = g.kernel, OC = g.out_channels, L = g.pixels();
  if (g.kernel < 1 || g.stride < 1 || g.padding < 0 || g.out_height() < 1 || g.out_width() < 1)
    throw Error(name_, "conv2d " + tag.name + ": kernel " + std::to_string(K) + ", stride " + std::to_string(g.stride) +
                           ", padding " + std::to_string(g.padding) + " do not fit a " + std::to_string(g.height) + "×" +
                           std::to_string(g.width) + " image — the kernel must fit the padded image");
  if (!has_shape(x, {N, C * g.height * g.width}) || !has_shape(weight, {OC, C, K, K}) || !has_shape(bias, {OC}) ||
      !has_shape(y, {N, OC * L}))
    throw Error(name_, "conv2d " + tag.name + ": expects x " + dims({N, C * g.height * g.width}) + ", weight " +
                           dims({OC, C, K, K}) + ", bias " + dims({OC}) + ", y " + dims({N, OC * L}) + ", got " +
                           x.shape_string() + ", " + weight.shape_string() + ", " + bias.shape_string() + ", " +
                           y.shape_string());
  Tensor workspace = empty({kernels::conv2d_workspace_floats(g)}, DType::f32, MemoryCategory::workspace,
                           tag.name + ".im2col");
  // The GEMM W · col (m = OC, n = N·OH·OW, k = C·K·K) and the bias and activation on its output;
  // the bytes: x, W, b, y, and the columns and the GEMM's output each written then read.
  const double m = static_cast<double>(OC), n = static_cast<double>(N * L), k = static_cast<double>(g.patch());
  OpCost cost{OpClass::gemm, 2.0 * m * n * k + 2.0 * m * n,
              static_cast<double>(x.nbytes() + weight.nbytes() + bias.nbytes() + y.nbytes()) + 8.0 * (k + m) * n,
              dtype, m, n, k};
  run_op(tag, "conv2d", Lane::compute, cost, {&x, &weight, &bias}, {&y}, [&] {
    F32StandIn x32(*executor_, x, true), w32(*executor_, weight, true), b32(*executor_, bias, true),
        y32(*executor_, y, false);
    executor_->conv2d(x32.f32(), w32.f32(), b32.f32(), y32.f32(), g, act, workspace);
    y32.write_back();
  });
}

void Device::conv2d_backward(const OpTag& tag, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor& weight, const Tensor& dweight, const Tensor& dbias, const Tensor& dx,
                             const Conv2dGeometry& g, Activation act, bool accumulate) {
  check_here(x, "conv2d_backward", "x");
  check_here(dy, "conv2d_backward", "dy");
  check_here(weight, "conv2d_backward", "weight");
  check_here(dweight, "conv2d_backward", "dweight");
  check_here(dbias, "conv2d_backward", "dbias");
  if (act == Activation::relu) check_here(y, "conv2d_backward", "y (the ReLU's output)");
  if (dx.defined()) check_here(dx, "conv2d_backward", "dx");
  const DType dtype = one_float_dtype(name_, "conv2d_backward " + tag.name, {&x, &y, &dy, &weight, &dweight, &dbias, &dx});
  const int64_t N = g.batch, C = g.in_channels, K = g.kernel, OC = g.out_channels, L = g.pixels();
  const std::vector<int64_t> in_shape{N, C * g.height * g.width}, out_shape{N, OC * L};
  if (g.out_height() < 1 || g.out_width() < 1 || !has_shape(x, in_shape) || !has_shape(dy, out_shape) ||
      (act == Activation::relu && !has_shape(y, out_shape)) || !has_shape(weight, {OC, C, K, K}) ||
      !has_shape(dweight, {OC, C, K, K}) || !has_shape(dbias, {OC}) || (dx.defined() && !has_shape(dx, in_shape)))
    throw Error(name_, "conv2d_backward " + tag.name + ": expects x and dx " + dims({N, C * g.height * g.width}) +
                           ", y and dy " + dims({N, OC * L}) + ", weight and dweight " + dims({OC, C, K, K}) +
                           ", dbias " + dims({OC}) + ", got x " + x.shape_string() + ", dy " + dy.shape_string() +
                           ", weight " + weight.shape_string() + ", dweight " + dweight.shape_string() + ", dbias " +
                           dbias.shape_string() + (dx.defined() ? ", dx " + dx.shape_string() : ""));
  Tensor workspace = empty({kernels::conv2d_workspace_floats(g)}, DType::f32, MemoryCategory::workspace,
                           tag.name + ".im2col");
  const double oc = static_cast<double>(OC), pixels = static_cast<double>(N * L), patch = static_cast<double>(g.patch());
  // dW (+)= dy · colᵀ: m = OC, n = C·K·K, k = N·OH·OW; and the mask and db's sums over dy. Bytes:
  // dy read and written (masked), y, x, db, dW, and the columns and dy's transpose written then read.
  OpCost weight_cost{OpClass::gemm, 2.0 * oc * patch * pixels + 2.0 * oc * pixels,
                     static_cast<double>(2 * dy.nbytes() + (act == Activation::relu ? y.nbytes() : 0) + x.nbytes() +
                                         dbias.nbytes() + dweight.nbytes() * (accumulate ? 2 : 1)) +
                         8.0 * (patch + oc) * pixels,
                     dtype, oc, patch, pixels};
  weight_cost.trans_b = true;
  weight_cost.accumulates = accumulate;
  run_op(tag, "conv2d_bwd_weight", Lane::compute, weight_cost, {&x, &y}, {&dy, &dweight, &dbias}, [&] {
    // dy is masked in place by the ReLU: written back too.
    F32StandIn x32(*executor_, x, true), y32(*executor_, y, true), dy32(*executor_, dy, true),
        dw32(*executor_, dweight, accumulate), db32(*executor_, dbias, accumulate);
    executor_->conv2d_backward_weight(x32.f32(), y32.f32(), dy32.f32(), dw32.f32(), db32.f32(), g, act, accumulate,
                                      workspace);
    dy32.write_back();
    dw32.write_back();
    db32.write_back();
  });
  if (!dx.defined()) return;
  // dcol = Wᵀ · dy: m = C·K·K, n = N·OH·OW, k = OC; then col2im's additions into dx.
  OpCost input_cost{OpClass::gemm, 2.0 * patch * pixels * oc + patch * pixels,
                    static_cast<double>(dy.nbytes() + weight.nbytes() + dx.nbytes()) + 8.0 * (patch + oc) * pixels,
                    dtype, patch, pixels, oc};
  input_cost.trans_a = true;
  run_op(tag, "conv2d_bwd_input", Lane::compute, input_cost, {&dy, &weight}, {&dx}, [&] {
    F32StandIn dy32(*executor_, dy, true), w32(*executor_, weight, true), dx32(*executor_, dx, false);
    executor_->conv2d_backward_input(dy32.f32(), w32.f32(), dx32.f32(), g, workspace);
    dx32.write_back();
  });
}

void Device::max_pool2d(const OpTag& tag, const Tensor& x, const Tensor& y, const Tensor& indices,
                        const Pool2dGeometry& g) {
  check_here(x, "max_pool2d", "x");
  check_here(y, "max_pool2d", "y");
  check_here(indices, "max_pool2d", "indices");
  if (x.dtype() != y.dtype() || (x.dtype() != DType::f32 && !is_half(x.dtype())) || indices.dtype() != DType::i32)
    throw Error(name_, "max_pool2d " + tag.name + ": x and y must be f32 (or one half dtype) and indices i32, got " +
                           x.shape_string() + ", " + y.shape_string() + ", " + indices.shape_string());
  const int64_t N = g.batch, C = g.channels, L = g.out_height() * g.out_width();
  if (g.kernel < 1 || g.stride < 1 || g.out_height() < 1 || g.out_width() < 1 || !has_shape(x, {N, C * g.height * g.width}) ||
      !has_shape(y, {N, C * L}) || !has_shape(indices, {N, C * L}))
    throw Error(name_, "max_pool2d " + tag.name + ": kernel " + std::to_string(g.kernel) + ", stride " +
                           std::to_string(g.stride) + " on " + std::to_string(C) + "×" + std::to_string(g.height) + "×" +
                           std::to_string(g.width) + " images expects x " + dims({N, C * g.height * g.width}) +
                           ", y and indices " + dims({N, C * L}) + ", got " + x.shape_string() + ", " +
                           y.shape_string() + ", " + indices.shape_string());
  OpCost cost{OpClass::elementwise, static_cast<double>(y.numel() * g.kernel * g.kernel),
              static_cast<double>(x.nbytes() + y.nbytes() + indices.nbytes()), x.dtype()};
  run_op(tag, "max_pool2d", Lane::compute, cost, {&x}, {&y, &indices}, [&] {
    F32StandIn x32(*executor_, x, true), y32(*executor_, y, false);  // a max rounds to itself
    executor_->max_pool2d(x32.f32(), y32.f32(), indices, g);
    y32.write_back();
  });
}

void Device::max_pool2d_backward(const OpTag& tag, const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                 const Pool2dGeometry& g) {
  check_here(dy, "max_pool2d_backward", "dy");
  check_here(indices, "max_pool2d_backward", "indices");
  check_here(dx, "max_pool2d_backward", "dx");
  const int64_t N = g.batch, C = g.channels, L = g.out_height() * g.out_width();
  if (dy.dtype() != dx.dtype() || (dy.dtype() != DType::f32 && !is_half(dy.dtype())) || indices.dtype() != DType::i32 ||
      g.out_height() < 1 || g.out_width() < 1 || !has_shape(dy, {N, C * L}) || !has_shape(indices, {N, C * L}) ||
      !has_shape(dx, {N, C * g.height * g.width}))
    throw Error(name_, "max_pool2d_backward " + tag.name + ": expects dy and indices (i32) " + dims({N, C * L}) +
                           ", dx " + dims({N, C * g.height * g.width}) + " (dy and dx f32, or one half dtype), got " + dy.shape_string() + ", " +
                           indices.shape_string() + ", " + dx.shape_string());
  OpCost cost{OpClass::elementwise, static_cast<double>(dy.numel()),
              static_cast<double>(dy.nbytes() + indices.nbytes() + dx.nbytes()), dy.dtype()};
  run_op(tag, "max_pool2d_bwd", Lane::compute, cost, {&dy, &indices}, {&dx}, [&] {
    F32StandIn dy32(*executor_, dy, true), dx32(*executor_, dx, false);
    executor_->max_pool2d_backward(dy32.f32(), indices, dx32.f32(), g);
    dx32.write_back();
  });
}

void Device::dropout(const OpTag& tag, const Tensor& x, const Tensor& y, const DropoutMask& mask) {
  check_here(x, "dropout", "x");
  check_here(y, "dropout", "y");
  one_float_dtype(name_, "dropout " + tag.name, {&x, &y});
  if (x.dtype() != y.dtype() || x.shape() != y.shape())
    throw Error(name_, "dropout " + tag.name + ": x and y must have one dtype and shape, got " + x.shape_string() + " " +
                           dtype_name(x.dtype()) + " and " + y.shape_string() + " " + dtype_name(y.dtype()));
  if (!(mask.p >= 0.0f && mask.p <= 1.0f))
    throw Error(name_, "dropout " + tag.name + ": p = " + std::to_string(mask.p) + " is not a probability — use 0 ≤ p ≤ 1");
  if (mask.rows_per_sample < 1 || mask.sample_stride < 1 || mask.sample_offset < 0 || mask.first_row < 0)
    throw Error(name_, "dropout " + tag.name + ": the rows' position (first row " + std::to_string(mask.first_row) +
                           ", sample offset " + std::to_string(mask.sample_offset) + ", stride " +
                           std::to_string(mask.sample_stride) + ", rows per sample " +
                           std::to_string(mask.rows_per_sample) + ") must be ≥ 0 and the stride and rows ≥ 1");
  OpCost cost{OpClass::elementwise, static_cast<double>(x.numel()), static_cast<double>(x.nbytes() + y.nbytes()),
              x.dtype()};
  // Half activations (an MLP under --amp) go through f32 stand-ins: the mask is the same either way.
  run_op(tag, "dropout", Lane::compute, cost, {&x}, {&y}, [&] {
    F32StandIn x32(*executor_, x, true), y32(*executor_, y, false);
    executor_->dropout(x32.f32(), y32.f32(), mask);
    y32.write_back();
  });
}

}  // namespace scalelab

// ---- transformer ops ----
namespace scalelab {

namespace {

double as_double(int64_t v) { return static_cast<double>(v); }

}  // namespace

void Device::check_f32(const Tensor& t, const std::string& op, const char* what) const {
  if (t.dtype() != DType::f32)
    throw Error(name_, op + ": " + what + " is " + t.shape_string() + " — this op computes in f32: cast it to f32 first");
}

void Device::check_float_like(const Tensor& t, const Tensor& first, const std::string& op, const char* what) const {
  if (t.dtype() == DType::i32 || t.dtype() != first.dtype())
    throw Error(name_, op + ": " + what + " is " + t.shape_string() + " beside " + first.shape_string() +
                           " — this op takes f32, f16 or bf16, one dtype for all its tensors: cast it first");
}

void Device::check_shape(const Tensor& t, const std::vector<int64_t>& shape, const std::string& op,
                         const char* what) const {
  if (t.shape() != shape)
    throw Error(name_, op + ": " + what + " is " + t.shape_string() + ", expected " + shape_text(shape) +
                           " — make it that shape");
}

void Device::layer_norm(const OpTag& tag, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd, float eps) {
  const std::string op = "layer_norm " + tag.name;
  for (auto [t, what] : {std::pair{&x, "x"}, {&gamma, "gamma"}, {&beta, "beta"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}}) {
    check_here(*t, "layer_norm", what);
    check_f32(*t, op, what);
  }
  const int64_t rows = x.rows(), cols = x.cols();
  check_shape(gamma, {cols}, op, "gamma");
  check_shape(beta, {cols}, op, "beta");
  check_shape(y, x.shape(), op, "y");
  check_shape(mean, {rows}, op, "mean");
  check_shape(rstd, {rows}, op, "rstd");
  // A mean, a variance, then a multiply and an add per element; x read twice-over in cache, y written.
  OpCost cost{OpClass::elementwise, 8.0 * as_double(x.numel()),
              as_double(x.nbytes() + y.nbytes() + gamma.nbytes() + beta.nbytes() + mean.nbytes() + rstd.nbytes()),
              DType::f32};
  run_op(tag, "layer_norm", Lane::compute, cost, {&x, &gamma, &beta}, {&y, &mean, &rstd},
         [&] { executor_->layer_norm(x, gamma, beta, y, mean, rstd, eps); });
}

void Device::layer_norm_backward(const OpTag& tag, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                                 const Tensor& dbeta, bool accumulate) {
  const std::string op = "layer_norm_backward " + tag.name;
  for (auto [t, what] : {std::pair{&dy, "dy"}, {&x, "x"}, {&gamma, "gamma"}, {&mean, "mean"}, {&rstd, "rstd"},
                         {&dx, "dx"}, {&dgamma, "dgamma"}, {&dbeta, "dbeta"}}) {
    check_here(*t, "layer_norm_backward", what);
    check_f32(*t, op, what);
  }
  const int64_t rows = x.rows(), cols = x.cols();
  check_shape(dy, x.shape(), op, "dy");
  check_shape(dx, x.shape(), op, "dx");
  for (const Tensor* t : {&gamma, &dgamma, &dbeta}) check_shape(*t, {cols}, op, t == &gamma ? "gamma" : t == &dgamma ? "dgamma" : "dbeta");
  check_shape(mean, {rows}, op, "mean");
  check_shape(rstd, {rows}, op, "rstd");
  // dy and x read, dx written; the parameter gradients read (accumulate) and written.
  OpCost cost{OpClass::elementwise, 14.0 * as_double(x.numel()),
              as_double(dy.nbytes() + x.nbytes() + dx.nbytes() + gamma.nbytes() + mean.nbytes() + rstd.nbytes() +
                        (dgamma.nbytes() + dbeta.nbytes()) * (accumulate ? 2 : 1)),
              DType::f32};
  run_op(tag, "layer_norm_bwd", Lane::compute, cost, {&dy, &x, &gamma, &mean, &rstd}, {&dx, &dgamma, &dbeta},
         [&] { executor_->layer_norm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, accumulate); });
}

void Device::gelu(const OpTag& tag, const Tensor& x, const Tensor& y) {
  const std::string op = "gelu " + tag.name;
  check_here(x, "gelu", "x");
  check_here(y, "gelu", "y");
  check_float_like(x, x, op, "x");
  check_float_like(y, x, op, "y");
  check_shape(y, x.shape(), op, "y");
  // erf is a short polynomial: about 8 FLOPs an element with the multiplies around it.
  OpCost cost{OpClass::elementwise, 8.0 * as_double(x.numel()), as_double(x.nbytes() + y.nbytes()), x.dtype()};
  run_op(tag, "gelu", Lane::compute, cost, {&x}, {&y}, [&] { executor_->gelu(x, y); });
}

void Device::gelu_backward(const OpTag& tag, const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx) {
  const std::string op = "gelu_backward " + tag.name;
  for (auto [t, what] : {std::pair{&dy, "dy"}, {&x, "x"}, {&y, "y"}, {&dx, "dx"}}) {
    check_here(*t, "gelu_backward", what);
    check_float_like(*t, x, op, what);
  }
  check_shape(dy, x.shape(), op, "dy");
  check_shape(y, x.shape(), op, "y");
  check_shape(dx, x.shape(), op, "dx");
  OpCost cost{OpClass::elementwise, 14.0 * as_double(x.numel()),
              as_double(dy.nbytes() + x.nbytes() + y.nbytes() + dx.nbytes()), x.dtype()};
  run_op(tag, "gelu_bwd", Lane::compute, cost, {&dy, &x, &y}, {&dx}, [&] { executor_->gelu_backward(dy, x, y, dx); });
}

void Device::embedding(const OpTag& tag, const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& out) {
  const std::string op = "embedding " + tag.name;
  for (auto [t, what] : {std::pair{&ids, "ids"}, {&wte, "wte"}, {&wpe, "wpe"}, {&out, "out"}}) {
    check_here(*t, "embedding", what);
    check_f32(*t, op, what);
  }
  if (ids.shape().size() != 2)
    throw Error(name_, op + ": ids are " + ids.shape_string() + " — give them as {batch, sequence}");
  const int64_t batch = ids.dim(0), seq = ids.dim(1), hidden = wte.cols();
  check_shape(wpe, {seq, hidden}, op, "wpe (a row per position)");
  check_shape(out, {batch * seq, hidden}, op, "out");
  // Per token: its id read, a row of wte and of wpe read, a row of out written.
  OpCost cost{OpClass::elementwise, as_double(out.numel()), as_double(ids.nbytes() + 3 * out.nbytes()), DType::f32};
  run_op(tag, "embedding", Lane::compute, cost, {&ids, &wte, &wpe}, {&out},
         [&] { executor_->embedding(ids, wte, wpe, out); });
}

void Device::embedding_backward(const OpTag& tag, const Tensor& dout, const Tensor& ids, const Tensor& dwte,
                                const Tensor& dwpe, bool accumulate) {
  const std::string op = "embedding_backward " + tag.name;
  for (auto [t, what] : {std::pair{&dout, "dout"}, {&ids, "ids"}, {&dwte, "dwte"}, {&dwpe, "dwpe"}}) {
    check_here(*t, "embedding_backward", what);
    check_f32(*t, op, what);
  }
  if (ids.shape().size() != 2)
    throw Error(name_, op + ": ids are " + ids.shape_string() + " — give them as {batch, sequence}");
  const int64_t batch = ids.dim(0), seq = ids.dim(1), hidden = dwte.cols();
  check_shape(dwpe, {seq, hidden}, op, "dwpe");
  check_shape(dout, {batch * seq, hidden}, op, "dout");
  // dout read; per token a row of dwte and of dwpe read and written; without accumulate both zeroed first.
  OpCost cost{OpClass::elementwise, 2.0 * as_double(dout.numel()),
              as_double(ids.nbytes() + 5 * dout.nbytes() + (accumulate ? 0 : dwte.nbytes() + dwpe.nbytes())),
              DType::f32};
  run_op(tag, "embedding_bwd", Lane::compute, cost, {&dout, &ids}, {&dwte, &dwpe},
         [&] { executor_->embedding_backward(dout, ids, dwte, dwpe, accumulate); });
}

namespace {

// B, T, C and d of an attention op, from qkv {B·T, 3C} and probs {B·heads·T, T}; throws when they disagree.
struct AttentionShape {
  int64_t batch, seq, hidden, head_dim;
};

AttentionShape attention_shape(const std::string& device, const std::string& op, const Tensor& qkv,
                               const Tensor& probs, int64_t heads) {
  auto bad = [&](const std::string& why) { return Error(device, op + ": " + why); };
  if (heads < 1) throw bad("heads must be at least 1, got " + std::to_string(heads));
  if (qkv.shape().size() != 2 || qkv.cols() % 3 != 0 || qkv.cols() / 3 % heads != 0)
    throw bad("qkv is " + qkv.shape_string() + " — it must be {B·T, 3·C} with C a multiple of the " +
              std::to_string(heads) + " heads");
  if (probs.shape().size() != 2 || probs.cols() < 1 || qkv.rows() % probs.cols() != 0)
    throw bad("probs is " + probs.shape_string() + " for qkv " + qkv.shape_string() +
              " — it must be {B·heads·T, T} with qkv's rows a multiple of T");
  AttentionShape s{qkv.rows() / probs.cols(), probs.cols(), qkv.cols() / 3, qkv.cols() / 3 / heads};
  if (probs.rows() != s.batch * heads * s.seq)
    throw bad("probs is " + probs.shape_string() + ", expected [" + std::to_string(s.batch * heads * s.seq) + "," +
              std::to_string(s.seq) + "] (B·heads·T rows)");
  return s;
}

}  // namespace

void Device::attention(const OpTag& tag, const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& y) {
  const std::string op = "attention " + tag.name;
  for (auto [t, what] : {std::pair{&qkv, "qkv"}, {&probs, "probs"}, {&y, "y"}}) {
    check_here(*t, "attention", what);
    check_float_like(*t, qkv, op, what);
  }
  const AttentionShape s = attention_shape(name_, op, qkv, probs, heads);
  check_shape(y, {qkv.rows(), s.hidden}, op, "y");
  // Two GEMMs per (b, h), S = q·kᵀ (T×T×d) and y = P·v (T×d×T): 4·B·heads·T²·d FLOPs, priced as one
  // GEMM of m = B·heads·T rows, n = T, k = 2d (so 2·m·n·k is that count). Memory: qkv read, P
  // written as S, read back for the softmax and written, read for P·v; y written.
  const double rows = as_double(s.batch * heads * s.seq);
  OpCost cost{OpClass::gemm, 2.0 * rows * as_double(s.seq) * as_double(2 * s.head_dim),
              as_double(qkv.nbytes() + 4 * probs.nbytes() + y.nbytes()), qkv.dtype(),
              rows, as_double(s.seq), as_double(2 * s.head_dim)};
  run_op(tag, "attention", Lane::compute, cost, {&qkv}, {&probs, &y},
         [&] { executor_->attention(qkv, heads, probs, y); });
}

void Device::attention_backward(const OpTag& tag, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                                int64_t heads, const Tensor& dscores, const Tensor& dqkv) {
  const std::string op = "attention_backward " + tag.name;
  for (auto [t, what] : {std::pair{&dy, "dy"}, {&qkv, "qkv"}, {&probs, "probs"}, {&dscores, "dscores"},
                         {&dqkv, "dqkv"}}) {
    check_here(*t, "attention_backward", what);
    check_float_like(*t, qkv, op, what);
  }
  const AttentionShape s = attention_shape(name_, op, qkv, probs, heads);
  check_shape(dy, {qkv.rows(), s.hidden}, op, "dy");
  check_shape(dscores, probs.shape(), op, "dscores");
  check_shape(dqkv, qkv.shape(), op, "dqkv");
  // Four GEMMs per (b, h) — dV = Pᵀ·dy, dP = dy·vᵀ, dQ = dS·k, dK = dSᵀ·q — 8·B·heads·T²·d FLOPs,
  // priced as one GEMM with k = 4d. Memory: dy, qkv and P read; dP written, read and written back
  // as dS, read twice; dqkv written.
  const double rows = as_double(s.batch * heads * s.seq);
  OpCost cost{OpClass::gemm, 2.0 * rows * as_double(s.seq) * as_double(4 * s.head_dim),
              as_double(dy.nbytes() + qkv.nbytes() + 2 * probs.nbytes() + 5 * dscores.nbytes() + dqkv.nbytes()),
              qkv.dtype(), rows, as_double(s.seq), as_double(4 * s.head_dim)};
  run_op(tag, "attention_bwd", Lane::compute, cost, {&dy, &qkv, &probs}, {&dscores, &dqkv},
         [&] { executor_->attention_backward(dy, qkv, probs, heads, dscores, dqkv); });
}

}  // namespace scalelab
