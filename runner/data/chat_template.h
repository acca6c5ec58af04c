// Chat templates rendered as transformers' apply_chat_template renders them
// (jinja2 with trim_blocks and lstrip_blocks, transformers' tojson,
// raise_exception, strftime_now and {% generation %} tracking), by the
// project's own engine in runner/data/jinja/.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runner/data/jinja/template.h"

namespace tailor::runner::data {

// Objects keep their key order: templates iterate messages' and tools'
// keys, and Python dicts are ordered.
using ChatJson = nlohmann::ordered_json;

struct ChatInput {
  ChatJson messages = ChatJson::array();  // [{role, content (string or list of parts), ...}]
  ChatJson tools;                         // null: no tools (the template sees `tools` as none)
  ChatJson documents;                     // null: none
  bool add_generation_prompt = false;
  // Further names the template sees: bos_token, eos_token, enable_thinking...
  ChatJson variables = ChatJson::object();
};

struct RenderedChat {
  std::string text;
  // Each {% generation %} block's output, in the order rendered.
  std::vector<jinja::GenerationSpan> generation_spans;
};

class ChatTemplate {
 public:
  // A syntax error names line:column: "chat template 12:5: ...".
  static Result<ChatTemplate> parse(std::string_view source);

  Result<RenderedChat> render(const ChatInput& input, const jinja::RenderLimits& limits = {}) const;

 private:
  explicit ChatTemplate(jinja::Template t) : template_(std::move(t)) {}
  jinja::Template template_;
};

// Parses and renders in one step.
Result<RenderedChat> render_chat_template(std::string_view source, const ChatInput& input);

// `j` as Python's json.dumps(j, ensure_ascii=False) writes it (", " and
// ": " between items, key order kept): how vLLM and transformers write a
// tool call's arguments. InvalidArgument for what Python could not hold
// (nesting past 256 levels, text that is not UTF-8).
Result<std::string> python_json_dumps(const ChatJson& j);

}  // namespace tailor::runner::data
