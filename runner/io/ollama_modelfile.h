// An Ollama Modelfile for a GGUF export: FROM the file beside it, TEMPLATE
// (data/ollama_template.h), PARAMETER stop and the model folder's sampling
// defaults, so `ollama create NAME -f FILE` takes it as it is. Written as
// Ollama's parser (parser/parser.go) reads it: a relative FROM is read from
// the Modelfile's folder, a value in """ may hold line breaks but never
// """, and the parser drops control characters other than tabs and line
// breaks, so text holding them is refused rather than changed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tailor::runner::io {

struct Modelfile {
  std::vector<std::string> comments;                            // "# " lines at the top
  std::string from;                                             // the GGUF file, as FROM names it
  std::string template_text;                                    // TEMPLATE; empty: none (Ollama picks its own)
  std::vector<std::pair<std::string, std::string>> parameters;  // PARAMETER name value, in order
};

// InvalidArgument naming the field whose text the parser would not read
// back as written.
Result<std::string> modelfile_text(const Modelfile& m);

// generation_config.json of `folder` as Ollama's sampling parameters:
// temperature (0 when do_sample is false), top_p, top_k, min_p, repeat_penalty
// (repetition_penalty), each only when the file sets it; none without the
// file.
std::vector<std::pair<std::string, std::string>> ollama_sampling_parameters(const std::string& folder);

}  // namespace tailor::runner::io
