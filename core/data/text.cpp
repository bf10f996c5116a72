#include "core/data/text.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/memory_ledger.h"
#include "core/proc/host_memory.h"
#include "core/rng.h"

namespace scalelab {

namespace fs = std::filesystem;

namespace {

// Token ids travel as floats in x: every integer below 2^24 is exact in a float.
constexpr int64_t kMaxExactTokenId = int64_t{1} << 24;
// How much of a file's start is looked at for a NUL byte (as git and grep decide "binary").
constexpr size_t kSniffBytes = 8192;
// The largest single file read.
constexpr int64_t kMaxFileBytes = int64_t{4} << 30;

bool looks_binary(const char* data, size_t n) {
  return std::find(data, data + std::min(n, kSniffBytes), '\0') != data + std::min(n, kSniffBytes);
}

std::string vocab_error(int64_t vocab) {
  if (vocab > kMaxExactTokenId)
    return "--model's vocabulary V = " + std::to_string(vocab) +
           " is above 2^24: token ids travel as floats, exact below 2^24 — pick a smaller V";
  return "--model's vocabulary V = " + std::to_string(vocab) +
         " has no text tokenizer: text is read as characters (V = 96: '\\n' and printable ASCII) or as bytes "
         "(V ≥ 256) — make the model's last number 96 or ≥ 256, or pass --dataset synthetic (any V)";
}

// The corpus's files in the order they are read: `path` itself, or the regular files under it
// (links followed to files, each real file once, names starting with '.' skipped), sorted.
std::vector<std::string> corpus_files(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found)
    throw Error("data", path + ": not found — apt-get install fortunes for the default corpus (" + default_text_corpus() +
                            "), pass --data-dir naming a text file or a directory of them, or pass --dataset synthetic");
  if (st.type() != fs::file_type::directory) return {path};
  std::vector<std::string> files;
  try {
    for (auto it = fs::recursive_directory_iterator(path); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      // Directories are walked; FIFOs, devices and dangling links are not text.
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
  } catch (const fs::filesystem_error& e) {
    throw Error("data", path + ": cannot be listed (" + e.code().message() + " at " + e.path1().string() +
                            ") — check the permissions of the corpus directory");
  }
  std::sort(files.begin(), files.end());
  // Each real file once, under its first name in order: fortunes' name.u8 links to name.
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const std::string& f : files) {
    const fs::path real = fs::canonical(f, ec);
    if (seen.insert(ec ? f : real.string()).second) unique.push_back(f);
  }
  return unique;
}

// A file's text length and whether it is binary, without holding it: the first 8 KiB are looked at,
// and a gzipped file is inflated through to count its bytes.
struct FileSize {
  int64_t bytes = 0;
  bool binary = false;
};

FileSize size_of_file(const std::string& path, int64_t on_disk) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error("data", path + ": cannot open — check its permissions");
  std::vector<char> buf(1 << 16);
  FileSize out;
  bool first = true;
  for (;;) {
    const int got = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (got < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw Error("data", path + ": a gzip file that is corrupt (" + msg + ") — decompress it again or remove it");
    }
    if (first) {
      out.binary = looks_binary(buf.data(), static_cast<size_t>(got));
      first = false;
      // A plain file's size is on the disk; only a gzipped one needs reading through.
      if (out.binary || gzdirect(f)) {
        out.bytes = on_disk;
        break;
      }
    }
    if (got == 0) break;
    out.bytes += got;
  }
  // A gzip stream that ends early reads as an end of file: gzclose says so (Z_BUF_ERROR).
  if (gzclose(f) != Z_OK)
    throw Error("data", path + ": a gzip file that ends early or is corrupt — decompress it again or remove it");
  return out;
}

// Refuses a corpus whose dataset would not fit in `cap` bytes: a byte of text becomes a float of x
// and an int of y.
void check_fits(const std::string& path, int64_t text_bytes, double cap) {
  const double need = static_cast<double>(text_bytes) * 9;
  if (cap > 0 && need > cap)
    throw Error("data", path + ": " + format_bytes(text_bytes) + " of text make a dataset of " +
                            format_bytes(static_cast<int64_t>(need)) + ", more than the " +
                            format_bytes(static_cast<int64_t>(cap)) +
                            " (half this machine's memory) a corpus may take — name a smaller file or directory");
}

std::string corpus_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() ? path : name;
}

// A set of `count` windows of context + 1 tokens, `window(i, w)` writing window i's tokens to w:
// x holds the first T of each, y the last T (each position's next token). No values: sizes alone.
template <typename Window>
Dataset token_windows(const std::string& name, int64_t count, int64_t context, int64_t vocab, bool values,
                      Window&& window) {
  Dataset d;
  d.name = name;
  d.count = count;
  d.features = context;
  d.classes = static_cast<int>(vocab);
  d.labels_per_sample = context;
  if (!values) return d;
  d.images.resize(static_cast<size_t>(count * context));
  d.labels.resize(static_cast<size_t>(count * context));
  std::vector<int32_t> w(static_cast<size_t>(context + 1));
  for (int64_t i = 0; i < count; ++i) {
    window(i, w.data());
    float* x = d.images.data() + i * context;
    int32_t* y = d.labels.data() + i * context;
    for (int64_t t = 0; t < context; ++t) {
      x[t] = static_cast<float>(w[static_cast<size_t>(t)]);
      y[t] = w[static_cast<size_t>(t + 1)];
    }
  }
  return d;
}

}  // namespace

TextTokenizer text_tokenizer(int64_t vocab) {
  if (vocab == kCharVocab) return TextTokenizer::chars;
  if (vocab >= kByteVocab && vocab <= kMaxExactTokenId) return TextTokenizer::bytes;
  throw UsageError("data", vocab_error(vocab));
}

int32_t char_token(unsigned char byte, bool* replaced) {
  if (replaced) *replaced = false;
  if (byte == '\n') return 0;
  if (byte >= ' ' && byte <= '~') return static_cast<int32_t>(byte - ' ') + 1;
  if (byte == '\t') return 1;  // a tab is a space (not counted: it is whitespace either way)
  if (replaced) *replaced = true;
  if (byte == '\r' || byte == '\v' || byte == '\f') return 1;  // whitespace: a CRLF line ends in a space
  return static_cast<int32_t>('?' - ' ') + 1;
}

char token_char(int32_t token) {
  if (token < 0 || token >= kCharVocab)
    throw Error("data", "character token " + std::to_string(token) + " is outside [0, 96) — decode it with the vocabulary that made it");
  return token == 0 ? '\n' : static_cast<char>(' ' + token - 1);
}

std::vector<int32_t> encode_text(const std::string& text, int64_t vocab, int64_t* replaced) {
  const TextTokenizer kind = text_tokenizer(vocab);
  std::vector<int32_t> tokens(text.size());
  int64_t count = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (kind == TextTokenizer::bytes) {
      tokens[i] = byte;
      continue;
    }
    bool r = false;
    tokens[i] = char_token(byte, &r);
    count += r ? 1 : 0;
  }
  if (replaced) *replaced = count;
  return tokens;
}

std::string decode_text(const std::vector<int32_t>& tokens, int64_t vocab) {
  const TextTokenizer kind = text_tokenizer(vocab);
  std::string text(tokens.size(), ' ');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (kind == TextTokenizer::chars) {
      text[i] = token_char(tokens[i]);
    } else {
      if (tokens[i] < 0 || tokens[i] >= kByteVocab)
        throw Error("data", "token " + std::to_string(tokens[i]) + " is not a byte (0 … 255): only byte tokens have text");
      text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
    }
  }
  return text;
}

int64_t text_windows(int64_t tokens, int64_t context) { return tokens / (context + 1); }

int64_t text_test_windows(int64_t windows) { return windows < 2 ? 0 : std::max<int64_t>(1, windows / 10); }

std::string default_text_corpus() { return "/usr/share/games/fortunes"; }

DataSplit load_text(const std::string& path, int64_t context, int64_t vocab, bool values, TextStats* stats) {
  const TextTokenizer kind = text_tokenizer(vocab);
  if (context < 1) throw UsageError("data", "a text window needs a context of ≥ 1 token, got " + std::to_string(context));
  const std::vector<std::string> files = corpus_files(path);
  const bool alone = files.size() == 1 && files[0] == path;  // a file named by itself, not found in a directory

  const double memory_cap = host_memory().bytes / 2;  // half of what this process may use (0: unknown)
  TextStats st;
  st.replaced = values ? 0 : -1;
  std::vector<unsigned char> tokens;  // every token of either tokenizer fits a byte
  for (const std::string& file : files) {
    const int64_t on_disk =
        check_regular_file(file, "data", kMaxFileBytes, "a corpus is text files (or a directory of them)");
    bool binary = false;
    int64_t bytes = 0;
    if (values) {
      const std::string text = read_maybe_gzipped(file, "data");
      binary = looks_binary(text.data(), text.size());
      if (!binary) {
        bytes = static_cast<int64_t>(text.size());
        check_fits(path, st.tokens + bytes, memory_cap);
        tokens.reserve(tokens.size() + text.size());
        for (char c : text) {
          const auto byte = static_cast<unsigned char>(c);
          bool r = false;
          tokens.push_back(kind == TextTokenizer::bytes ? byte : static_cast<unsigned char>(char_token(byte, &r)));
          st.replaced += r ? 1 : 0;
        }
      }
    } else {
      const FileSize size = size_of_file(file, on_disk);
      binary = size.binary;
      bytes = size.bytes;
    }
    if (binary) {
      if (alone)
        throw Error("data", file + ": a binary file (a NUL byte among its first 8 KiB), not text — name a text file or a directory of them");
      ++st.skipped_binary;
      continue;
    }
    if (alone && bytes == 0) throw Error("data", file + ": empty — a corpus needs text to train on");
    st.tokens += bytes;
    ++st.files;
  }
  if (st.tokens == 0)
    throw Error("data", path + ": holds no text (" + std::to_string(files.size()) + " files, " +
                            std::to_string(st.skipped_binary) + " of them binary) — name a text file or a directory of them");

  const int64_t windows = text_windows(st.tokens, context);
  if (windows == 0)
    throw Error("data", path + ": too short: " + std::to_string(st.tokens) + " tokens, and one window of context " +
                            std::to_string(context) + " needs " + std::to_string(context + 1) +
                            " — use a smaller context (the T of gpt:L-H-A-T-V) or a longer corpus");
  const int64_t test = text_test_windows(windows);
  st.unused = st.tokens - windows * (context + 1);
  if (stats) *stats = st;

  const std::string name = corpus_name(path);
  // Window i of a split that starts at window `first`: T + 1 tokens from (first + i)·(T + 1) on.
  auto split = [&](int64_t first, int64_t count) {
    return token_windows(name, count, context, vocab, values, [&](int64_t i, int32_t* w) {
      const unsigned char* src = tokens.data() + (first + i) * (context + 1);
      std::copy(src, src + context + 1, w);
    });
  };
  DataSplit s;
  s.train = split(0, windows - test);
  s.test = split(windows - test, test);
  return s;
}

DataSplit make_synthetic_tokens(int64_t train_count, int64_t test_count, int64_t context, int64_t vocab, uint64_t seed,
                                bool values) {
  if (train_count < 1 || test_count < 0 || context < 1)
    throw UsageError("data", "a synthetic token stream needs ≥ 1 training sample and a context of ≥ 1 token, got " +
                                 std::to_string(train_count) + " samples and context " + std::to_string(context));
  if (vocab < 2 || vocab > kMaxExactTokenId)
    throw UsageError("data", "--model's vocabulary V = " + std::to_string(vocab) +
                                 " is outside [2, 2^24] — token ids travel as floats, exact below 2^24; pick a V in that range");
  Rng rng(seed ^ 0x70c3e57a11ULL);
  // The cycle: up to 256 distinct tokens in a seeded order (all of them for V ≤ 256).
  const int64_t period = std::min<int64_t>(vocab, 256);
  std::vector<int32_t> cycle;
  std::set<int32_t> drawn;
  if (vocab <= 256) {
    for (int64_t v = 0; v < vocab; ++v) cycle.push_back(static_cast<int32_t>(v));
    for (int64_t i = period - 1; i > 0; --i)
      std::swap(cycle[static_cast<size_t>(i)], cycle[rng.below(static_cast<uint64_t>(i + 1))]);
  } else {
    while (static_cast<int64_t>(cycle.size()) < period) {
      const auto v = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
      if (drawn.insert(v).second) cycle.push_back(v);
    }
  }
  // Each window starts at a random place in the cycle; one token in eight is noise.
  auto make = [&](int64_t count) {
    return token_windows("synthetic-tokens", count, context, vocab, values, [&](int64_t, int32_t* w) {
      const uint64_t start = rng.below(static_cast<uint64_t>(period));
      for (int64_t t = 0; t <= context; ++t) {
        const bool noise = rng.below(8) == 0;
        w[t] = noise ? static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)))
                     : cycle[(start + static_cast<uint64_t>(t)) % static_cast<uint64_t>(period)];
      }
    });
  };
  DataSplit s;
  s.train = make(train_count);
  s.test = make(test_count);
  return s;
}

}  // namespace scalelab
