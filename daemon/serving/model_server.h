// `tailord serve MODEL` (what `tailor serve` runs): one model behind
// OpenAI's completions API, for lm-eval's local-completions client and other
// OpenAI clients:
//   POST /v1/completions  answered by the model process (completion_worker.h)
//   GET  /v1/models       the one model, with its context length
//   GET  /healthz         "ok" while the model process lives (no token)
// On loopback by default, where a token is optional; bound to another
// address only with --token-file (tailord's DATA/token, so the same token
// as its API), and then every request but /healthz needs "Authorization:
// Bearer TOKEN" (what OPENAI_API_KEY gives an OpenAI client). Host and
// Origin are checked as tailord checks them. Errors have OpenAI's shape,
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tailor::daemon {

extern const char* const kServeHelp;

// Runs until SIGINT, SIGTERM or SIGHUP (0), or until the model process ends
// (1); 2 for a bad command line, 1 when the model cannot be loaded or the
// address bound. Prints "serving NAME on http://ADDRESS:PORT/v1/completions"
// on `out` once it answers.
int run_model_server(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tailor::daemon
