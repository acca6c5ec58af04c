// Splits a template into tokens the way jinja2's lexer does under
// transformers' settings: trim_blocks, lstrip_blocks, no trailing newline
// kept, "-" and "+" whitespace control, comments and raw blocks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tailor::jinja {

enum class TokenKind {
  kData,         // template text, already whitespace-controlled
  kVarBegin,     // {{
  kVarEnd,       // }}
  kBlockBegin,   // {%
  kBlockEnd,     // %}
  kName,
  kString,       // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;
  int col = 1;
};

// Throws TemplateError (with line and column) on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace tailor::jinja
