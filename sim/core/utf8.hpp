#pragma once
// UTF-8 validity of input text (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF). Every YAML and CSV input is checked once at load,
// so names reach the JSON writers (which refuse invalid UTF-8) only valid.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace parmsim {

// The offset of the first byte that does not start or continue a valid
// UTF-8 sequence, or nullopt when `s` is valid.
inline std::optional<std::size_t> utf8_error(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + static_cast<std::size_t>(len) > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if (p[i + static_cast<std::size_t>(k)] < 0x80 || p[i + static_cast<std::size_t>(k)] > 0xBF) return i;
    i += static_cast<std::size_t>(len);
  }
  return std::nullopt;
}

// "LINE:COL" (1-based, columns in bytes) of offset `pos` in `text`.
inline std::string text_position(std::string_view text, std::size_t pos) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

}  // namespace parmsim
