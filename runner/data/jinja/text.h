// UTF-8 text helpers for the chat-template engine. Templates are Python
// programs in disguise: lengths, indices and slices count code points, and
// strip/split/upper follow Python's str, so these work on code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tailor::jinja {

// False for malformed UTF-8 (overlong, surrogates, truncated).
bool is_valid_utf8(std::string_view s);

std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
std::size_t count_code_points(std::string_view s);

// Python's str.isspace() for one code point.
bool is_py_space(char32_t c);
// Python's str.isprintable() for one code point (used by repr()).
bool is_py_printable(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_word_char(char32_t c);  // regex \w

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);  // str.title()
// chars empty and no_chars true: strip whitespace as str.strip() does.
std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars);
std::vector<std::string> py_split(std::string_view s, const std::string* sep, long long maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long long maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view from, std::string_view to, long long count);
std::string py_repr_string(std::string_view s);
std::string py_float_repr(double v);

}  // namespace tailor::jinja
