#pragma once
#include <string>
#include <vector>
namespace scalelab::grade {
struct Mutation {
  std::string file;
  int line = 0;
  std::string kind, before, after, text;
};
std::vector<Mutation> mutations(const std::string& file, const std::string& source);
}  // namespace scalelab::grade
