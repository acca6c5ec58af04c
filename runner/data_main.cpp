// tailor-data: what a job's data becomes before it trains. Torch-free (the
// data pipeline alone), so it starts at once; `tailor data` runs it.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "runner/cache_command.h"
#include "runner/data/file_io.h"
#include "runner/data/preview.h"
#include "runner/protocol/launch_env.h"

namespace {

constexpr const char* kHelp = R"(usage: tailor data preview JOB.yaml [--n N] [--output text|json] [--set KEY=VALUE]...
                           [--color auto|always|never]
       tailor data stats JOB.yaml [--max-examples N] [--output text|json] [--set KEY=VALUE]...

preview shows the first N examples of the job's data.train as tailor-runner
reads them: the text the tokenizer reads (a conversation rendered with the
chat template, or prompt and completion), with the trained text marked
(green on a terminal, between [[ and ]] otherwise), tokens and trained
tokens per example, tokens per role for conversations, and which examples
are longer than seq_len + 1 tokens (truncated or dropped, as
data.on_long_example says).

stats reads every example (up to --max-examples) and gives their number,
tokens and trained tokens, tokens per example (min, p50, p90, p99, max) and
how many are longer than seq_len + 1; tailor plan reports the same.

With several datasets (data.train a list), both read each one's examples
in turn, before they are mixed; records are named by file and line, or by
file and row for Parquet and Arrow data.

options:
  --n N              preview: examples to show (default 3)
  --max-examples N   stats: examples to read at most (default 100000)
  --output FORMAT    text (default) or json: for preview, per example its
                     record, text, input_ids, labels (-100 where not
                     trained), tokens, trained_tokens, role_tokens and
                     too_long; for stats, the figures above
  --set KEY=VALUE    override a spec value (repeatable), as tailor plan does
  --color WHEN       preview: auto (default: on a terminal), always or never
  -h, --help         this help

exit codes: 0 ok, 1 invalid spec or data, 2 bad command line
)";

int usage(const std::string& why) {
  std::cerr << "tailor data: " << why << "\n\n" << kHelp;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage("missing command (preview or stats)");
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kHelp;
    return 0;
  }
  const std::string command = args[0];
  // `tailor cache`: the cache folder, not a job's data.
  if (command == "cache")
    return tailor::runner::run_cache_command({args.begin() + 1, args.end()}, std::cout, std::cerr);
  if (command != "preview" && command != "stats") {
    return usage("unknown command '" + command + "' (the commands are preview and stats)");
  }
  std::string spec_file, output = "text", color = "auto";
  std::int64_t n = 3, max_examples = 100000;
  tailor::dsl::LoadOptions opts;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return 0;
    } else if (a == "--n" || a == "--max-examples" || a == "--output" || a == "--set" || a == "--color") {
      const std::string* v = value();
      if (v == nullptr) return usage(a + " needs a value");
      if ((a == "--n" || a == "--color") && command != "preview") return usage(a + " is preview's, not stats'");
      if (a == "--max-examples" && command != "stats") return usage(a + " is stats', not preview's");
      if (a == "--n" || a == "--max-examples") {
        char* end = nullptr;
        const long long parsed = std::strtoll(v->c_str(), &end, 10);
        const long long most = a == "--n" ? 1000000 : 100000000;
        if (v->empty() || *end != '\0' || parsed < 1 || parsed > most) {
          return usage(a + " must be a whole number from 1 to " + std::to_string(most) + ", got '" + *v + "'");
        }
        (a == "--n" ? n : max_examples) = parsed;
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
  // Run by tailord (the web UI's data preview): the files the spec names
  // are read only from inside its spec root, as tailor-runner reads them.
  if (const char* root = std::getenv(tailor::runner::kSpecRootEnv)) {
    if (tailor::Status s = tailor::runner::data::set_read_root(root); !s.is_ok()) {
      std::cerr << "tailor data: " << tailor::runner::kSpecRootEnv << ": " << s.message() << "\n";
      return 1;
    }
  }
  // The spec as tailor validate reads it; the data is read below, example
  // by example, rather than checked whole first.
  opts.check_data = false;
  const tailor::dsl::LoadedSpec loaded = tailor::dsl::load_job_spec(spec_file, opts);
  if (!loaded.ok()) {
    std::cerr << loaded.diagnostics.to_string();
    return 1;
  }
  if (command == "stats") {
    auto stats = tailor::runner::data::data_stats(*loaded.spec, max_examples);
    if (!stats.is_ok()) {
      std::cerr << spec_file << ": error: " << stats.status().message() << "\n";
      return 1;
    }
    std::cout << (output == "json" ? tailor::runner::data::stats_json(*stats) : tailor::runner::data::stats_text(*stats));
    return 0;
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
