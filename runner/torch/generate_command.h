// `tailor-runner generate`: text from a trained model on this machine
// (generation.h over inference_model.h), streamed to the terminal or
// written as one JSON object. `tailor generate` resolves a job id and runs
// it. Torch-free header.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tailor::runner {

// Exit codes, as the `tailor` CLI's: 0 done, 1 bad input (a folder, a
// prompt, a sampling value), 2 bad command line, 5 generation failed.
int run_generate_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tailor::runner
