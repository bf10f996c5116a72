#pragma once
// Where things go in a segment of shared memory: areas placed one after another, each aligned,
// some one per worker. A layout holds offsets, not pointers: each process maps the segment at an
// address of its own and adds them to it.
#include <cstdint>

namespace scalelab {

// `count` areas of `bytes` each, one per worker: worker i's starts `stride` after worker i−1's.
struct Areas {
  int64_t offset = 0, stride = 0, bytes = 0;
  char* at(char* base, int i) const { return base + offset + i * stride; }
};

class SegmentLayout {
 public:
  // Areas go after the segment's first `start` bytes (a command block, core/proc/commands.h).
  explicit SegmentLayout(int64_t start = 0) : end_(start) {}
  // An area of `bytes` starting at a multiple of `align` (a cache line by default, so that two
  // processes writing neighbouring areas do not take a line from each other): its offset.
  int64_t place(int64_t bytes, int64_t align = 64);
  // One area of `bytes` per worker, each starting at a multiple of `align` (a page by default).
  Areas place_each(int count, int64_t bytes, int64_t align = 4096);
  // The segment's size: the end of the last area, rounded up to a page.
  int64_t bytes() const;

 private:
  int64_t end_;
};

}  // namespace scalelab
