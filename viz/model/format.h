#pragma once
// Numbers as people read them: bytes in binary units, times in the unit that keeps 3 digits.
#include <cstdint>
#include <string>

namespace scalelab::viz {

std::string format_bytes(double bytes);        // "512 B", "1.50 KiB", "8.42 MiB"
std::string format_duration(double ns);        // "850 ns", "12.3 µs", "1.25 ms", "2.10 s"
// A tick label: t in the unit that suits it, with as many decimals as the tick spacing needs, so
// neighbouring ticks never read the same ("36.62 ms", "36.64 ms" rather than "36.6 ms" twice).
std::string format_tick(double t_ns, double step_ns);
std::string format_flops(double flops);        // "1.77 MFLOP"
std::string format_rate(double per_s, const char* unit);  // "12.3 G" + unit + "/s"
std::string format_pct(double pct);            // "27.2%"

}  // namespace scalelab::viz
