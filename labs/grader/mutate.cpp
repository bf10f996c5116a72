#include "labs/grader/mutate.h"
namespace scalelab::grade {
std::vector<Mutation> mutations(const std::string&, const std::string&) { return {}; }
}  // namespace scalelab::grade
