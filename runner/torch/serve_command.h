// `tailor-runner serve`: a model kept loaded to answer OpenAI completions
// (completions.h) one at a time over its standard streams, for the HTTP
// front that `tailor serve` starts (daemon/serving). Torch-free header.
//
// The protocol, one JSON document a line:
//   out, once loaded: {"event": "ready", "model": NAME, "context": N,
//                      "vocab": V, "device": "cpu", "dtype": "fp32"}
//   in:  a request body of POST /v1/completions
//   out: {"status": 200|400|500|503, "body": <the response or the error>}
// It ends at the end of its input; loading errors go to stderr with exit 1.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tailor::runner {

// Exit codes, as `tailor-runner generate`'s: 0 input ended, 1 bad input
// (the folder), 2 bad command line.
int run_serve_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace tailor::runner
