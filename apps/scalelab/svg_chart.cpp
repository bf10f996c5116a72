// Line charts as SVG text (see svg_chart.h).
#include "apps/scalelab/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace scalelab {

std::string fmt(double v, const char* f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// One chart at (x0, y0), w × h, x on a log2 axis (the sweep doubles) or linear, y from 0.
void chart(std::ostringstream& s, double x0, double y0, double w, double h, const std::string& title,
           const std::string& xlabel, const std::string& ylabel, const std::vector<double>& xs,
           const std::vector<Series>& series, double ymax_hint,
           const std::function<std::string(double)>& x_label_of) {
  const double left = 72, right = 28, top = 40, bottom = 56;
  const double pw = w - left - right, ph = h - top - bottom;
  double ymax = ymax_hint;
  for (const Series& se : series)
    for (double v : se.y) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  const double mag = std::pow(10.0, std::floor(std::log10(ymax)));
  double ystep = mag;
  for (double f : {0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0}) {
    if (ymax / (f * mag) <= 6) {
      ystep = f * mag;
      break;
    }
  }
  ymax = std::ceil(ymax / ystep) * ystep;
  const bool log_x = xs.size() > 1 && xs.front() > 0 && xs.back() / xs.front() >= 4;
  auto xpos = [&](double x) {
    const double a = log_x ? std::log2(xs.front()) : xs.front(), b = log_x ? std::log2(xs.back()) : xs.back();
    const double v = log_x ? std::log2(x) : x;
    return x0 + left + (b > a ? (v - a) / (b - a) : 0.5) * pw;
  };
  auto ypos = [&](double y) { return y0 + top + ph - y / ymax * ph; };
  // The legend's box goes in the corner of the plot where it covers the fewest points of the
  // lines (each sampled between its points too), top right first; where every corner covers some,
  // the y axis grows a step at a time (three at most) until a top corner is clear.
  size_t longest = 0;
  for (const Series& se : series) longest = std::max(longest, se.name.size());
  const double box_w = 36 + 7.9 * static_cast<double>(longest), box_h = 19.0 * static_cast<double>(series.size()) + 6;
  const double corners[4][2] = {{x0 + left + pw - box_w - 4, y0 + top + 2},
                                {x0 + left + 4, y0 + top + 2},
                                {x0 + left + pw - box_w - 4, y0 + top + ph - box_h - 2},
                                {x0 + left + 4, y0 + top + ph - box_h - 2}};
  // A point's label, where it differs from the previous point's: under the point, or over it when
  // under it would run into the label before (close points); about 7.9 px a character at 14 px.
  struct Label {
    double x, y, left, width;  // the text's anchor and baseline; its extent
    const char* anchor;
    const std::string* text;
    const std::string* color;
  };
  auto labels = [&]() {
    std::vector<Label> out;
    for (const Series& se : series) {
      double right_of_last = -1e9;
      for (size_t i = 0; i < xs.size() && i < se.y.size() && i < se.labels.size(); ++i) {
        if (se.labels[i].empty() || (i > 0 && se.labels[i] == se.labels[i - 1])) continue;
        const double width = 7.9 * static_cast<double>(se.labels[i].size()), x = xpos(xs[i]);
        const char* anchor = i + 1 == xs.size() ? "end" : i == 0 ? "start" : "middle";
        const double left = anchor[0] == 's' ? x : anchor[0] == 'e' ? x - width : x - width / 2;
        const bool over = left < right_of_last + 4;
        out.push_back({x, over ? ypos(se.y[i]) - 8 : ypos(se.y[i]) + 20, left, width, anchor, &se.labels[i], &se.color});
        right_of_last = over ? right_of_last : left + width;
      }
    }
    return out;
  };
  auto covered = [&](const double* c) {
    int n = 0;
    for (const Label& l : labels())
      for (int k = 0; k <= 4; ++k)
        for (double py : {l.y - 14, l.y + 3}) {
          const double px = l.left + l.width * k / 4;
          n += px >= c[0] - 3 && px <= c[0] + box_w + 3 && py >= c[1] - 3 && py <= c[1] + box_h + 3;
        }
    for (const Series& se : series)
      for (size_t i = 0; i + 1 < xs.size() && i + 1 < se.y.size(); ++i)
        for (int k = 0; k <= 8; ++k) {
          const double f = k / 8.0;
          const double px = xpos(xs[i]) + f * (xpos(xs[i + 1]) - xpos(xs[i]));
          const double py = ypos(se.y[i]) + f * (ypos(se.y[i + 1]) - ypos(se.y[i]));
          n += px >= c[0] - 3 && px <= c[0] + box_w + 3 && py >= c[1] - 3 && py <= c[1] + box_h + 3;
        }
    return n;
  };
  auto clearest = [&](int corner_count) {
    int best = 0;
    for (int k = 1; k < corner_count; ++k)
      if (covered(corners[k]) < covered(corners[best])) best = k;
    return best;
  };
  const double ymax_data = ymax;
  int legend_at = clearest(4);
  for (int grow = 1; covered(corners[legend_at]) > 0 && grow <= 3; ++grow) {
    ymax = ymax_data + grow * ystep;
    if (const int top_corner = clearest(2); covered(corners[top_corner]) == 0) legend_at = top_corner;
  }
  if (covered(corners[legend_at]) > 0) {
    ymax = ymax_data;
    legend_at = clearest(4);
  }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 + 26 << "' text-anchor='middle' font-size='18' font-weight='bold'>"
    << title << "</text>\n";
  for (double y = 0; y <= ymax + 1e-9 * ymax; y += ystep) {
    s << "<line x1='" << x0 + left << "' x2='" << x0 + left + pw << "' y1='" << ypos(y) << "' y2='" << ypos(y)
      << "' stroke='#e4e4e4'/>\n";
    s << "<text x='" << x0 + left - 6 << "' y='" << ypos(y) + 5 << "' text-anchor='end' font-size='14'>" << fmt(y)
      << "</text>\n";
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    s << "<line x1='" << xpos(x) << "' x2='" << xpos(x) << "' y1='" << y0 + top << "' y2='" << y0 + top + ph
      << "' stroke='#f0f0f0'/>\n";
    s << "<text x='" << xpos(x) << "' y='" << y0 + top + ph + 19 << "' text-anchor='middle' font-size='14'>"
      << (xs.size() > 10 && i % 2 ? "" : x_label_of ? x_label_of(x) : fmt(x)) << "</text>\n";
  }
  s << "<rect x='" << x0 + left << "' y='" << y0 + top << "' width='" << pw << "' height='" << ph
    << "' fill='none' stroke='#888'/>\n";
  s << "<text x='" << x0 + left + pw / 2 << "' y='" << y0 + h - 10 << "' text-anchor='middle' font-size='15'>" << xlabel
    << "</text>\n";
  s << "<text transform='translate(" << x0 + 16 << "," << y0 + top + ph / 2 << ") rotate(-90)' text-anchor='middle' "
    << "font-size='15'>" << ylabel << "</text>\n";
  for (const Series& se : series) {
    s << "<polyline fill='none' stroke='" << se.color << "' stroke-width='2'" << (se.dashed ? " stroke-dasharray='6 4'" : "")
      << " points='";
    for (size_t i = 0; i < xs.size() && i < se.y.size(); ++i) s << xpos(xs[i]) << "," << ypos(se.y[i]) << " ";
    s << "'/>\n";
    if (!se.dashed)
      for (size_t i = 0; i < xs.size() && i < se.y.size(); ++i)
        s << "<circle cx='" << xpos(xs[i]) << "' cy='" << ypos(se.y[i]) << "' r='3' fill='" << se.color << "'/>\n";
  }
  for (const Label& l : labels())
    s << "<text x='" << l.x << "' y='" << l.y << "' text-anchor='" << l.anchor << "' font-size='14' fill='" << *l.color
      << "'>" << *l.text << "</text>\n";
  // The legend, in the corner chosen above, over the lines but readable.
  const double box_x = corners[legend_at][0], box_y = corners[legend_at][1];
  s << "<rect x='" << box_x << "' y='" << box_y << "' width='" << box_w << "' height='" << box_h
    << "' fill='white' fill-opacity='0.85' stroke='#ccc'/>\n";
  double ly = box_y + 12;
  for (const Series& se : series) {
    s << "<line x1='" << box_x + 6 << "' x2='" << box_x + 26 << "' y1='" << ly << "' y2='" << ly << "' stroke='"
      << se.color << "' stroke-width='2'" << (se.dashed ? " stroke-dasharray='6 4'" : "") << "/>\n";
    s << "<text x='" << box_x + 32 << "' y='" << ly + 5 << "' font-size='14'>" << se.name << "</text>\n";
    ly += 19;
  }
}

std::vector<Series> merge_coinciding(const std::vector<Series>& series) {
  std::vector<Series> out;
  for (const Series& se : series) {
    auto same = [&](const Series& o) {
      if (o.y.size() != se.y.size() || o.dashed != se.dashed) return false;
      for (size_t i = 0; i < se.y.size(); ++i)
        if (std::abs(o.y[i] - se.y[i]) > 1e-9 * std::max(std::abs(o.y[i]), std::abs(se.y[i]))) return false;
      return true;
    };
    const auto it = std::find_if(out.begin(), out.end(), same);
    if (it == out.end()) out.push_back(se);
    else it->name += " = " + se.name;
  }
  return out;
}

std::string svg_document(double width, double height, const std::string& body, const std::string& caption) {
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height + 30
    << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='" << width / 2 << "' y='" << height + 20 << "' text-anchor='middle' font-size='14' fill='#555'>" << caption
    << "</text>\n";
  s << body << "</svg>\n";
  return s.str();
}

}  // namespace scalelab
