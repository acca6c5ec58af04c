#include "runner/data/jinja/text.h"

#include "core/text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tailor::jinja {

// Well-formed as RFC 3629 says (no overlong forms, surrogates or values past
// U+10FFFF): core's sequence reader, which the tokenizers use too.
bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
    char32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::size_t count_code_points(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_py_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) return false;
  if (is_py_space(c)) return false;
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x206F)) return false;
  if (c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF)) return false;
  if (c >= 0xE0000 && c <= 0xE007F) return false;
  if (c == 0x061C || c == 0x180E || (c >= 0xF0000)) return false;
  return true;
}

// Case mapping beyond ASCII covers the scripts conversations commonly hold
// (Latin-1, Latin Extended-A, Greek, Cyrillic); other scripts are caseless
// or left as they are.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149) {
    const bool odd_pairs = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_pairs ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149) {
    const bool odd_pairs = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_pairs ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xC0 && c <= 0x24F) return c != 0xD7 && c != 0xF7;
  if (c >= 0x370 && c <= 0x52F) return true;
  if (c >= 0x3040 && c <= 0x9FFF) return c != 0x30FB;
  if (c >= 0xAC00 && c <= 0xD7A3) return true;
  if ((c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A) || (c >= 0x671 && c <= 0x6D3)) return true;
  if ((c >= 0x904 && c <= 0x939) || (c >= 0xE01 && c <= 0xE30)) return true;
  return false;
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_word_char(char32_t c) { return is_alpha(c) || is_digit(c) || c == '_'; }

std::string py_upper(std::string_view s) {
  std::string out;
  for (char32_t c : decode_utf8(s)) append_utf8(out, to_upper(c));
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  for (char32_t c : decode_utf8(s)) append_utf8(out, to_lower(c));
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : decode_utf8(s)) {
    append_utf8(out, first ? to_upper(c) : to_lower(c));
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : decode_utf8(s)) {
    const bool cased = to_upper(c) != c || to_lower(c) != c;
    append_utf8(out, prev_cased ? to_lower(c) : to_upper(c));
    prev_cased = cased;
  }
  return out;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars) {
  const std::u32string u = decode_utf8(s);
  auto strip_it = [&](char32_t c) {
    return chars == nullptr ? is_py_space(c) : chars->find(c) != std::u32string::npos;
  };
  std::size_t b = 0;
  std::size_t e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, long long maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    const std::u32string u = decode_utf8(s);
    std::size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
        // Python keeps the remainder's trailing whitespace.
        out.push_back(encode_utf8(std::u32string_view(u).substr(i)));
        return out;
      }
      std::size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      out.push_back(encode_utf8(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  std::size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) break;
    const std::size_t p = s.find(*sep, start);
    if (p == std::string_view::npos) break;
    out.emplace_back(s.substr(start, p - start));
    start = p + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long long maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep == nullptr) {
    const std::u32string u = decode_utf8(s);
    std::size_t e = u.size();
    while (e > 0) {
      while (e > 0 && is_py_space(u[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<long long>(out.size()) >= maxsplit) {
        // Python keeps the remainder's leading whitespace.
        out.push_back(encode_utf8(std::u32string_view(u).substr(0, e)));
        e = 0;
        break;
      }
      std::size_t b = e;
      while (b > 0 && !is_py_space(u[b - 1])) --b;
      out.push_back(encode_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    return {out.rbegin(), out.rend()};
  }
  std::size_t end = s.size();
  while (static_cast<long long>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const std::size_t p = s.rfind(*sep, end - sep->size());
    if (p == std::string_view::npos) break;
    out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
    end = p;
  }
  out.emplace_back(s.substr(0, end));
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string u = decode_utf8(s);
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < u.size()) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    std::size_t eol = i + 1;
    if (c == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
    out.push_back(encode_utf8(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) out.push_back(encode_utf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, long long count) {
  std::string out;
  if (from.empty()) {
    const std::u32string u = decode_utf8(s);
    long long n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::size_t start = 0;
  long long n = 0;
  while (count < 0 || n < count) {
    const std::size_t p = s.find(from, start);
    if (p == std::string_view::npos) break;
    out.append(s.substr(start, p - start));
    out.append(to);
    start = p + from.size();
    ++n;
  }
  out.append(s.substr(start));
  return out;
}

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_py_printable(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

// Python's repr(float): the shortest round-trip digits, positional for
// exponents in [-4, 16), scientific otherwise, always with a '.' or 'e'.
std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const std::size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp >= 16 || exp < -4) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) return sign + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  const auto int_len = static_cast<std::size_t>(exp + 1);
  if (digits.size() <= int_len) return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

}  // namespace tailor::jinja
