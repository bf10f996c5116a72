#include "core/proc/layout.h"

#include <string>

#include "core/error.h"

namespace scalelab {
namespace {

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

void check(int64_t bytes, int64_t align) {
  if (bytes < 0 || align < 1 || (align & (align - 1)) != 0)
    throw Error("proc", "internal: an area of " + std::to_string(bytes) + " bytes aligned to " + std::to_string(align) +
                            " — sizes are ≥ 0, alignments powers of two; please report it");
}

}  // namespace

int64_t SegmentLayout::place(int64_t bytes, int64_t align) {
  check(bytes, align);
  const int64_t at = round_up(end_, align);
  end_ = at + bytes;
  return at;
}

Areas SegmentLayout::place_each(int count, int64_t bytes, int64_t align) {
  check(bytes, align);
  Areas a;
  a.stride = round_up(bytes, align);
  a.bytes = bytes;
  a.offset = place(count * a.stride, align);
  return a;
}

int64_t SegmentLayout::bytes() const { return round_up(end_, 4096); }

}  // namespace scalelab
