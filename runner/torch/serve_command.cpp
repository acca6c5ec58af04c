#include "runner/torch/serve_command.h"

#include <filesystem>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "runner/protocol/serve_protocol.h"
#include "runner/torch/chat_completions.h"
#include "runner/torch/completions.h"
#include "runner/torch/openai_request.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/model_command.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kServeHelp = R"(usage: tailor-runner serve MODEL [OPTIONS]

Keeps a model loaded and answers OpenAI requests read one a line from
stdin, each the route and the body on one line ("/v1/completions {...}" or
"/v1/chat/completions {...}"), with one line {"status": HTTP status,
"body": response} on stdout, after a first line {"event": "ready", ...}
once the model is loaded; a streamed reply writes its chunks first,
one line {"chunk": {...}} each. `tailor serve` puts an HTTP server in front of
it. MODEL is as for tailor-runner generate: a model folder, an adapter
folder or a run's output folder; it must hold the tokenizer's files.

options:
  --adapter DIR     a PEFT adapter folder to apply over MODEL (unmerged)
  --name NAME       the model's name in responses (default: the folder's name)
  --device DEV      auto (default), cpu, cuda or cuda:N
  --dtype D         auto (default: the folder's dtype on a GPU, fp32 on the
                    CPU), fp32, bf16 or fp16
  --threads N       intra-op threads (default: every core)
  --max-tokens N    the largest max_tokens a request may ask for (default 4096)

exit codes: 0 input ended, 1 bad input (the folder), 2 bad command line
)";

}  // namespace

int run_serve_command(const std::vector<std::string>& argv, std::istream& in, std::ostream& out, std::ostream& err) {
  const ModelCommand command{"serve", kServeHelp, out, err};
  int exit_code = kModelCommandOk;
  const auto parsed = command.parse(argv,
                                    {{"adapter", true}, {"name", true}, {"device", true}, {"dtype", true},
                                     {"threads", true}, {"max-tokens", true}},
                                    exit_code);
  if (!parsed) return exit_code;
  const Args& args = *parsed;
  auto usage = [&](const std::string& why) { return command.usage(why); };
  CompletionLimits limits;
  for (const auto& [flag, target] : {std::pair<const char*, std::int64_t*>{"threads", nullptr},
                                     std::pair<const char*, std::int64_t*>{"max-tokens", &limits.max_tokens}}) {
    if (!args.has(flag)) continue;
    const std::string text = args.get(flag);
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 1) return usage(std::string("--") + flag + ": expected a positive integer");
    if (target) {
      *target = v;
    } else {
      at::set_num_threads(static_cast<int>(v));
    }
  }
  auto fail = [&](const Status& s) { return command.fail(kModelCommandInvalid, s.message()); };
  auto device = choose_inference_device(args.get("device", "auto"));
  if (!device.is_ok()) return fail(device.status());
  auto sources = resolve_model_sources(args.positional()[0], args.get("adapter"));
  if (!sources.is_ok()) return fail(sources.status());
  err << "loading " << sources->base << (sources->adapter.empty() ? "" : " with the adapter " + sources->adapter)
      << " on " << device->name << "\n";
  auto model = open_inference_model(*sources, device->device, args.get("dtype", "auto"));
  if (!model.is_ok()) return fail(model.status());
  if (!model->tokenizer) {
    return fail(Status::invalid_argument(sources->tokenizer + " has no tokenizer files; serving needs them"));
  }
  const std::string target = std::filesystem::path(args.positional()[0]).lexically_normal().string();
  const std::string name =
      args.get("name", std::filesystem::path(target.back() == '/' ? target.substr(0, target.size() - 1) : target)
                           .filename()
                           .string());
  Json ready;
  ready["event"] = "ready";
  ready["model"] = name;
  ready["context"] = model->model->arch().max_seq_len;
  ready["vocab"] = model->model->arch().vocab;
  ready["device"] = device->name;
  ready["dtype"] = model->dtype_name;
  ready["chat_template"] = model->chat.has_value();
  out << ready.dump() << std::endl;

  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto [route, body] = split_serve_request(line);
    CompletionReply reply;
    // A streamed reply's chunks go out as they come, before its reply line.
    const ChunkSink emit = [&out](const std::string& chunk) { out << kChunkLinePrefix << chunk << "}" << std::endl; };
    if (route == kCompletionsRoute) {
      reply = complete(*model, name, body, limits, emit);
    } else if (route == kChatCompletionsRoute) {
      reply = complete_chat(*model, name, body, limits, emit);
    } else {
      reply = openai::error_reply(404, "invalid_request_error", "no route " + route);
    }
    // The body is already JSON: spliced in rather than parsed again.
    out << "{\"status\":" << reply.status << ",\"body\":" << reply.body << "}" << std::endl;
  }
  return kModelCommandOk;
}

}  // namespace tailor::runner
