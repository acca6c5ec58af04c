// The engine's public face: a parsed template and its rendering. Errors are
// Status values naming the template position and the construct; nothing
// thrown inside the engine leaves it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runner/data/jinja/ast.h"
#include "runner/data/jinja/value.h"

namespace tailor::jinja {

// Hostile or broken templates end in an error at these bounds, never in a
// crash or an endless render.
struct RenderLimits {
  std::size_t max_output_bytes = std::size_t{64} << 20;
  int max_call_depth = 200;                       // nested macro calls
  std::int64_t max_loop_iterations = 10'000'000;  // all loops of one render together
};

// Where one {% generation %} block's output went, as transformers'
// AssistantTracker records it: offsets into the rendered text counted from
// the top-level output emitted so far.
struct GenerationSpan {
  std::size_t begin_chars = 0;  // code points, as Python counts
  std::size_t end_chars = 0;
  std::size_t begin_bytes = 0;  // UTF-8 bytes into the rendered string
  std::size_t end_bytes = 0;
};

struct RenderOutput {
  std::string text;
  std::vector<GenerationSpan> generation_spans;
};

// Immutable once parsed: one Template may render on several threads at once.
class Template {
 public:
  // `name` prefixes every error: "<name> 12:5: unknown filter 'foo'".
  static Result<Template> parse(std::string_view source, std::string name = "chat template");

  // `variables` are the names the template sees besides the globals
  // (range, dict, namespace, raise_exception, strftime_now).
  Result<RenderOutput> render(const DictObj& variables, const RenderLimits& limits = {}) const;

 private:
  Template(std::shared_ptr<const NodeList> body, std::string name) : body_(std::move(body)), name_(std::move(name)) {}
  std::shared_ptr<const NodeList> body_;
  std::string name_;
};

}  // namespace tailor::jinja
