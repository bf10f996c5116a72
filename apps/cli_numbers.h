#pragma once
// Numbers on the command line are read as written, or refused naming the option. CLI11 (2.1) reads
// integers with strtoull / strtoll in base 0: for an unsigned option "-1" becomes 2^64 − 1, a value
// past 64 bits is clamped to the largest, "010" is octal 8 and "0x10" is 16 — all accepted
// silently. strict_numbers() gives every integer option of an app and its subcommands a check that
// the text is a whole number in decimal within 64 bits (an int option's narrower range is then
// CLI11's conversion's to refuse). It runs after an option's own transforms (a size such as 8M is
// checked as the bytes it stands for). A floating option is refused hexadecimal here; its range
// (nan and inf among them) is checked where it is used.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace scalelab {

// "" if `text` is a decimal whole number that fits 64 bits (signed or not), else why not.
inline std::string whole_number_error(const std::string& text, bool is_signed) {
  const std::string range = is_signed ? "-9223372036854775808 to 9223372036854775807" : "0 to 18446744073709551615";
  const size_t sign = !text.empty() && (text[0] == '+' || (is_signed && text[0] == '-')) ? 1 : 0;
  const std::string digits = text.substr(sign);
  if (!is_signed && !text.empty() && text[0] == '-')
    return text + " is negative — give a whole number from " + range;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    return text + " is not a whole number in decimal — write it with the digits 0-9 alone (no fraction, exponent, "
                  "0x or spaces)";
  if (digits.size() > 1 && digits[0] == '0')
    return text + " has a leading zero (read as octal, 010 would be 8) — write it without";
  errno = 0;
  if (is_signed) (void)std::strtoll(text.c_str(), nullptr, 10);
  else (void)std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return text + " is out of range — give a whole number from " + range;
  return "";
}

// A whole number ≥ `min` (CLI11's PositiveNumber and NonNegativeNumber print their bounds as
// 309-digit doubles). Text that is no number at all is left to the whole-number check.
inline CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        char* end = nullptr;
        const long double v = std::strtold(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !(v < static_cast<long double>(min))) return "";
        return text + " is below " + std::to_string(min) + " — give a whole number ≥ " + std::to_string(min);
      },
      min > 0 ? "POSITIVE" : "NONNEGATIVE");
}

// The kind of value an option takes: its type name before any validator's description ("INT",
// "UINT", "FLOAT", …); flags take none.
inline std::string option_kind(const CLI::Option& option) {
  if (option.get_type_size() == 0) return "";
  const std::string full = option.get_type_name();
  return full.substr(0, full.find(':'));
}

inline void strict_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string kind = option_kind(*option);
    if (kind == "INT" || kind == "UINT") {
      const bool is_signed = kind == "INT";
      option->check(CLI::Validator([is_signed](std::string& text) { return whole_number_error(text, is_signed); }, "",
                                   "whole-number"));
    } else if (kind == "FLOAT") {
      // strtod reads "0x10" as 16 too.
      option->check(CLI::Validator(
          [](std::string& text) {
            return text.find_first_of("xX") == std::string::npos
                       ? std::string()
                       : text + " is hexadecimal — write the number in decimal (e.g. 0.5, 1e-3)";
          },
          "", "decimal"));
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) strict_numbers(*sub);
}

}  // namespace scalelab
