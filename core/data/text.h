#pragma once
// Text for a GPT: a corpus read as character or byte tokens and cut into samples of T tokens.
//
// A sample is a window of T + 1 consecutive tokens: x holds the first T, y the last T (x shifted by
// one), so position t learns to predict the token after x[t]. The windows do not overlap. In a
// Dataset, x is `features` = T floats holding token ids (exact integers below 2^24), and the T
// targets are its labels (`labels_per_sample` = T, `classes` = the vocabulary).
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace scalelab {

// Two tokenizers, picked by the model's vocabulary V:
//   V = 96  characters: '\n' → 0, ' ' … '~' → 1 … 95 (printable ASCII). A tab, '\r', '\v' and '\f'
//           read as a space; any other byte (a control character, DEL, a byte of a UTF-8 sequence)
//           reads as '?' and is counted as replaced. One byte is always one token.
//   V ≥ 256 bytes: the token is the byte, 0 … 255 (V up to 2^24, where token ids stop being exact floats).
enum class TextTokenizer { chars, bytes };
constexpr int64_t kCharVocab = 96;
constexpr int64_t kByteVocab = 256;

// The tokenizer for vocabulary `vocab`; any other V is a UsageError naming --model's V and the two choices.
TextTokenizer text_tokenizer(int64_t vocab);

// One byte as a character token (V = 96); `replaced` is set when the byte had no token of its own.
int32_t char_token(unsigned char byte, bool* replaced = nullptr);
// The character a token stands for ('\n', or ' ' … '~'); throws Error("data", …) outside [0, 96).
char token_char(int32_t token);

// One token per byte of `text`; `replaced` (when given) receives how many bytes became '?' or ' '
// for want of a character token (V = 96; 0 for bytes, tabs not counted).
std::vector<int32_t> encode_text(const std::string& text, int64_t vocab, int64_t* replaced = nullptr);
// The text of `tokens` (what a model's samples read as); throws on a token outside the vocabulary's
// characters (V = 96) or bytes (V ≥ 256: tokens ≥ 256 have no text).
std::string decode_text(const std::vector<int32_t>& tokens, int64_t vocab);

// The window rule, from the corpus's token count (one token per byte of text):
//   windows = tokens / (context + 1), the tokens after the last whole window unused;
//   test    = windows / 10, at least 1 when there are 2 or more windows (the last ones, in corpus order);
//   train   = windows − test.
int64_t text_windows(int64_t tokens, int64_t context);
int64_t text_test_windows(int64_t windows);

// What load_text read.
struct TextStats {
  int64_t files = 0;           // text files read
  int64_t skipped_binary = 0;  // files in a directory skipped as binary (a NUL byte among the first 8 KiB)
  int64_t tokens = 0;          // tokens of the corpus (= its bytes of text, gunzipped)
  int64_t replaced = 0;        // bytes read as '?' or ' ' by the character tokenizer; -1 when not read (values = false)
  int64_t unused = 0;          // tokens after the last whole window
};

// The corpus at `path`: a text file, or a directory whose text files are read recursively in sorted
// path order and joined. Files may be gzipped. In a directory, names starting with '.' are skipped
// (a .git), each file is read once however many links name it, and binary files (a NUL byte among
// their first 8 KiB, e.g. fortunes' .dat indexes) are skipped. Errors name the path: missing, empty,
// binary (a file named alone), no text in a directory, or too short for one window of context + 1
// tokens. values = false (a dry run) reads no text: the counts come from the files' sizes (a gzipped
// file is inflated to count it, holding none of it) and the sets hold no values.
DataSplit load_text(const std::string& path, int64_t context, int64_t vocab, bool values = true,
                    TextStats* stats = nullptr);
std::string default_text_corpus();  // /usr/share/games/fortunes (apt-get install fortunes)

// A learnable token stream for any vocabulary (50257 included): a seeded cycle of up to 256 distinct
// tokens, each sample starting at a random place in it, and one token in eight replaced by a random
// one. The next token follows from the current one 7 times in 8, so a model's loss falls well below
// log V. values = false gives the sizes alone (a dry run).
DataSplit make_synthetic_tokens(int64_t train_count, int64_t test_count, int64_t context, int64_t vocab, uint64_t seed,
                                bool values = true);

}  // namespace scalelab
