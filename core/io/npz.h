#pragma once
// numpy's .npz: a zip of .npy arrays, what `numpy.load` and `numpy.savez` read and write — the
// format weights cross to PyTorch in (`torch.from_numpy(np.load(F)["0.weight"])`). We write f32
// and i64 arrays in C order, stored (not deflated); we read what numpy.savez writes (stored
// entries, zip64 fields included) with f32 or f64 data.
#include <cstdint>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"

namespace scalelab {

struct NpzArray {
  std::string name;             // the key: "0.weight"
  std::vector<int64_t> shape;   // {} for a scalar
  std::vector<float> f32;       // the values, C order (f64 files are read into this too)
  std::vector<int64_t> i64;     // or these, for an integer array
  bool integer = false;
};

// Written atomically (a temporary file renamed into place). Throws Error("npz", ...).
void write_npz(const std::string& path, const std::vector<NpzArray>& arrays);

// Throws Error("npz", "<path>: …") naming what is wrong (not a zip, a compressed entry, a dtype
// other than f4/f8/i8, a Fortran-order array, sizes that do not add up). A gzipped .npz inflates to
// at most `cap` bytes (read_maybe_gzipped).
std::vector<NpzArray> read_npz(const std::string& path, int64_t cap = default_inflate_cap(),
                               const std::string& cap_reason = "a quarter of this machine's memory");

}  // namespace scalelab
