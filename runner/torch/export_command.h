// `tailor-runner export`: a trained model written as one Hugging Face folder
// with its adapter merged (LoRA folded into the base in fp32), in a chosen
// dtype, with the tokenizer's files and the chat template training used;
// what transformers, vLLM and llama.cpp's converter load. `tailor export`
// resolves a job id and runs it. Torch-free header.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tailor::runner {

// Exit codes, as `tailor-runner generate`'s: 0 done, 1 bad input (a
// folder, a format not built), 2 bad command line, 5 writing failed.
int run_export_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tailor::runner
