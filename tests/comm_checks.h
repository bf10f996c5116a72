#pragma once
// Closed-form checks of every collective, shared by the tests of every backend. Rank r's input
// element i is v(r, i) = (r + 1) + (i mod 7): small integers, exact in f32, f16 and bf16, so every
// result is known exactly — the sum over n ranks is n(n+1)/2 + n·(i mod 7), the max n + (i mod 7).
// Each rank calls check_all_collectives with its own group and device; it returns what went
// wrong on that rank (empty when all is well).
#include <exception>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/device/device.h"
#include "core/kernels/cpu_kernels.h"

namespace scalelab::comm_test {

inline float closed_form_value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 7); }

inline int dtype_code(DType d) { return d == DType::f16 ? 1 : d == DType::bf16 ? 2 : 0; }

inline Tensor make_tensor(Device& dev, const std::vector<float>& values, DType dtype) {
  Tensor t = dev.empty({static_cast<int64_t>(values.size())}, dtype, MemoryCategory::comm_buffers, "comm test");
  std::vector<char> raw(static_cast<size_t>(t.nbytes()) + 1);
  kernels::cast(values.data(), 0, raw.data(), dtype_code(dtype), static_cast<int64_t>(values.size()));
  dev.upload({"test"}, t, raw.data());
  return t;
}

// One cpu device that records its events on `bus`.
inline std::unique_ptr<Device> traced_cpu_device(EventBus& bus) {
  DeviceOptions o;
  o.bus = &bus;
  return std::move(make_devices(o).front());
}

// Runs fn(rank, group, device) on one thread per rank; returns each rank's exception text.
template <typename Fn>
inline std::vector<std::string> run_ranks(std::vector<std::unique_ptr<ProcessGroup>>& groups,
                                   std::vector<std::unique_ptr<Device>>& devices, Fn fn) {
  const int n = static_cast<int>(groups.size());
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, *groups[static_cast<size_t>(r)], *devices[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline std::vector<float> read_tensor(Device& dev, const Tensor& t) {
  std::vector<char> raw(static_cast<size_t>(t.nbytes()) + 1);
  dev.download({"test"}, raw.data(), t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::cast(raw.data(), dtype_code(t.dtype()), out.data(), 0, t.numel());
  return out;
}

class CollectiveChecker {
 public:
  CollectiveChecker(ProcessGroup& pg, Device& dev) : pg_(pg), dev_(dev), n_(pg.size()), r_(pg.rank()) {}

  // Every collective at every count and dtype, in place and out of place.
  std::vector<std::string> run_all(const std::vector<int64_t>& counts,
                                   const std::vector<DType>& dtypes = {DType::f32, DType::f16, DType::bf16}) {
    for (DType d : dtypes)
      for (int64_t m : counts) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          all_reduce(m, d, op, true);
          all_reduce(m, d, op, false);
          reduce_scatter(m, d, op);
          reduce(m, d, op);
        }
        broadcast(m, d);
        all_gather(m, d);
        scatter(m, d);
        gather(m, d);
        send_recv_ring(m, d);
      }
    pg_.barrier();
    return failures_;
  }

  std::vector<float> inputs(int64_t m, int rank, int64_t offset = 0) const {
    std::vector<float> v(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) v[static_cast<size_t>(i)] = closed_form_value(rank, offset + i);
    return v;
  }

  float reduced(int64_t i, ReduceOp op) const {
    const float k = static_cast<float>(i % 7);
    switch (op) {
      case ReduceOp::sum: return static_cast<float>(n_ * (n_ + 1) / 2) + n_ * k;
      case ReduceOp::avg: return static_cast<float>(n_ + 1) / 2.0f + k;
      case ReduceOp::max: return static_cast<float>(n_) + k;
    }
    return 0;
  }

  void all_reduce(int64_t m, DType d, ReduceOp op, bool in_place) {
    Tensor in = make_tensor(dev_, inputs(m, r_), d);
    Tensor out = in_place ? in : make_tensor(dev_, std::vector<float>(static_cast<size_t>(m), -1.0f), d);
    pg_.all_reduce(in, out, op);
    const auto got = read_tensor(dev_, out);
    for (int64_t i = 0; i < m; ++i)
      if (got[static_cast<size_t>(i)] != reduced(i, op))
        return fail("all_reduce", d, m, op, i, got[static_cast<size_t>(i)], reduced(i, op), in_place ? " in place" : "");
  }

  void reduce_scatter(int64_t m, DType d, ReduceOp op) {
    std::vector<float> in_values(static_cast<size_t>(m * n_));
    for (int64_t i = 0; i < m * n_; ++i) in_values[static_cast<size_t>(i)] = closed_form_value(r_, i);
    Tensor in = make_tensor(dev_, in_values, d);
    Tensor out = make_tensor(dev_, std::vector<float>(static_cast<size_t>(m), -1.0f), d);
    pg_.reduce_scatter(in, out, op);
    const auto got = read_tensor(dev_, out);
    for (int64_t i = 0; i < m; ++i) {
      const float want = reduced(r_ * m + i, op);
      if (got[static_cast<size_t>(i)] != want) return fail("reduce_scatter", d, m, op, i, got[static_cast<size_t>(i)], want);
    }
  }

  void reduce(int64_t m, DType d, ReduceOp op) {
    const int root = (n_ - 1) / 2;  // not always rank 0
    Tensor in = make_tensor(dev_, inputs(m, r_), d);
    Tensor out = r_ == root ? make_tensor(dev_, std::vector<float>(static_cast<size_t>(m), -1.0f), d) : Tensor();
    pg_.reduce(in, out, root, op);
    if (r_ != root) return;
    const auto got = read_tensor(dev_, out);
    for (int64_t i = 0; i < m; ++i)
      if (got[static_cast<size_t>(i)] != reduced(i, op)) return fail("reduce", d, m, op, i, got[static_cast<size_t>(i)], reduced(i, op));
  }

  void broadcast(int64_t m, DType d) {
    const int root = n_ - 1;
    Tensor t = make_tensor(dev_, r_ == root ? inputs(m, root) : std::vector<float>(static_cast<size_t>(m), -1.0f), d);
    pg_.broadcast(t, root);
    const auto got = read_tensor(dev_, t);
    for (int64_t i = 0; i < m; ++i)
      if (got[static_cast<size_t>(i)] != closed_form_value(root, i))
        return fail("broadcast", d, m, ReduceOp::sum, i, got[static_cast<size_t>(i)], closed_form_value(root, i));
  }

  void all_gather(int64_t m, DType d) {
    Tensor in = make_tensor(dev_, inputs(m, r_), d);
    Tensor out = make_tensor(dev_, std::vector<float>(static_cast<size_t>(m * n_), -1.0f), d);
    pg_.all_gather(in, out);
    const auto got = read_tensor(dev_, out);
    for (int k = 0; k < n_; ++k)
      for (int64_t i = 0; i < m; ++i)
        if (got[static_cast<size_t>(k * m + i)] != closed_form_value(k, i))
          return fail("all_gather", d, m, ReduceOp::sum, k * m + i, got[static_cast<size_t>(k * m + i)], closed_form_value(k, i));
  }

  void scatter(int64_t m, DType d) {
    const int root = 0;
    Tensor in;
    if (r_ == root) {
      std::vector<float> all;
      for (int k = 0; k < n_; ++k) {
        auto v = inputs(m, k);
        all.insert(all.end(), v.begin(), v.end());
      }
      in = make_tensor(dev_, all, d);
    }
    Tensor out = make_tensor(dev_, std::vector<float>(static_cast<size_t>(m), -1.0f), d);
    pg_.scatter(in, out, root);
    const auto got = read_tensor(dev_, out);
    for (int64_t i = 0; i < m; ++i)
      if (got[static_cast<size_t>(i)] != closed_form_value(r_, i))
        return fail("scatter", d, m, ReduceOp::sum, i, got[static_cast<size_t>(i)], closed_form_value(r_, i));
  }

  void gather(int64_t m, DType d) {
    const int root = n_ / 2;
    Tensor in = make_tensor(dev_, inputs(m, r_), d);
    Tensor out = r_ == root ? make_tensor(dev_, std::vector<float>(static_cast<size_t>(m * n_), -1.0f), d) : Tensor();
    pg_.gather(in, out, root);
    if (r_ != root) return;
    const auto got = read_tensor(dev_, out);
    for (int k = 0; k < n_; ++k)
      for (int64_t i = 0; i < m; ++i)
        if (got[static_cast<size_t>(k * m + i)] != closed_form_value(k, i))
          return fail("gather", d, m, ReduceOp::sum, k * m + i, got[static_cast<size_t>(k * m + i)], closed_form_value(k, i));
  }

  // Each rank sends to the next and receives from the previous; even ranks send first, odd ranks
  // receive first, so blocking (rendezvous) sends cannot deadlock.
  void send_recv_ring(int64_t m, DType d) {
    if (n_ == 1) return;
    const int next = (r_ + 1) % n_, prev = (r_ - 1 + n_) % n_;
    Tensor mine = make_tensor(dev_, inputs(m, r_), d);
    Tensor theirs = make_tensor(dev_, std::vector<float>(static_cast<size_t>(m), -1.0f), d);
    if (r_ % 2 == 0) {
      pg_.send(mine, next);
      pg_.recv(theirs, prev);
    } else {
      pg_.recv(theirs, prev);
      pg_.send(mine, next);
    }
    const auto got = read_tensor(dev_, theirs);
    for (int64_t i = 0; i < m; ++i)
      if (got[static_cast<size_t>(i)] != closed_form_value(prev, i))
        return fail("send/recv", d, m, ReduceOp::sum, i, got[static_cast<size_t>(i)], closed_form_value(prev, i));
  }

 private:
  void fail(const char* what, DType d, int64_t m, ReduceOp op, int64_t i, float got, float want, const char* extra = "") {
    failures_.push_back(std::string(what) + extra + " " + dtype_name(d) + " " + reduce_op_name(op) + " count " +
                        std::to_string(m) + " on rank " + std::to_string(r_) + " of " + std::to_string(n_) +
                        ": element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                        std::to_string(want));
  }

  ProcessGroup& pg_;
  Device& dev_;
  int n_, r_;
  std::vector<std::string> failures_;
};

// Point-to-point flow ids agree across ranks though no rank tells another: every rank sends
// `messages` tensors to the next (round the ring, as send_recv_ring), then the ranks all-gather the
// flow ids their sends and recvs were traced with, and each send's must be its recv's. `bus` is
// where `dev` records. Returns what went wrong on this rank (nothing to check on one rank).
inline std::vector<std::string> check_flow_ids(ProcessGroup& pg, Device& dev, const EventBus& bus, int messages = 3) {
  const int n = pg.size(), r = pg.rank();
  if (n == 1) return {};
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  const size_t first = bus.event_count();
  Tensor t = dev.zeros({16}, DType::f32, MemoryCategory::comm_buffers, "flow check");
  for (int k = 0; k < messages; ++k) {
    if (r % 2 == 0) pg.send(t, next);
    pg.recv(t, prev);
    if (r % 2 == 1) pg.send(t, next);
  }
  // This rank's ids: its sends, then its recvs, each as three 18-bit parts (a sub-group's ids
  // run to 2^53; each part is exact in f32).
  const size_t m = static_cast<size_t>(messages);
  std::vector<int64_t> mine(2 * m, -1);
  size_t sends = 0, recvs = 0;
  for (const Event& e : bus.events_since(first)) {
    if (e.flow_id < 0) continue;
    if (e.role == Role::send && sends < m) mine[sends++] = e.flow_id;
    if (e.role == Role::recv && recvs < m) mine[m + recvs++] = e.flow_id;
  }
  std::vector<float> ids;
  for (int64_t id : mine)
    for (int part = 2; part >= 0; --part) ids.push_back(id < 0 ? -1.0f : static_cast<float>((id >> (18 * part)) & 0x3ffff));
  const size_t w = 6 * m;  // floats per rank
  Tensor all = dev.zeros({static_cast<int64_t>(w) * n}, DType::f32, MemoryCategory::comm_buffers, "flow ids");
  pg.all_gather(make_tensor(dev, ids, DType::f32), all);
  const std::vector<float> parts = read_tensor(dev, all);
  auto id_at = [&](int rank, size_t k) {
    int64_t id = 0;
    for (size_t part = 0; part < 3; ++part)
      id = (id << 18) | static_cast<int64_t>(parts[static_cast<size_t>(rank) * w + 3 * k + part]);
    return id;
  };
  std::vector<std::string> failures;
  if (sends != m || recvs != m)
    failures.push_back("rank " + std::to_string(r) + ": " + std::to_string(sends) + " sends and " +
                       std::to_string(recvs) + " recvs carry a flow id, expected " + std::to_string(m) + " of each");
  for (size_t k = 0; k < m; ++k) {
    const int64_t sent = id_at(r, k), received = id_at(next, m + k);
    if (sent != received)
      failures.push_back("message " + std::to_string(k) + " from rank " + std::to_string(r) + " to " +
                         std::to_string(next) + ": the send's flow id " + std::to_string(sent) +
                         " differs from the recv's " + std::to_string(received));
  }
  return failures;
}

}  // namespace scalelab::comm_test
