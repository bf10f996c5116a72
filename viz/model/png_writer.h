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

// What a screenshot shows, written beside it as F.png.json so that a check of a slide can read how
// large its text is once scaled (font_px × shown width / width) and which clock its times are from.
struct PictureInfo {
  std::string panel;      // the panel drawn alone (--panel); "" for the whole window (null in the JSON)
  int width = 0, height = 0;
  float font_px = 0;
  bool simulated = false;  // the trace's times are the cost model's ("simulated"), else "measured"
  std::string trace;       // the replayed trace; "" for a live run (null)
  long long step = -1;     // the training step at the cursor; -1: none (null)
};
// {"panel", "width", "height", "font_px", "clock", "trace", "step"}: exactly these keys.
std::string picture_info_json(const PictureInfo& info);
// Writes picture_info_json to PNG_PATH + ".json", atomically; throws Error("dash", ...).
void write_picture_info(const std::string& png_path, const PictureInfo& info);

}  // namespace scalelab::viz
