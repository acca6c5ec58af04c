// Small string helpers shared by every layer: trimming, case, joining and
// the "did you mean" suggestion used for unknown keys, presets and commands.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tailor {

std::string_view trim(std::string_view s);
std::string to_lower(std::string_view s);
std::string join(std::span<const std::string> parts, std::string_view sep);
std::vector<std::string> split(std::string_view s, char sep);
bool starts_with(std::string_view s, std::string_view prefix);
// n with a comma between groups of three digits, as messages count rows
// and records: 1234567 -> "1,234,567", -1234 -> "-1,234".
std::string group_thousands(long long n);
// s followed by spaces up to `width` bytes (table cells of ASCII text).
std::string pad_right(std::string s, std::size_t width);

// Damerau-Levenshtein (optimal string alignment) distance, case-insensitive.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is plausibly a typo of it (distance
// at most a third of the word's length, minimum 1, or one is a prefix of the
// other); empty otherwise.
std::string closest_match(std::string_view word, std::span<const std::string> candidates);

// Quotes a value for messages: "abc" with control characters escaped and the
// text cut at `max_chars` characters (a file path is never cut: pass
// kWhole, so that the message names the file however deep it lies).
inline constexpr std::size_t kWhole = static_cast<std::size_t>(-1);
std::string quote(std::string_view s, std::size_t max_chars = 60);

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at
// s[i], or 0 where none does: a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate or a value past U+10FFFF.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// `s` with each ill-formed part replaced by U+FFFD, one per maximal subpart
// (Unicode 15, 3.9 "U+FFFD Substitution of Maximal Subparts"): what Rust's
// String::from_utf8_lossy gives, so Hugging Face tokenizers' decoded text.
std::string utf8_lossy(std::string_view s);

}  // namespace tailor
