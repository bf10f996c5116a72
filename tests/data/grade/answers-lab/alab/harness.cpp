// The test lab's harness: one compiled check and one that reads the answers file itself.
#include <cmath>

#include "lab.h"
#include "labs/common/verdict.h"

int main(int argc, char** argv) {
  return lab::graded_main(argc, argv, {
    {"twice", [](const lab::Args&) { lab::expect(twice(21) == 42, "twice(21)", "42", lab::str(twice(21))); }},
    {"harness_read", [](const lab::Args&) {
       const double b = lab::answer_number("bubble");
       lab::expect(std::fabs(7 * b - 3) <= 0.05, "bubble · 7", "3 ± 0.05", lab::str(7 * b));
     }},
  });
}
