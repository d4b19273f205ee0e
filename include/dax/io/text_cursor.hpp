// A cursor over the small texts dax's files carry (a .npy header's Python dict, a sidecar's JSON):
// whitespace skipping, single-character tokens, quoted strings and digits, with errors that name
// the byte where the text went wrong. The .npy and sidecar readers add their own values on top.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <dax/core/error.hpp>

namespace dax::detail::io {

/// A byte as text for messages: itself when printable, \xNN otherwise.
inline std::string printable(std::string_view bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else if (c == '\\') out += "\\\\";
    else out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  }
  return out;
}

class TextCursor {
 public:
  /// `base` is the text's offset in its file (messages count from the file's start); `end_name`
  /// what the end is called in messages ("the end", "the header's end").
  TextCursor(std::string_view text, size_t base, const char* end_name)
      : text_(text), base_(base), end_name_(end_name) {}

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r'))
      ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  [[noreturn]] void unexpected(const char* wanted) {
    if (at_end()) fail("expected ", wanted, " at byte ", base_ + pos_, ", found ", end_name_);
    fail("expected ", wanted, " at byte ", base_ + pos_, ", found '", printable(text_.substr(pos_, 1)), "'");
  }
  void expect(char c, const char* wanted) {
    if (peek() != c) unexpected(wanted);
    ++pos_;
  }
  bool accept(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  /// A string in one of the `quotes` characters, without escapes or line breaks.
  std::string string(std::string_view quotes) {
    const char quote = peek();
    if (quote == '\0' || quotes.find(quote) == std::string_view::npos) unexpected("a string");
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' || text_[pos_] == '\n') fail("unsupported character in a string at byte ", base_ + pos_);
      ++pos_;
    }
    if (pos_ == text_.size()) fail("unterminated string starting at byte ", base_ + start - 1);
    return std::string(text_.substr(start, pos_++ - start));
  }
  /// A run of decimal digits (at least one, else `wanted` is reported missing).
  int64_t digits(const char* wanted) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') unexpected(wanted);
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      DAX_CHECK(v <= (INT64_MAX - 9) / 10, wanted, " does not fit in 64 bits");
      v = v * 10 + (text_[pos_++] - '0');
    }
    return v;
  }

 protected:
  std::string_view text_;
  size_t pos_ = 0;

 private:
  size_t base_;
  const char* end_name_;
};

}  // namespace dax::detail::io
