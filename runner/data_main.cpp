// tailor-data: what a job's data becomes before it trains. Torch-free (the
// data pipeline alone), so it starts at once; `tailor data` runs it.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "runner/data/preview.h"

namespace {

constexpr const char* kHelp = R"(usage: tailor data preview JOB.yaml [--n N] [--output text|json] [--set KEY=VALUE]...
                           [--color auto|always|never]

Shows the first N examples of the job's data.train as tailor-runner reads
them: the text the tokenizer reads (a conversation rendered with the chat
template, or prompt and completion), with the trained text marked (green on a
terminal, between [[ and ]] otherwise), tokens and trained tokens per
example, tokens per role for conversations, and which examples are longer
than seq_len + 1 tokens (truncated or dropped, as data.on_long_example says).

options:
  --n N            examples to show (default 3)
  --output FORMAT  text (default) or json: per example its record, text,
                   input_ids, labels (-100 where not trained), tokens,
                   trained_tokens, role_tokens and too_long
  --set KEY=VALUE  override a spec value (repeatable), as tailor plan does
  --color WHEN     auto (default: on a terminal), always or never
  -h, --help       this help

exit codes: 0 ok, 1 invalid spec or data, 2 bad command line
)";

int usage(const std::string& why) {
  std::cerr << "tailor data: " << why << "\n\n" << kHelp;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage("missing command (preview)");
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kHelp;
    return 0;
  }
  if (args[0] != "preview") return usage("unknown command '" + args[0] + "' (the command is preview)");
  std::string spec_file, output = "text", color = "auto";
  std::int64_t n = 3;
  tailor::dsl::LoadOptions opts;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return 0;
    } else if (a == "--n" || a == "--output" || a == "--set" || a == "--color") {
      const std::string* v = value();
      if (v == nullptr) return usage(a + " needs a value");
      if (a == "--n") {
        char* end = nullptr;
        const long long parsed = std::strtoll(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0' || parsed < 1 || parsed > 1000000) {
          return usage("--n must be a whole number from 1 to 1000000, got '" + *v + "'");
        }
        n = parsed;
      } else if (a == "--output") {
        if (*v != "text" && *v != "json") return usage("--output must be text or json, got '" + *v + "'");
        output = *v;
      } else if (a == "--color") {
        if (*v != "auto" && *v != "always" && *v != "never") {
          return usage("--color must be auto, always or never, got '" + *v + "'");
        }
        color = *v;
      } else {
        opts.overrides.push_back(*v);
      }
    } else if (!a.empty() && a[0] == '-') {
      return usage("unknown option " + a);
    } else if (spec_file.empty()) {
      spec_file = a;
    } else {
      return usage("one job spec at a time (got " + spec_file + " and " + a + ")");
    }
  }
  if (spec_file.empty()) return usage("missing the job spec (JOB.yaml)");
  // The spec as tailor validate reads it; the data is read below, example
  // by example, rather than checked whole first.
  opts.check_data = false;
  const tailor::dsl::LoadedSpec loaded = tailor::dsl::load_job_spec(spec_file, opts);
  if (!loaded.ok()) {
    std::cerr << loaded.diagnostics.to_string();
    return 1;
  }
  auto preview = tailor::runner::data::preview_data(*loaded.spec, n);
  if (!preview.is_ok()) {
    std::cerr << spec_file << ": error: " << preview.status().message() << "\n";
    return 1;
  }
  if (output == "json") {
    std::cout << tailor::runner::data::preview_json(*preview);
  } else {
    const bool colour = color == "always" || (color == "auto" && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr);
    std::cout << tailor::runner::data::preview_text(*preview, colour);
  }
  return 0;
}
