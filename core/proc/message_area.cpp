#include "core/proc/message_area.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace scalelab {

MessageArea::MessageArea(char* area, int64_t bytes, std::string name) : area_(area), bytes_(bytes), name_(std::move(name)) {}

void MessageArea::put(const std::vector<uint8_t>& message, const std::string& what) const {
  const int64_t size = static_cast<int64_t>(message.size()), room = bytes_ - kHeader;
  if (size > room)
    throw Error("proc", name_ + " holds " + std::to_string(room) + " bytes, but " + what + " take " +
                            std::to_string(size) + " — internal: its segment's layout sizes it too small; please report it");
  std::memcpy(area_ + kHeader, message.data(), message.size());
  std::memcpy(area_, &size, sizeof size);
}

const uint8_t* MessageArea::data() const { return reinterpret_cast<const uint8_t*>(area_ + kHeader); }

size_t MessageArea::size() const {
  int64_t size = 0;
  std::memcpy(&size, area_, sizeof size);
  if (size < 0 || size > bytes_ - kHeader)
    throw Error("proc", name_ + " says it holds " + std::to_string(size) + " bytes, it has room for " +
                            std::to_string(bytes_ - kHeader) + " — its writer was cut off or wrote past it");
  return static_cast<size_t>(size);
}

void send_records(const MessageArea& area, const Records& records) {
  area.put(encode_records(records), std::to_string(records.events.size()) + " events and " +
                                       std::to_string(records.devices.size()) + " device ledgers");
}

Records receive_records(const MessageArea& area) { return decode_records(area.data(), area.size()); }

// A message of buffers: u64 items; per item u64 buffers; per buffer u64 floats, then the floats.
int64_t buffers_bytes(const std::vector<int64_t>& numel, int per_item) {
  int64_t bytes = 8;
  for (int64_t n : numel) bytes += 8 + per_item * (8 + 4 * n);
  return bytes;
}

void send_buffers(const MessageArea& area, const FloatBuffers& buffers) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  auto put_count = [&](size_t n) {
    const uint64_t v = n;
    put(&v, sizeof v);
  };
  put_count(buffers.size());
  size_t floats = 0;
  for (const auto& item : buffers) {
    put_count(item.size());
    for (const auto& b : item) {
      put_count(b.size());
      put(b.data(), b.size() * sizeof(float));
      floats += b.size();
    }
  }
  area.put(out, std::to_string(floats) + " floats in " + std::to_string(buffers.size()) + " items");
}

FloatBuffers receive_buffers(const MessageArea& area) {
  const uint8_t* p = area.data();
  const size_t size = area.size();
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (n > size - at)
      throw Error("proc", area.name() + ": its " + std::to_string(size) + " bytes end inside a buffer, at byte " +
                              std::to_string(at) + " — its writer sent something else; please report it");
    std::memcpy(dst, p + at, n);
    at += n;
  };
  auto take_count = [&] {
    uint64_t v = 0;
    take(&v, sizeof v);
    return static_cast<size_t>(std::min<uint64_t>(v, size));  // more than the bytes left: take() refuses
  };
  FloatBuffers buffers(take_count());
  for (auto& item : buffers) {
    item.resize(take_count());
    for (auto& b : item) {
      b.resize(take_count());
      take(b.data(), b.size() * sizeof(float));
    }
  }
  return buffers;
}

FloatBuffers mean_buffers(const std::vector<FloatBuffers>& each) {
  if (each.empty()) return {};
  FloatBuffers mean = each.front();
  for (const FloatBuffers& b : each) {
    bool same = b.size() == mean.size();
    for (size_t i = 0; same && i < b.size(); ++i) {
      same = b[i].size() == mean[i].size();
      for (size_t j = 0; same && j < b[i].size(); ++j) same = b[i][j].size() == mean[i][j].size();
    }
    if (!same) throw Error("proc", "internal: the mean of buffers of different shapes; please report it");
  }
  for (size_t i = 0; i < mean.size(); ++i)
    for (size_t j = 0; j < mean[i].size(); ++j)
      for (size_t k = 0; k < mean[i][j].size(); ++k) {
        double sum = 0;
        for (const FloatBuffers& b : each) sum += b[i][j][k];
        mean[i][j][k] = static_cast<float>(sum / static_cast<double>(each.size()));
      }
  return mean;
}

FloatBuffers mean_from_workers(Commander& commands, int32_t command, const MessageArea& area, const std::string& doing) {
  std::vector<FloatBuffers> each;
  for (int r = 0; r < commands.workers(); ++r) {
    commands.issue(r, command);
    commands.wait(doing, r);
    each.push_back(receive_buffers(area));
  }
  return mean_buffers(each);
}

void give_to_workers(Commander& commands, int32_t command, const MessageArea& area, const FloatBuffers& buffers,
                     const std::string& doing) {
  send_buffers(area, buffers);
  commands.issue_all(command);
  commands.wait(doing);
}

}  // namespace scalelab
