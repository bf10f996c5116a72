#include "core/io/npz.h"

#include <zlib.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace scalelab {
namespace {

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

// One array as a .npy file, format 1.0: the magic, the header (a Python dict literal, padded so
// the data starts on a 64-byte boundary), the data little-endian in C order.
std::string npy_bytes(const NpzArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : i + 1 < a.shape.size() ? ", " : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + (a.integer ? "<i8" : "<f4") + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put16(out, static_cast<uint32_t>(header.size()));
  out += header;
  if (a.integer) out.append(reinterpret_cast<const char*>(a.i64.data()), a.i64.size() * sizeof(int64_t));
  else out.append(reinterpret_cast<const char*>(a.f32.data()), a.f32.size() * sizeof(float));
  return out;
}

uint64_t get(const std::string& b, size_t at, int bytes, const std::string& path) {
  if (at + static_cast<size_t>(bytes) > b.size())
    throw Error("npz", path + ": ends inside a zip record — the file is cut short");
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

// The value of `key` in a .npy header dict: the text after "'key':" up to the next top-level comma.
std::string header_field(const std::string& h, const std::string& key, const std::string& where) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) throw Error("npz", where + ": its .npy header has no '" + key + "'");
  size_t i = h.find(':', k) + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  size_t end = i;
  int depth = 0;
  for (; end < h.size(); ++end) {
    if (h[end] == '(') ++depth;
    if (h[end] == ')') --depth;
    if (depth == 0 && (h[end] == ',' || h[end] == '}')) break;
  }
  return h.substr(i, end - i);
}

NpzArray parse_npy(const std::string& b, size_t at, size_t size, const std::string& name, const std::string& path) {
  const std::string where = path + " [" + name + "]";
  if (size < 10 || b.compare(at, 6, "\x93NUMPY") != 0) throw Error("npz", where + ": not a .npy array");
  const int major = static_cast<unsigned char>(b[at + 6]);
  const size_t header_len = major == 1 ? get(b, at + 8, 2, path) : get(b, at + 8, 4, path);
  const size_t header_at = at + (major == 1 ? 10 : 12);
  if (header_at + header_len > at + size) throw Error("npz", where + ": its header runs past the entry");
  const std::string h = b.substr(header_at, header_len);
  NpzArray a;
  a.name = name;
  const std::string descr = header_field(h, "descr", where);
  if (header_field(h, "fortran_order", where) != "False")
    throw Error("npz", where + ": a Fortran-order array — save it C-contiguous (np.ascontiguousarray)");
  std::string shape = header_field(h, "shape", where);
  for (char& c : shape)
    if (c == '(' || c == ')' || c == ',') c = ' ';
  int64_t count = 1;
  size_t pos = 0;
  while (pos < shape.size()) {
    while (pos < shape.size() && shape[pos] == ' ') ++pos;
    if (pos >= shape.size()) break;
    size_t used = 0;
    long long d = -1;
    try {
      d = std::stoll(shape.substr(pos), &used);
    } catch (const std::exception&) {
      throw Error("npz", where + ": its shape " + header_field(h, "shape", where) + " is not a tuple of sizes");
    }
    if (d < 0 || (d > 0 && count > std::numeric_limits<int64_t>::max() / d)) throw Error("npz", where + ": an impossible shape");
    a.shape.push_back(d);
    count *= d;
    pos += used;
  }
  const size_t data_at = header_at + header_len, data_bytes = at + size - data_at;
  const int width = descr == "'<f4'" || descr == "'<i4'" ? 4 : descr == "'<f8'" || descr == "'<i8'" ? 8 : 0;
  if (width == 0) throw Error("npz", where + ": dtype " + descr + " — save float32, float64 or int64 arrays");
  if (static_cast<uint64_t>(count) * static_cast<uint64_t>(width) != data_bytes)
    throw Error("npz", where + ": " + std::to_string(data_bytes) + " bytes of data for " + std::to_string(count) +
                           " values of " + descr + " — the entry is damaged");
  const char* p = b.data() + data_at;
  if (descr == "'<f4'") {
    a.f32.resize(static_cast<size_t>(count));
    std::memcpy(a.f32.data(), p, data_bytes);
  } else if (descr == "'<f8'") {
    a.f32.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      a.f32[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  } else {
    a.integer = true;
    a.i64.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      if (width == 8) std::memcpy(&a.i64[static_cast<size_t>(i)], p + 8 * i, 8);
      else {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        a.i64[static_cast<size_t>(i)] = v;
      }
    }
  }
  return a;
}

}  // namespace

void write_npz(const std::string& path, const std::vector<NpzArray>& arrays) {
  std::string zip, central;
  for (const NpzArray& a : arrays) {
    const std::string data = npy_bytes(a);
    const std::string name = a.name + ".npy";
    if (data.size() >= 0xffffffffu || zip.size() >= 0xffffffffu)
      throw Error("npz", path + ": " + a.name + " makes the file larger than 4 GiB, beyond what we write — export a smaller model");
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const uint32_t offset = static_cast<uint32_t>(zip.size());
    // Local header: stored, no data descriptor, 1980-01-01 00:00 (a fixed stamp: the same weights
    // give the same bytes).
    put32(zip, 0x04034b50);
    put16(zip, 20);
    put16(zip, 0);
    put16(zip, 0);
    put16(zip, 0);
    put16(zip, (0 << 9) | (1 << 5) | 1);
    put32(zip, crc);
    put32(zip, static_cast<uint32_t>(data.size()));
    put32(zip, static_cast<uint32_t>(data.size()));
    put16(zip, static_cast<uint32_t>(name.size()));
    put16(zip, 0);
    zip += name;
    zip += data;
    put32(central, 0x02014b50);
    put16(central, 20);
    put16(central, 20);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, (0 << 9) | (1 << 5) | 1);
    put32(central, crc);
    put32(central, static_cast<uint32_t>(data.size()));
    put32(central, static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint32_t>(name.size()));
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put32(central, 0);
    put32(central, offset);
    central += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(zip.size());
  zip += central;
  put32(zip, 0x06054b50);
  put16(zip, 0);
  put16(zip, 0);
  put16(zip, static_cast<uint32_t>(arrays.size()));
  put16(zip, static_cast<uint32_t>(arrays.size()));
  put32(zip, static_cast<uint32_t>(central.size()));
  put32(zip, cd_offset);
  put16(zip, 0);
  write_file_atomically(path, zip, "npz");
}

std::vector<NpzArray> read_npz(const std::string& path, int64_t cap, const std::string& cap_reason) {
  const std::string b = read_maybe_gzipped(path, "npz", cap, cap_reason);
  // The end of central directory record: the last one, within the 64 KiB a comment may take.
  size_t eocd = std::string::npos;
  if (b.size() >= 22) {
    const size_t lowest = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;
    for (size_t i = b.size() - 22 + 1; i-- > lowest;)
      if (get(b, i, 4, path) == 0x06054b50) {
        eocd = i;
        break;
      }
  }
  if (eocd == std::string::npos)
    throw Error("npz", path + ": not a zip archive (no end record) — write it with numpy.savez or `scalelab export`");
  uint64_t entries = get(b, eocd + 10, 2, path), cd_offset = get(b, eocd + 16, 4, path);
  if (cd_offset == 0xffffffffu || entries == 0xffffu) {
    // zip64: the locator sits just before the end record and points at the zip64 end record.
    if (eocd < 20 || get(b, eocd - 20, 4, path) != 0x07064b50) throw Error("npz", path + ": a zip64 archive without its locator");
    const size_t z = get(b, eocd - 20 + 8, 8, path);
    if (get(b, z, 4, path) != 0x06064b50) throw Error("npz", path + ": a damaged zip64 end record");
    entries = get(b, z + 32, 8, path);
    cd_offset = get(b, z + 48, 8, path);
  }
  std::vector<NpzArray> out;
  size_t at = cd_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (get(b, at, 4, path) != 0x02014b50) throw Error("npz", path + ": a damaged central directory");
    const uint64_t method = get(b, at + 10, 2, path);
    uint64_t comp = get(b, at + 20, 4, path), local = get(b, at + 42, 4, path);
    const size_t name_len = get(b, at + 28, 2, path), extra_len = get(b, at + 30, 2, path),
                 comment_len = get(b, at + 32, 2, path);
    std::string name = b.substr(at + 46, name_len);
    const uint64_t uncomp_field = get(b, at + 24, 4, path);
    // zip64 extra field (id 1): the 8-byte values of those fields that read 0xFFFFFFFF, in order.
    for (size_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = get(b, x, 2, path), len = get(b, x + 2, 2, path);
      if (id == 1) {
        size_t f = x + 4;
        if (uncomp_field == 0xffffffffu) f += 8;
        if (comp == 0xffffffffu) {
          comp = get(b, f, 8, path);
          f += 8;
        }
        if (local == 0xffffffffu) local = get(b, f, 8, path);
      }
      x += 4 + len;
    }
    if (method != 0)
      throw Error("npz", path + " [" + name + "]: a compressed entry — save with numpy.savez, not savez_compressed");
    if (get(b, local, 4, path) != 0x04034b50) throw Error("npz", path + " [" + name + "]: a damaged local header");
    const size_t data_at = local + 30 + get(b, local + 26, 2, path) + get(b, local + 28, 2, path);
    if (data_at + comp > b.size()) throw Error("npz", path + " [" + name + "]: its data runs past the end — the file is cut short");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    out.push_back(parse_npy(b, data_at, comp, name, path));
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace scalelab
