#include "runner/torch/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "runner/data/text_stream.h"
#include "runner/torch/generation.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/model_command.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kGenerateHelp =
    R"(usage: tailor-runner generate MODEL [OPTIONS] (--prompt TEXT | --prompt-file FILE | --messages FILE | --prompt-ids IDS)

Generates text with a model on this machine: the completion is streamed to
stdout as it is produced and a summary goes to stderr, or, with --output
json, one JSON object is printed at the end. Adapters apply unmerged; the
KV cache holds the prompt and the tokens generated.

MODEL is a model folder (config.json + safetensors), a PEFT adapter folder
whose base_model_name_or_path is a folder here, or a run's output folder
(its model/, else its adapter/).

options:
  --adapter DIR        a PEFT adapter folder to apply over MODEL
  --prompt TEXT        plain text, framed as training framed a document
                       (the tokenizer's BOS first)
  --prompt-file FILE   the same, read from FILE ("-" reads stdin)
  --messages FILE      a conversation: a JSON list of {"role", "content"}
                       turns, or {"messages": [...], "tools": [...]}; it is
                       rendered with the model's chat template and its
                       generation prompt ("-" reads stdin)
  --prompt-ids IDS     token ids, comma-separated (no tokenizer needed)
  --max-tokens N       at most N new tokens (default 256; fewer where the
                       model's context ends)
  --temperature T      0 (default) is greedy; T > 0 samples from logits / T
  --top-p P            sample from the most likely tokens whose probability
                       reaches P, in (0, 1] (default 1)
  --top-k K            sample from the K most likely tokens (default 0: all)
  --min-p M            sample only from tokens at least M times as likely
                       as the most likely one (after top-k and top-p, as
                       transformers' min_p), in [0, 1] (default 0: off)
  --seed S             the sampler's seed (default 0): the same seed gives
                       the same tokens on the same device
  --repetition-penalty R
                       divide the positive logits (multiply the negative
                       ones) of every token in the prompt or generated so
                       far by R, as transformers' repetition_penalty does:
                       > 0, 1 (default) is off, 1.1-1.3 is usual
  --presence-penalty P subtract P from the logit of every token generated
                       so far, as OpenAI's presence_penalty: in [-2, 2],
                       default 0
  --frequency-penalty F
                       subtract F times the times each token was generated
                       so far, as OpenAI's frequency_penalty: in [-2, 2],
                       default 0
  --logit-bias ID=B    add B to token ID's logit before the penalties, as
                       OpenAI's logit_bias: B in [-100, 100] (-100 bans the
                       token, 100 all but forces it; repeatable)
  --stop-id ID         also stop at this token id (repeatable). Generation
                       stops at the model's EOS ids (generation_config.json,
                       config.json, the tokenizer) and at the token its chat
                       template ends an assistant turn with
  --device DEV         auto (default: CUDA device 0 where there is one, else
                       the CPU), cpu, cuda or cuda:N
  --dtype D            auto (default: the folder's torch_dtype on a GPU,
                       fp32 on the CPU), fp32, bf16 or fp16
  --threads N          intra-op threads (default: every core)
  --output FORMAT      text (default), json, or events: one JSON line a
                       token ({"event": "token", "id", "text"}), then the
                       json object with "event": "done" (what tailord relays)
  --quiet              no summary on stderr

exit codes: 0 done, 1 bad input, 2 bad command line, 5 generation failed
)";

Result<std::int64_t> integer_of(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return Status::invalid_argument("--" + flag + ": expected an integer, got \"" + text + "\"");
  }
  return static_cast<std::int64_t>(v);
}

Result<double> number_of(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return Status::invalid_argument("--" + flag + ": expected a number, got \"" + text + "\"");
  }
  return v;
}

Result<std::vector<std::int32_t>> ids_of(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    TAILOR_ASSIGN_OR_RETURN(const std::int64_t v, integer_of("prompt-ids", item));
    if (v < 0 || v > INT32_MAX) return Status::invalid_argument("--prompt-ids: " + item + " is not a token id");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  if (ids.empty()) return Status::invalid_argument("--prompt-ids: no ids given");
  return ids;
}

// A file's bytes, "-" for stdin.
Result<std::string> text_of_file(const std::string& flag, const std::string& path) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::invalid_argument(flag + ": cannot open " + path);
    ss << in.rdbuf();
  }
  return ss.str();
}

// A --messages file as a conversation record: the turns checked here, so
// that a mistake names the file and the turn rather than the template.
Result<std::string> conversation_of_file(const std::string& path) {
  TAILOR_ASSIGN_OR_RETURN(const std::string text, text_of_file("--messages", path));
  const Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::invalid_argument(path + ": not JSON");
  const Json record = parsed.is_array() ? Json{{"messages", parsed}} : parsed;
  if (Status s = check_conversation(record); !s.is_ok()) return Status::invalid_argument(path + ": " + s.message());
  return record.dump();
}

int fail(std::ostream& err, int code, const Status& s) {
  return ModelCommand{"generate", kGenerateHelp, err, err}.fail(code, s.message());
}

// The sampling flags; a flag that does not parse is InvalidArgument naming it
// (a usage error), check_sampling's ranges are the caller's.
Result<SamplingOptions> sampling_of(const Args& args) {
  SamplingOptions so;
  TAILOR_ASSIGN_OR_RETURN(so.max_new_tokens, integer_of("max-tokens", args.get("max-tokens", "256")));
  TAILOR_ASSIGN_OR_RETURN(so.temperature, number_of("temperature", args.get("temperature", "0")));
  TAILOR_ASSIGN_OR_RETURN(so.top_p, number_of("top-p", args.get("top-p", "1")));
  TAILOR_ASSIGN_OR_RETURN(so.top_k, integer_of("top-k", args.get("top-k", "0")));
  TAILOR_ASSIGN_OR_RETURN(const std::int64_t seed, integer_of("seed", args.get("seed", "0")));
  so.seed = static_cast<std::uint64_t>(seed);
  TAILOR_ASSIGN_OR_RETURN(so.repetition_penalty, number_of("repetition-penalty", args.get("repetition-penalty", "1")));
  TAILOR_ASSIGN_OR_RETURN(so.presence_penalty, number_of("presence-penalty", args.get("presence-penalty", "0")));
  TAILOR_ASSIGN_OR_RETURN(so.frequency_penalty, number_of("frequency-penalty", args.get("frequency-penalty", "0")));
  TAILOR_ASSIGN_OR_RETURN(so.min_p, number_of("min-p", args.get("min-p", "0")));
  for (const std::string& item : args.all("logit-bias")) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return Status::invalid_argument("--logit-bias: expected ID=BIAS (a token id and a number), got \"" + item + "\"");
    }
    TAILOR_ASSIGN_OR_RETURN(const std::int64_t id, integer_of("logit-bias", item.substr(0, eq)));
    TAILOR_ASSIGN_OR_RETURN(const double bias, number_of("logit-bias", item.substr(eq + 1)));
    if (id < 0 || id > INT32_MAX) return Status::invalid_argument("--logit-bias: " + item + ": not a token id");
    for (const auto& given : so.logit_bias) {
      if (given.first == id) {
        return Status::invalid_argument("--logit-bias: token " + std::to_string(id) + " is given twice");
      }
    }
    so.logit_bias.emplace_back(static_cast<std::int32_t>(id), bias);
  }
  for (const std::string& id : args.all("stop-id")) {
    TAILOR_ASSIGN_OR_RETURN(const std::int64_t v, integer_of("stop-id", id));
    so.stop_ids.push_back(static_cast<std::int32_t>(v));
  }
  return so;
}

// The prompt's ids from whichever of the four prompt flags was given.
Result<std::vector<std::int32_t>> prompt_of(const Args& args, const InferenceModel& model) {
  if (args.has("prompt")) return prompt_ids_of_text(model, args.get("prompt"));
  if (args.has("prompt-file")) {
    TAILOR_ASSIGN_OR_RETURN(const std::string text, text_of_file("--prompt-file", args.get("prompt-file")));
    return prompt_ids_of_text(model, text);
  }
  if (args.has("prompt-ids")) return ids_of(args.get("prompt-ids"));
  TAILOR_ASSIGN_OR_RETURN(const std::string conversation, conversation_of_file(args.get("messages")));
  return prompt_ids_of_conversation(model, conversation);
}

// Each new token as --output asks: text streamed as it is produced (ids
// where there is no tokenizer), one JSON line a token (events), or nothing
// until the end (json).
class TokenPrinter {
 public:
  TokenPrinter(std::ostream& out, const InferenceModel& model, const std::string& format)
      : out_(out), streaming_(format == "text"), events_(format == "events") {
    if (model.tokenizer) stream_.emplace(*model.tokenizer);
  }
  bool operator()(std::int32_t id) {
    if (events_) {
      // One JSON line a token (tailord relays them as server-sent events).
      Json e;
      e["event"] = "token";
      e["id"] = id;
      e["text"] = stream_ ? stream_->push(id) : std::string();
      out_ << e.dump() << "\n";
      out_.flush();
      return true;
    }
    if (!streaming_) return true;
    if (stream_) {
      out_ << stream_->push(id);
    } else {
      out_ << (first_ ? "" : " ") << id;
    }
    first_ = false;
    out_.flush();
    return true;
  }
  // The rest of the text and the line's end, when streaming.
  void finish() {
    if (!streaming_) return;
    if (stream_) out_ << stream_->finish();
    out_ << "\n";
    out_.flush();
  }

 private:
  std::ostream& out_;
  std::optional<data::TextStream> stream_;
  bool streaming_, events_, first_ = true;
};

double tokens_per_second(const Generated& generated) {
  const std::size_t n = generated.ids.size();
  return generated.decode_seconds > 0 ? static_cast<double>(n - 1) / generated.decode_seconds : 0.0;
}

// What was generated, as --output json prints it (events: the "done" line).
Json result_json(const ModelSources& sources, const InferenceDevice& device, const InferenceModel& model,
                 const std::vector<std::int32_t>& prompt, const Generated& generated, const SamplingOptions& so,
                 bool events) {
  const std::size_t n = generated.ids.size();
  Json j;
  if (events) j["event"] = "done";
  j["model"] = sources.base;
  j["adapter"] = sources.adapter.empty() ? Json() : Json(sources.adapter);
  j["device"] = device.name;
  j["dtype"] = model.dtype_name;
  j["prompt_tokens"] = prompt.size();
  j["completion_tokens"] = n;
  j["prompt_ids"] = prompt;
  j["ids"] = generated.ids;
  if (model.tokenizer) j["text"] = utf8_lossy(model.tokenizer->decode(generated.ids));
  j["finish_reason"] = generated.stopped ? "stop" : "length";
  j["stop_ids"] = so.stop_ids;
  j["prompt_seconds"] = generated.prompt_seconds;
  j["decode_seconds"] = generated.decode_seconds;
  j["tokens_per_second"] = tokens_per_second(generated);
  return j;
}

}  // namespace

int run_generate_command(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const ModelCommand command{"generate", kGenerateHelp, out, err};
  int exit_code = kModelCommandOk;
  const auto parsed = command.parse(argv,
                                    {{"adapter", true},
                                     {"prompt", true},
                                     {"prompt-file", true},
                                     {"messages", true},
                                     {"prompt-ids", true},
                                     {"max-tokens", true},
                                     {"temperature", true},
                                     {"top-p", true},
                                     {"top-k", true},
                                     {"seed", true},
                                     {"repetition-penalty", true},
                                     {"presence-penalty", true},
                                     {"frequency-penalty", true},
                                     {"min-p", true},
                                     {"logit-bias", true, true},
                                     {"stop-id", true, true},
                                     {"device", true},
                                     {"dtype", true},
                                     {"threads", true},
                                     {"output", true},
                                     {"quiet", false}},
                                    exit_code);
  if (!parsed) return exit_code;
  const Args& args = *parsed;
  const int prompts = int(args.has("prompt")) + int(args.has("prompt-file")) + int(args.has("messages")) +
                      int(args.has("prompt-ids"));
  if (prompts != 1) return command.usage("give one of --prompt, --prompt-file, --messages and --prompt-ids");
  const std::string format = args.get("output", "text");
  if (format != "text" && format != "json" && format != "events") {
    return command.usage("--output: expected text, json or events, got \"" + format + "\"");
  }
  auto so = sampling_of(args);
  if (!so.is_ok()) return command.usage(so.status().message());
  if (Status s = check_sampling(*so); !s.is_ok()) return fail(err, kModelCommandInvalid, s);
  if (args.has("threads")) {
    auto t = integer_of("threads", args.get("threads"));
    if (!t.is_ok() || *t < 1) return command.usage("--threads: expected a positive integer");
    at::set_num_threads(static_cast<int>(*t));
  }
  auto device = choose_inference_device(args.get("device", "auto"));
  if (!device.is_ok()) return fail(err, kModelCommandInvalid, device.status());

  auto sources = resolve_model_sources(args.positional()[0], args.get("adapter"));
  if (!sources.is_ok()) return fail(err, kModelCommandInvalid, sources.status());
  const bool quiet = args.has("quiet");
  if (!quiet) {
    err << "loading " << sources->base << (sources->adapter.empty() ? "" : " with the adapter " + sources->adapter)
        << " on " << device->name << "\n";
  }
  auto model = open_inference_model(*sources, device->device, args.get("dtype", "auto"));
  if (!model.is_ok()) return fail(err, kModelCommandInvalid, model.status());
  const auto prompt = prompt_of(args, *model);
  if (!prompt.is_ok()) return fail(err, kModelCommandInvalid, prompt.status());
  so->stop_ids.insert(so->stop_ids.end(), model->stop_ids.begin(), model->stop_ids.end());

  TokenPrinter printer(out, *model, format);
  Result<Generated> generated = Status::internal("not run");
  try {
    generated = generate(model->model, *prompt, *so, [&](std::int32_t id, const TokenScore*) { return printer(id); });
  } catch (const c10::OutOfMemoryError& e) {
    generated = Status::resource_exhausted(std::string("out of memory: ") + e.what_without_backtrace());
  }
  if (!generated.is_ok()) {
    if (format == "text") out << "\n";
    return fail(err,
                generated.status().code() == StatusCode::kInvalidArgument ? kModelCommandInvalid : kModelCommandFailed,
                generated.status());
  }
  if (format != "text") {
    out << result_json(*sources, *device, *model, *prompt, *generated, *so, format == "events").dump() << "\n";
    return kModelCommandOk;
  }
  printer.finish();
  if (!quiet) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "%zu tokens after a %zu-token prompt: prompt %.0f ms, then %.1f tokens/s (%s on %s); ",
                  generated->ids.size(), prompt->size(), generated->prompt_seconds * 1e3, tokens_per_second(*generated),
                  model->dtype_name.c_str(), device->name.c_str());
    err << line << (generated->stopped ? "stopped at token " + std::to_string(generated->ids.back()) : "length limit")
        << "\n";
  }
  return kModelCommandOk;
}

}  // namespace tailor::runner
