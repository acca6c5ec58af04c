#include "runner/torch/serve_command.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "platform/failpoint.h"
#include "runner/protocol/serve_protocol.h"
#include "runner/torch/chat_completions.h"
#include "runner/torch/completions.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/model_command.h"
#include "runner/torch/openai_request.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kServeHelp = R"(usage: tailor-runner serve MODEL [OPTIONS]

Keeps a model loaded and answers OpenAI requests read one a line from
stdin, each the route and the body on one line ("/v1/completions {...}" or
"/v1/chat/completions {...}"), with one line {"status": HTTP status,
"body": response} on stdout, after a first line {"event": "ready", ...}
once the model is loaded; a streamed reply writes its chunks first,
one line {"chunk": {...}} each. A line "cancel" read while a request is
answered stops its generation (its client left); an unstreamed one then
replies {"status": 200, "body": null}. `tailor serve` puts an
HTTP server in front of it. MODEL is as for tailor-runner generate: a model
folder, an adapter folder or a run's output folder; it must hold the
tokenizer's files.

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

// The input, read on a thread of its own so that a cancel line reaches the
// request in flight. Request lines queue in order, numbered from 1; a cancel
// line cancels the newest request read before it, so one that comes after
// its request ended cancels nothing.
class RequestLines {
 public:
  explicit RequestLines(std::istream& in) {
    // Untied: a tied input (std::cin) flushes its output before each read,
    // from the reader's thread, while the main thread writes to it.
    in.tie(nullptr);
    reader_ = std::thread([this, &in] { read(in); });
  }
  // The reader ends with the input, as the caller's loop does.
  ~RequestLines() { reader_.join(); }
  RequestLines(const RequestLines&) = delete;
  RequestLines& operator=(const RequestLines&) = delete;

  // The next request and its number; nullopt once the input has ended.
  std::optional<std::pair<std::uint64_t, std::string>> next() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return !queue_.empty() || ended_; });
    if (queue_.empty()) return std::nullopt;
    auto request = std::move(queue_.front());
    queue_.pop_front();
    return request;
  }
  bool cancelled(std::uint64_t request) const { return cancelled_up_to_.load() >= request; }
  // Until `request` is cancelled or the input ends (the failpoint
  // serve.hold_after_first_chunk).
  void wait_for_cancel(std::uint64_t request) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return cancelled(request) || ended_; });
  }

 private:
  void read(std::istream& in) {
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (line == kCancelLine) {
        cancelled_up_to_ = read_;
      } else {
        queue_.emplace_back(++read_, std::move(line));
      }
      ready_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    ready_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::pair<std::uint64_t, std::string>> queue_;
  std::uint64_t read_ = 0;  // requests read so far
  bool ended_ = false;
  std::atomic<std::uint64_t> cancelled_up_to_{0};
  std::thread reader_;
};

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

  // A test's: each streamed reply holds after its first chunk, and the first
  // unstreamed one at its first token, until its client leaves, so that it
  // leaves mid-generation on any machine.
  const bool hold = platform::failpoint_armed("serve.hold_after_first_chunk");
  bool hold_unstreamed = platform::failpoint_armed("serve.hold_first_unstreamed");
  RequestLines requests(in);
  while (auto request = requests.next()) {
    const std::uint64_t number = request->first;
    const auto [route, body] = split_serve_request(request->second);
    CompletionReply reply;
    // A streamed reply's chunks go out as they come, before its reply line,
    // until its client leaves.
    std::size_t chunks = 0;
    const ChunkSink emit = [&](const std::string& chunk) {
      if (hold && chunks == 1) requests.wait_for_cancel(number);
      if (requests.cancelled(number)) {
        err << "request " << number << ": its client left after " << chunks << " chunks; generation stopped"
            << std::endl;
        return false;
      }
      out << kChunkLinePrefix << chunk << "}" << std::endl;
      ++chunks;
      return true;
    };
    // An unstreamed reply's generation asks at each token whether its client
    // still waits.
    bool told = false;
    const Listening listening = [&] {
      if (hold_unstreamed) {
        hold_unstreamed = false;
        err << "request " << number << ": held at its first token (failpoint serve.hold_first_unstreamed)" << std::endl;
        requests.wait_for_cancel(number);
      }
      if (!requests.cancelled(number)) return true;
      if (!told) err << "request " << number << ": its client left before the reply; generation stopped" << std::endl;
      told = true;
      return false;
    };
    if (route == kCompletionsRoute) {
      reply = complete(*model, name, body, limits, emit, listening);
    } else if (route == kChatCompletionsRoute) {
      reply = complete_chat(*model, name, body, limits, emit, listening);
    } else {
      reply = openai::error_reply(404, "invalid_request_error", "no route " + route);
    }
    // The body is already JSON: spliced in rather than parsed again.
    out << "{\"status\":" << reply.status << ",\"body\":" << reply.body << "}" << std::endl;
  }
  return kModelCommandOk;
}

}  // namespace tailor::runner
