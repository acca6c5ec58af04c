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
  --seed S             the sampler's seed (default 0): the same seed gives
                       the same tokens on the same device
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

}  // namespace

int run_generate_command(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const ModelCommand command{"generate", kGenerateHelp, out, err};
  int exit_code = kModelCommandOk;
  const auto parsed = command.parse(
      argv,
      {{"adapter", true},     {"prompt", true}, {"prompt-file", true}, {"messages", true}, {"prompt-ids", true},
       {"max-tokens", true},  {"temperature", true}, {"top-p", true},  {"top-k", true},    {"seed", true},
       {"stop-id", true, true}, {"device", true}, {"dtype", true},    {"threads", true},  {"output", true},
       {"quiet", false}},
      exit_code);
  if (!parsed) return exit_code;
  const Args& args = *parsed;
  auto usage = [&](const std::string& why) { return command.usage(why); };
  const int prompts = int(args.has("prompt")) + int(args.has("prompt-file")) + int(args.has("messages")) +
                      int(args.has("prompt-ids"));
  if (prompts != 1) return usage("give one of --prompt, --prompt-file, --messages and --prompt-ids");
  const std::string format = args.get("output", "text");
  if (format != "text" && format != "json" && format != "events") {
    return usage("--output: expected text, json or events, got \"" + format + "\"");
  }

  SamplingOptions so;
  {
    auto bad = [&](const Status& s) { return usage(s.message()); };
    auto n = integer_of("max-tokens", args.get("max-tokens", "256"));
    if (!n.is_ok()) return bad(n.status());
    so.max_new_tokens = *n;
    auto temp = number_of("temperature", args.get("temperature", "0"));
    if (!temp.is_ok()) return bad(temp.status());
    so.temperature = *temp;
    auto p = number_of("top-p", args.get("top-p", "1"));
    if (!p.is_ok()) return bad(p.status());
    so.top_p = *p;
    auto k = integer_of("top-k", args.get("top-k", "0"));
    if (!k.is_ok()) return bad(k.status());
    so.top_k = *k;
    auto seed = integer_of("seed", args.get("seed", "0"));
    if (!seed.is_ok()) return bad(seed.status());
    so.seed = static_cast<std::uint64_t>(*seed);
    for (const std::string& id : args.all("stop-id")) {
      auto v = integer_of("stop-id", id);
      if (!v.is_ok()) return bad(v.status());
      so.stop_ids.push_back(static_cast<std::int32_t>(*v));
    }
    if (Status s = check_sampling(so); !s.is_ok()) return fail(err, kModelCommandInvalid, s);
  }
  if (args.has("threads")) {
    auto t = integer_of("threads", args.get("threads"));
    if (!t.is_ok() || *t < 1) return usage("--threads: expected a positive integer");
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

  Result<std::vector<std::int32_t>> prompt = Status::internal("no prompt");
  if (args.has("prompt")) prompt = prompt_ids_of_text(*model, args.get("prompt"));
  if (args.has("prompt-file")) {
    auto text = text_of_file("--prompt-file", args.get("prompt-file"));
    prompt = text.is_ok() ? prompt_ids_of_text(*model, *text) : Result<std::vector<std::int32_t>>(text.status());
  }
  if (args.has("prompt-ids")) prompt = ids_of(args.get("prompt-ids"));
  if (args.has("messages")) {
    auto conversation = conversation_of_file(args.get("messages"));
    prompt = conversation.is_ok() ? prompt_ids_of_conversation(*model, *conversation)
                                  : Result<std::vector<std::int32_t>>(conversation.status());
  }
  if (!prompt.is_ok()) return fail(err, kModelCommandInvalid, prompt.status());
  so.stop_ids.insert(so.stop_ids.end(), model->stop_ids.begin(), model->stop_ids.end());

  // Text streams as it is produced; without a tokenizer, ids do.
  std::optional<data::TextStream> stream;
  if (model->tokenizer) stream.emplace(*model->tokenizer);
  const bool streaming = format == "text", events = format == "events";
  bool first = true;
  auto on_token = [&](std::int32_t id) {
    if (events) {
      // One JSON line a token (tailord relays them as server-sent events).
      Json e;
      e["event"] = "token";
      e["id"] = id;
      e["text"] = stream ? stream->push(id) : std::string();
      out << e.dump() << "\n";
      out.flush();
      return true;
    }
    if (!streaming) return true;
    if (stream) {
      out << stream->push(id);
    } else {
      out << (first ? "" : " ") << id;
    }
    first = false;
    out.flush();
    return true;
  };
  Result<Generated> generated = Status::internal("not run");
  try {
    generated = generate(model->model, *prompt, so, on_token);
  } catch (const c10::OutOfMemoryError& e) {
    generated = Status::resource_exhausted(std::string("out of memory: ") + e.what_without_backtrace());
  }
  if (!generated.is_ok()) {
    if (streaming) out << "\n";
    return fail(err,
                generated.status().code() == StatusCode::kInvalidArgument ? kModelCommandInvalid : kModelCommandFailed,
                generated.status());
  }
  const std::size_t n = generated->ids.size();
  const double per_second =
      generated->decode_seconds > 0 ? static_cast<double>(n - 1) / generated->decode_seconds : 0.0;
  const std::string finish = generated->stopped ? "stop" : "length";
  if (streaming) {
    if (stream) out << stream->finish();
    out << "\n";
    out.flush();
    if (!quiet) {
      char line[200];
      std::snprintf(line, sizeof line, "%zu tokens after a %zu-token prompt: prompt %.0f ms, then %.1f tokens/s (%s on %s); ",
                    n, prompt->size(), generated->prompt_seconds * 1e3, per_second, model->dtype_name.c_str(),
                    device->name.c_str());
      err << line << (generated->stopped ? "stopped at token " + std::to_string(generated->ids.back()) : "length limit")
          << "\n";
    }
    return kModelCommandOk;
  }
  Json j;
  if (events) j["event"] = "done";
  j["model"] = sources->base;
  j["adapter"] = sources->adapter.empty() ? Json() : Json(sources->adapter);
  j["device"] = device->name;
  j["dtype"] = model->dtype_name;
  j["prompt_tokens"] = prompt->size();
  j["completion_tokens"] = n;
  j["prompt_ids"] = *prompt;
  j["ids"] = generated->ids;
  if (model->tokenizer) j["text"] = utf8_lossy(model->tokenizer->decode(generated->ids));
  j["finish_reason"] = finish;
  j["stop_ids"] = so.stop_ids;
  j["prompt_seconds"] = generated->prompt_seconds;
  j["decode_seconds"] = generated->decode_seconds;
  j["tokens_per_second"] = per_second;
  out << j.dump() << "\n";
  return kModelCommandOk;
}

}  // namespace tailor::runner
