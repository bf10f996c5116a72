#pragma once
// Line charts drawn as SVG text, for the pictures scalelab draws from its own numbers: `scalelab
// scale --plot` and `scalelab figure` (the slides' plots). No plotting library: a chart is a few
// dozen SVG elements, and a picture regenerated from the same JSON is the same file.
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace scalelab {

// One line of a chart: a value per x of the chart. Dashed: a formula (drawn without dots).
struct Series {
  std::string name, color;
  std::vector<double> y;
  bool dashed = false;
  // A word at a point (e.g. the algorithm a collective used there), written under the point where
  // it differs from the previous point's; empty: none.
  std::vector<std::string> labels = {};
};

// Series whose values are all the same (to a part in 10⁹) drawn as one line, named "a = b = …":
// lines drawn on top of each other would show only the last.
std::vector<Series> merge_coinciding(const std::vector<Series>& series);

// printf-style number for labels.
std::string fmt(double v, const char* f = "%g");

// One chart at (x0, y0), w × h, into `s`: x on a log2 axis when the sweep spans a factor ≥ 4
// (it doubles), else linear; y from 0 to at least ymax_hint. `x_label_of` writes an x tick
// (default: the number); with more than 10 ticks every other one is labelled.
void chart(std::ostringstream& s, double x0, double y0, double w, double h, const std::string& title,
           const std::string& xlabel, const std::string& ylabel, const std::vector<double>& xs,
           const std::vector<Series>& series, double ymax_hint,
           const std::function<std::string(double)>& x_label_of = nullptr);

// The <svg> element around charts: white background, a caption line at the bottom.
std::string svg_document(double width, double height, const std::string& body, const std::string& caption);

}  // namespace scalelab
