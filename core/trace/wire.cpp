#include "core/trace/wire.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace scalelab {
namespace {

constexpr uint64_t kMagic = 0x3345524957534c53ULL;  // "SLSWIRE3": events carry their role and group

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian, as is every host we run on");

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof v);
    std::memcpy(bytes_.data() + at, &v, sizeof v);
  }
  void put(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return s;
  }
  // A count of records that each take at least `min_bytes`: bounded by what is left, so a corrupt
  // count cannot make us reserve gigabytes.
  size_t get_count(size_t min_bytes) {
    const uint64_t n = get<uint64_t>();
    if (n > (size_ - at_) / min_bytes)
      throw Error("trace", "wire records: a count of " + std::to_string(n) + " does not fit the " +
                               std::to_string(size_ - at_) + " bytes left — the data is corrupt or truncated");
    return static_cast<size_t>(n);
  }
  template <typename E>
  E get_enum(int count, const char* what) {
    const uint8_t v = get<uint8_t>();
    if (v >= count)
      throw Error("trace", std::string("wire records: ") + what + " " + std::to_string(v) + " is out of range");
    return static_cast<E>(v);
  }
  bool done() const { return at_ == size_; }
  size_t at() const { return at_; }

 private:
  void need(size_t n) const {
    if (n > size_ - at_)
      throw Error("trace", "wire records: truncated at byte " + std::to_string(at_) + " of " + std::to_string(size_) +
                               " (wanted " + std::to_string(n) + " more)");
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_records(const Records& r) {
  if (!r.tallies.empty())
    throw Error("trace", "encode_records: " + std::to_string(r.tallies.size()) +
                             " tallied devices cannot be sent to another process — only a threads launch tallies");
  Writer w;
  w.put<uint64_t>(kMagic);
  w.put<uint64_t>(r.events.size());
  for (const Event& e : r.events) {
    w.put<int32_t>(e.device);
    w.put<uint8_t>(static_cast<uint8_t>(e.lane));
    w.put<uint8_t>(static_cast<uint8_t>(e.phase));
    w.put(e.kind);
    w.put(e.name);
    w.put<int64_t>(e.t_begin_ns);
    w.put<int64_t>(e.t_end_ns);
    w.put<int64_t>(e.bytes);
    w.put<double>(e.flops);
    w.put<int64_t>(e.step);
    w.put<int32_t>(e.micro_batch);
    w.put<int32_t>(e.bucket);
    w.put<int32_t>(e.layer);
    w.put<int32_t>(e.peer);
    w.put<int64_t>(e.flow_id);
    w.put<uint8_t>(static_cast<uint8_t>(e.role));
    w.put(e.group);
  }
  w.put<uint64_t>(r.memory.size());
  for (const MemorySample& m : r.memory) {
    w.put<int32_t>(m.device);
    w.put<int64_t>(m.t_ns);
    w.put<uint8_t>(static_cast<uint8_t>(m.category));
    w.put<int64_t>(m.bytes);
  }
  w.put<uint64_t>(r.metrics.size());
  for (const Metric& m : r.metrics) {
    w.put<int64_t>(m.step);
    w.put(m.name);
    w.put<double>(m.value);
  }
  w.put<uint64_t>(r.devices.size());
  for (const DeviceRecord& d : r.devices) {
    w.put<int32_t>(d.index);
    w.put(d.description.name);
    w.put(d.description.label);
    w.put(d.description.profile);
    w.put<int64_t>(d.description.capacity_bytes);
    w.put<int64_t>(d.capacity);
    for (int64_t p : d.peak) w.put<int64_t>(p);
    w.put<int64_t>(d.peak_total);
  }
  return w.take();
}

Records decode_records(const uint8_t* data, size_t size) {
  Reader in(data, size);
  if (in.get<uint64_t>() != kMagic)
    throw Error("trace", "wire records: not scalelab's wire format (or another version) — the sender and the receiver "
                         "must be the same build");
  Records r;
  r.events.resize(in.get_count(68));
  for (Event& e : r.events) {
    e.device = in.get<int32_t>();
    e.lane = in.get_enum<Lane>(kLaneCount, "lane");
    e.phase = in.get_enum<Phase>(kPhaseCount, "phase");
    e.kind = in.get_string();
    e.name = in.get_string();
    e.t_begin_ns = in.get<int64_t>();
    e.t_end_ns = in.get<int64_t>();
    e.bytes = in.get<int64_t>();
    e.flops = in.get<double>();
    e.step = in.get<int64_t>();
    e.micro_batch = in.get<int32_t>();
    e.bucket = in.get<int32_t>();
    e.layer = in.get<int32_t>();
    e.peer = in.get<int32_t>();
    e.flow_id = in.get<int64_t>();
    e.role = in.get_enum<Role>(kRoleCount, "role");
    e.group = in.get_string();
  }
  r.memory.resize(in.get_count(21));
  for (MemorySample& m : r.memory) {
    m.device = in.get<int32_t>();
    m.t_ns = in.get<int64_t>();
    m.category = in.get_enum<MemoryCategory>(kMemoryCategoryCount, "memory category");
    m.bytes = in.get<int64_t>();
  }
  r.metrics.resize(in.get_count(20));
  for (Metric& m : r.metrics) {
    m.step = in.get<int64_t>();
    m.name = in.get_string();
    m.value = in.get<double>();
  }
  r.devices.resize(in.get_count(40 + 8 * kMemoryCategoryCount));
  for (DeviceRecord& d : r.devices) {
    d.index = in.get<int32_t>();
    d.description.name = in.get_string();
    d.description.label = in.get_string();
    d.description.profile = in.get_string();
    d.description.capacity_bytes = in.get<int64_t>();
    d.capacity = in.get<int64_t>();
    for (int64_t& p : d.peak) p = in.get<int64_t>();
    d.peak_total = in.get<int64_t>();
  }
  if (!in.done())
    throw Error("trace", "wire records: " + std::to_string(size - in.at()) + " bytes left over after the records — the "
                         "data is corrupt");
  return r;
}

}  // namespace scalelab
