#pragma once
// A message area: a place in shared memory through which one process hands another one message of
// bytes at a time. It has no lock — the command protocol (core/proc/commands.h) orders writer and reader: a worker
// fills its outbox before it reports, the parent reads it after the report (and fills an area
// before it issues the command that reads it). What goes through one: a process's records (the wire
// codec, core/trace/wire.h) and float buffers (an optimizer's state).
#include <cstdint>
#include <string>
#include <vector>

#include "core/proc/commands.h"
#include "core/trace/wire.h"

namespace scalelab {

// A view of the area, as a span is (a const one still writes it): each process makes its own.
class MessageArea {
 public:
  // The bytes an area needs for messages of up to `payload` bytes (place it with SegmentLayout).
  static int64_t bytes_for(int64_t payload) { return kHeader + payload; }

  // `area` is this process's address of the area's `bytes`; `name` is for errors ("worker 2's outbox").
  MessageArea(char* area, int64_t bytes, std::string name);

  // Throws Error("proc", ...) naming the area, the message (`what`: "57 events") and both sizes
  // when it does not fit: the layout sized the area too small.
  void put(const std::vector<uint8_t>& message, const std::string& what) const;
  const uint8_t* data() const;
  size_t size() const;  // of the message in the area; throws if it holds no valid length
  const std::string& name() const { return name_; }

 private:
  static constexpr int64_t kHeader = 64;  // the length, then the message on a cache line of its own
  char* area_;
  int64_t bytes_;
  std::string name_;
};

// A process's records (events, its devices' ledgers …) through an area, and back.
void send_records(const MessageArea& area, const Records& records);
Records receive_records(const MessageArea& area);

// Float buffers per item — an optimizer's state: per parameter, its momentum, or Adam's m and v.
using FloatBuffers = std::vector<std::vector<std::vector<float>>>;
// The bytes a message of `per_item` buffers of numel[i] floats for each item i takes.
int64_t buffers_bytes(const std::vector<int64_t>& numel, int per_item);
void send_buffers(const MessageArea& area, const FloatBuffers& buffers);
FloatBuffers receive_buffers(const MessageArea& area);  // throws Error("proc", ...) if malformed
// The element-wise mean of processes' buffers, all of one shape (summed in double, then rounded).
FloatBuffers mean_buffers(const std::vector<FloatBuffers>& each);

// Buffers to and from workers that serve commands (core/proc/commands.h), through one area they
// share. mean_from_workers issues `command` to each worker in turn (the area holds one message),
// which answers by sending its buffers into the area, and returns their mean; give_to_workers sends
// `buffers` into the area, then issues `command` to every worker, which takes them from it. `doing`
// completes the messages of a worker that fails ("saving its optimizer state").
FloatBuffers mean_from_workers(Commander& commands, int32_t command, const MessageArea& area, const std::string& doing);
void give_to_workers(Commander& commands, int32_t command, const MessageArea& area, const FloatBuffers& buffers,
                     const std::string& doing);

}  // namespace scalelab
