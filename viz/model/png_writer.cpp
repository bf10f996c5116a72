#include "viz/model/png_writer.h"

#include <zlib.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace scalelab::viz {

namespace {

void put_u32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

// A chunk is length, type, data, and the CRC of type + data.
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(out.data() + type_at), static_cast<uInt>(4 + data.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::string encode_png(int width, int height, const uint8_t* rgb) {
  if (width <= 0 || height <= 0) throw Error("dash", "png: empty image (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  const size_t stride = static_cast<size_t>(width) * 3;
  std::string raw;
  raw.reserve((stride + 1) * static_cast<size_t>(height));
  std::string candidate[3];
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = rgb + stride * static_cast<size_t>(y);
    const uint8_t* up = y > 0 ? row - stride : nullptr;
    long best_cost = -1;
    int best = 0;
    for (int f = 0; f < 3; ++f) {
      std::string& c = candidate[f];
      c.assign(stride, '\0');
      long cost = 0;
      for (size_t i = 0; i < stride; ++i) {
        const uint8_t left = i >= 3 ? row[i - 3] : 0, above = up ? up[i] : 0;
        const uint8_t v = static_cast<uint8_t>(f == 0 ? row[i] : f == 1 ? row[i] - left : row[i] - above);
        c[i] = static_cast<char>(v);
        cost += std::abs(static_cast<int8_t>(v));
      }
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = f;
      }
    }
    raw.push_back(static_cast<char>(best));  // filter type byte: 0 None, 1 Sub, 2 Up
    raw += candidate[best];
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(compressed.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw Error("dash", "png: zlib could not compress the image");
  compressed.resize(size);

  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, standard filters, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", compressed);
  put_chunk(png, "IEND", "");
  return png;
}

void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  if (rgb.size() < static_cast<size_t>(width) * static_cast<size_t>(height) * 3)
    throw Error("dash", path + ": image buffer smaller than " + std::to_string(width) + "x" + std::to_string(height));
  write_file_atomically(path, encode_png(width, height, rgb.data()), "dash");
}

std::string picture_info_json(const PictureInfo& info) {
  nlohmann::ordered_json j;
  j["panel"] = info.panel.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(info.panel);
  j["width"] = info.width;
  j["height"] = info.height;
  j["font_px"] = info.font_px;
  j["clock"] = info.simulated ? "simulated" : "measured";
  j["trace"] = info.trace.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(info.trace);
  j["step"] = info.step >= 0 ? nlohmann::ordered_json(info.step) : nlohmann::ordered_json();
  return j.dump(2) + "\n";
}

void write_picture_info(const std::string& png_path, const PictureInfo& info) {
  write_file_atomically(png_path + ".json", picture_info_json(info), "dash");
}

}  // namespace scalelab::viz
