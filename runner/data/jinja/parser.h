// Builds the syntax tree from tokens, following jinja2's grammar and
// operator precedence (parser.py).
#pragma once

#include <string_view>

#include "runner/data/jinja/ast.h"

namespace tailor::jinja {

// Throws TemplateError with line and column on a syntax error.
NodeList parse_template(std::string_view source);

}  // namespace tailor::jinja
