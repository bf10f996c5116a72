#pragma once
// `scalelab figure KIND --json FILE… --out F.svg`: the plots the dashboard does not draw, from
// JSON that scalelab itself wrote (`scalelab scale --json`, `scalelab bench comm --json`), each
// next to the formula the lecture gives for it. The slides' figures (slides/README.md).
#include <string>
#include <vector>

namespace scalelab {

struct FigureOptions {
  std::string kind;               // bubble | zero-memory | busbw | step-time
  std::vector<std::string> json;  // the input files
  std::string out;                // the SVG to write
};

int run_figure(const FigureOptions& options);

}  // namespace scalelab
