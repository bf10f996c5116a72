#pragma once
// A forward-only JSON scanner over text in memory, for reading large traces: the trace reader pulls
// the values it wants (an event's fields) and skips the rest, with no document tree in between —
// a DOM of a 1M-event trace is gigabytes and most of the time of opening it. It checks the syntax
// of all it reads or skips; an error says where (byte offset) and what it expected.
#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace scalelab::detail {

struct JsonSyntaxError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JsonScanner {
 public:
  enum class Kind { object, array, string, number, boolean, null };

  JsonScanner(const char* begin, const char* end) : begin_(begin), p_(begin), end_(end) {}

  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  const char* position() const { return p_; }
  bool at_end() {
    ws();
    return p_ == end_;
  }

  // The kind of the next value (without consuming it).
  [[gnu::always_inline]] Kind peek() {
    ws();
    if (p_ == end_) fail("unexpected end of input");
    switch (*p_) {
      case '{': return Kind::object;
      case '[': return Kind::array;
      case '"': return Kind::string;
      case 't': case 'f': return Kind::boolean;
      case 'n': return Kind::null;
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return Kind::number;
        fail(std::string("unexpected character '") + *p_ + "'");
    }
  }

  // Objects and arrays: begin, then next_key / next_element until they return false.
  void begin_object() { expect('{'); first_ = true; }
  void begin_array() { expect('['); first_ = true; }
  // The next key of the object being read (its value follows), or false at its end.
  [[gnu::always_inline]] bool next_key(std::string_view& key) {
    ws();
    if (p_ < end_ && *p_ == '}') { ++p_; first_ = false; return false; }
    if (!first_) expect(',');
    first_ = false;
    key = string();
    expect(':');
    return true;
  }
  bool next_element() {
    ws();
    if (p_ < end_ && *p_ == ']') { ++p_; first_ = false; return false; }
    if (!first_) expect(',');
    first_ = false;
    return true;
  }

  // A string; the view lives until the next call (escapes are decoded into a scratch buffer).
  std::string_view string() {
    expect('"');
    const char* start = p_;
    while (p_ < end_ && *p_ != '"' && *p_ != '\\') {
      if (static_cast<unsigned char>(*p_) < 0x20) fail("control character in a string");
      ++p_;
    }
    if (p_ == end_) fail("unterminated string");
    if (*p_ == '"') return std::string_view(start, static_cast<size_t>(p_++ - start));
    scratch_.assign(start, p_);
    while (true) {
      if (p_ == end_) fail("unterminated string");
      const char c = *p_++;
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') { scratch_ += c; continue; }
      if (p_ == end_) fail("unterminated string");
      switch (const char e = *p_++) {
        case '"': case '\\': case '/': scratch_ += e; break;
        case 'b': scratch_ += '\b'; break;
        case 'f': scratch_ += '\f'; break;
        case 'n': scratch_ += '\n'; break;
        case 'r': scratch_ += '\r'; break;
        case 't': scratch_ += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair: one code point in two escapes
            if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') fail("lone surrogate in a string");
            p_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair in a string");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(cp);
          break;
        }
        default: fail("bad escape in a string");
      }
    }
    return scratch_;
  }

  double number() {
    ws();
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("expected a number");
    if (*p_ == '0') ++p_;
    else while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    bool integral = true;
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("expected a digit after '.'");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') fail("expected a digit in an exponent");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (integral && p_ - start <= 18) {  // the common case, exact and fast
      int64_t v = 0;
      std::from_chars(start, p_, v);
      return static_cast<double>(v);
    }
    double v = 0;
    std::from_chars(start, p_, v);
    return v;
  }
  // An integer field: a number, truncated if it has a fraction (as nlohmann's get<int64_t>).
  int64_t integer() {
    ws();
    const char* start = p_;
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(start, end_, v);
    if (ec == std::errc() && (ptr == end_ || (*ptr != '.' && *ptr != 'e' && *ptr != 'E'))) {
      p_ = ptr;
      return v;
    }
    return static_cast<int64_t>(number());
  }

  // Skips one value of any kind, checking its syntax.
  void skip() {
    switch (peek()) {
      case Kind::object: {
        begin_object();
        std::string_view k;
        while (next_key(k)) skip();
        break;
      }
      case Kind::array:
        begin_array();
        while (next_element()) skip();
        break;
      case Kind::string: string(); break;
      case Kind::number: number(); break;
      case Kind::boolean: boolean(); break;
      case Kind::null: literal("null"); break;
    }
    first_ = false;
  }

  bool boolean() {
    ws();
    if (p_ < end_ && *p_ == 't') { literal("true"); return true; }
    literal("false");
    return false;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw JsonSyntaxError("at byte " + std::to_string(offset()) + ": " + what);
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
  bool first_ = true;  // the next element or key is the first of its container
  std::string scratch_;

  [[gnu::always_inline]] void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  [[gnu::always_inline]] void expect(char c) {
    ws();
    if (p_ == end_ || *p_ != c) [[unlikely]] expected(c);
    ++p_;
  }
  [[noreturn, gnu::noinline]] void expected(char c) const {
    if (p_ == end_) fail(std::string("unexpected end of input, expected '") + c + "'");
    fail(std::string("expected '") + c + "', found '" + *p_ + "'");
  }
  void literal(std::string_view word) {
    ws();
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      fail("expected " + std::string(word));
    p_ += word.size();
  }
  uint32_t hex4() {
    if (end_ - p_ < 4) fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return v;
  }
  void utf8(uint32_t cp) {
    if (cp < 0x80) {
      scratch_ += static_cast<char>(cp);
    } else if (cp < 0x800) {
      scratch_ += static_cast<char>(0xC0 | (cp >> 6));
      scratch_ += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      scratch_ += static_cast<char>(0xE0 | (cp >> 12));
      scratch_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      scratch_ += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      scratch_ += static_cast<char>(0xF0 | (cp >> 18));
      scratch_ += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      scratch_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      scratch_ += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
};

}  // namespace scalelab::detail
