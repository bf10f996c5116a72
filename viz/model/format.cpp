#include "viz/model/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace scalelab::viz {

namespace {

std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

// Three significant digits: 1.23, 12.3, 123.
const char* three_digits(double v) { return std::fabs(v) >= 100 ? "%.0f %s" : std::fabs(v) >= 10 ? "%.1f %s" : "%.2f %s"; }

}  // namespace

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  if (u == 0) return printf_string("%.0f %s", bytes, units[0]);
  return printf_string(three_digits(bytes), bytes, units[u]);
}

std::string format_duration(double ns) {
  const double a = std::fabs(ns);
  if (a < 1e3) return printf_string("%.0f %s", ns, "ns");
  if (a < 1e6) return printf_string(three_digits(ns / 1e3), ns / 1e3, "µs");
  if (a < 1e9) return printf_string(three_digits(ns / 1e6), ns / 1e6, "ms");
  return printf_string(three_digits(ns / 1e9), ns / 1e9, "s");
}

std::string format_tick(double t_ns, double step_ns) {
  const double a = std::max(std::fabs(t_ns), step_ns);
  const double unit = a < 1e3 ? 1 : a < 1e6 ? 1e3 : a < 1e9 ? 1e6 : 1e9;
  const char* name = unit == 1 ? "ns" : unit == 1e3 ? "µs" : unit == 1e6 ? "ms" : "s";
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step_ns / unit) - 1e-9)), 0, 6);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, t_ns / unit, name);
  return buf;
}

std::string format_flops(double flops) {
  static const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  int u = 0;
  while (std::fabs(flops) >= 1000 && u < 5) {
    flops /= 1000;
    ++u;
  }
  return printf_string(u == 0 ? "%.0f %s" : three_digits(flops), flops, units[u]);
}

std::string format_rate(double per_s, const char* unit) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(per_s) >= 1000 && u < 5) {
    per_s /= 1000;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, std::fabs(per_s) >= 100 ? "%.0f %s%s/s" : std::fabs(per_s) >= 10 ? "%.1f %s%s/s" : "%.2f %s%s/s",
                per_s, prefixes[u], unit);
  return buf;
}

std::string format_pct(double pct) { return printf_string("%.1f%s", pct, "%"); }

}  // namespace scalelab::viz
