#include "runner/data/jinja/lexer.h"

#include <algorithm>

#include "runner/data/jinja/text.h"
#include "runner/data/jinja/value.h"

namespace tailor::jinja {
namespace {

// jinja2 3.x treats only \n, \r\n and \r as line breaks, normalises them to
// \n, and (keep_trailing_newline=False) drops one final newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the Python-whitespace run (regex \s*) starting at pos.
std::size_t whitespace_run(const std::string& s, std::size_t pos) {
  std::size_t i = pos;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (!is_ascii_space(s[i]) && !(c >= 0x1C && c <= 0x1F)) break;
      ++i;
      continue;
    }
    // Multi-byte: decode one code point.
    std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    const std::u32string cp = decode_utf8(std::string_view(s).substr(i, len));
    if (cp.empty() || !is_py_space(cp[0])) break;
    i += len;
  }
  return i - pos;
}

bool all_whitespace(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t c : decode_utf8(s)) {
    if (!is_py_space(c)) return false;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    std::size_t pos = 0;
    while (pos < src_.size()) {
      std::size_t p = pos;
      while (true) {
        p = src_.find('{', p);
        if (p == std::string::npos || p + 1 >= src_.size()) {
          p = std::string::npos;
          break;
        }
        const char n = src_[p + 1];
        if (n == '{' || n == '%' || n == '#') break;
        ++p;
      }
      if (p == std::string::npos) {
        emit(TokenKind::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[p + 1];
      std::size_t after = p + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(after, &raw_end);
      std::string text = src_.substr(pos, p - pos);
      text = control_whitespace(text, sign, kind != '{', line_starting);
      if (!text.empty()) emit(TokenKind::kData, text, pos);
      if (kind == '#') {
        pos = skip_comment(after, p, &line_starting);
      } else if (raw) {
        line_starting = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, p, &line_starting);
      } else {
        pos = lex_tag(kind == '{', p, after, &line_starting);
      }
    }
    tokens_.push_back(Token{TokenKind::kEof, "", line_of(src_.size()), col_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(std::size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    return static_cast<int>(it - line_starts_.begin());
  }
  int col_of(std::size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    return static_cast<int>(offset - *(it - 1)) + 1;
  }

  [[noreturn]] void fail(const std::string& msg, std::size_t offset) const {
    TemplateError e(msg);
    e.line = line_of(offset);
    e.col = col_of(offset);
    throw e;
  }

  void emit(TokenKind kind, std::string text, std::size_t offset) {
    tokens_.push_back(Token{kind, std::move(text), line_of(offset), col_of(offset)});
  }

  // The text before a tag: "-" strips all whitespace before it; otherwise
  // lstrip_blocks removes the indentation of a block or comment tag that is
  // alone at the start of its line.
  static std::string control_whitespace(const std::string& text, char sign, bool lstrip_kind, bool line_starting) {
    if (sign == '-') return py_strip(text, false, true, nullptr);
    if (sign == '+' || !lstrip_kind) return text;
    const std::size_t nl = text.rfind('\n');
    const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && all_whitespace(std::string_view(text).substr(l_pos))) {
      return text.substr(0, l_pos);
    }
    return text;
  }

  // {%(-|+|)\s*raw\s*(-%}\s*|%})
  bool match_raw_begin(std::size_t after, std::size_t* end) const {
    std::size_t i = after + whitespace_run(src_, after);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += whitespace_run(src_, i);
    if (src_.compare(i, 3, "-%}") == 0) {
      i += 3;
      *end = i + whitespace_run(src_, i);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      *end = i + 2;
      return true;
    }
    return false;
  }

  std::size_t skip_comment(std::size_t after, std::size_t start, bool* line_starting) {
    for (std::size_t q = after; q < src_.size(); ++q) {
      std::size_t end = 0;
      if (src_.compare(q, 3, "+#}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-#}") == 0) {
        end = q + 3;
        end += whitespace_run(src_, end);
      } else if (src_.compare(q, 2, "#}") == 0) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail("Missing end of comment tag", start);
  }

  std::size_t lex_raw(std::size_t body, std::size_t start, bool* line_starting) {
    for (std::size_t q = body; q + 1 < src_.size(); ++q) {
      if (src_[q] != '{' || src_[q + 1] != '%') continue;
      std::size_t i = q + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i += whitespace_run(src_, i);
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      i += whitespace_run(src_, i);
      std::size_t end = 0;
      if (src_.compare(i, 3, "+%}") == 0) {
        end = i + 3;
      } else if (src_.compare(i, 3, "-%}") == 0) {
        end = i + 3;
        end += whitespace_run(src_, end);
      } else if (src_.compare(i, 2, "%}") == 0) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = control_whitespace(src_.substr(body, q - body), sign, true, *line_starting);
      if (!text.empty()) emit(TokenKind::kData, text, body);
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail("Missing end of raw directive", start);
  }

  // Inside {{ }} or {% %}: the end tag is only recognised while brackets
  // are balanced, so "{{ {'a': 1}}}" works as in jinja2.
  std::size_t lex_tag(bool variable, std::size_t start, std::size_t pos, bool* line_starting) {
    emit(variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, variable ? "{{" : "{%", start);
    std::vector<char> balance;
    while (true) {
      if (pos >= src_.size()) fail(variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", start);
      if (balance.empty()) {
        std::size_t end = 0;
        if (variable) {
          if (src_.compare(pos, 3, "-}}") == 0) {
            end = pos + 3;
            end += whitespace_run(src_, end);
          } else if (src_.compare(pos, 2, "}}") == 0) {
            end = pos + 2;
          }
        } else {
          if (src_.compare(pos, 3, "+%}") == 0) {
            end = pos + 3;
          } else if (src_.compare(pos, 3, "-%}") == 0) {
            end = pos + 3;
            end += whitespace_run(src_, end);
          } else if (src_.compare(pos, 2, "%}") == 0) {
            end = pos + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;
          }
        }
        if (end != 0) {
          emit(variable ? TokenKind::kVarEnd : TokenKind::kBlockEnd, variable ? "}}" : "%}", pos);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      const std::size_t ws = whitespace_run(src_, pos);
      if (ws > 0) {
        pos += ws;
        continue;
      }
      const char c = src_[pos];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t e = pos;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        emit(TokenKind::kName, src_.substr(pos, e - pos), pos);
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        bool found = false;
        for (const char* op : kOps) {
          const std::size_t len = std::char_traits<char>::length(op);
          if (src_.compare(pos, len, op) != 0) continue;
          const std::string o(op);
          if (o == "(" || o == "[" || o == "{") {
            balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
          } else if (o == ")" || o == "]" || o == "}") {
            if (balance.empty()) fail("unexpected '" + o + "'", pos);
            if (balance.back() != o[0]) fail("unexpected '" + o + "', expected '" + std::string(1, balance.back()) + "'", pos);
            balance.pop_back();
          }
          emit(TokenKind::kOperator, o, pos);
          pos += len;
          found = true;
          break;
        }
        if (!found) fail("unexpected char " + py_repr_string(std::string(1, c)) + " at " + std::to_string(pos), pos);
      }
    }
  }

  std::size_t digits(std::size_t pos) const {
    // (\d+_)*\d+
    std::size_t i = pos;
    while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) ++i;
    }
    return i;
  }

  std::size_t lex_number(std::size_t pos) {
    const std::size_t int_end = digits(pos);
    std::size_t e = int_end;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text = src_.substr(pos, e - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? TokenKind::kFloat : TokenKind::kInteger, text, pos);
    return e;
  }

  // Python string-literal escapes, as jinja2 decodes them with
  // "unicode-escape".
  std::size_t lex_string(std::size_t pos) {
    const char quote = src_[pos];
    std::string out;
    std::size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) fail("unexpected char " + py_repr_string(std::string(1, quote)) + " at " + std::to_string(pos), pos);
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unterminated string", pos);
      const char e = src_[i + 1];
      i += 2;
      auto hex = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i]))) fail("truncated \\x escape in string", pos);
          const char h = src_[i++];
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': append_utf8(out, hex(4)); break;
        case 'U': {
          const char32_t v = hex(8);
          if (v > 0x10FFFF) fail("illegal Unicode character in string", pos);
          append_utf8(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) v = v * 8 + static_cast<char32_t>(src_[i++] - '0');
            append_utf8(out, v);
          } else {
            // Unknown escapes stay as written, as in Python.
            out.push_back('\\');
            --i;
          }
      }
    }
    emit(TokenKind::kString, out, pos);
    return i + 1;
  }

  std::string src_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace tailor::jinja
