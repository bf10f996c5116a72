#pragma once
// A PNG writer on zlib alone (no image library): 8-bit RGB, one IDAT chunk, each row filtered with
// whichever of None / Sub / Up makes it smallest (the usual heuristic: least sum of |bytes|).
#include <cstdint>
#include <string>
#include <vector>

namespace scalelab::viz {

// `rgb` holds height rows of width × 3 bytes, top row first. Returns the file's bytes.
std::string encode_png(int width, int height, const uint8_t* rgb);
// Writes the PNG atomically (a temporary beside the target, then renamed); throws Error("dash", ...).
void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace scalelab::viz
