#include "daemon/serving/model_server.h"

#include <signal.h>

#include <atomic>
#include <fstream>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/args.h"
#include "core/text.h"
#include "daemon/http/auth.h"
#include "daemon/http/server.h"
#include "daemon/serving/completion_worker.h"
#include "daemon/serving/streamed_reply.h"
#include "platform/executable.h"
#include "runner/protocol/serve_protocol.h"

namespace tailor::daemon {

const char* const kServeHelp = R"(usage: tailord serve MODEL [OPTIONS]     (tailor serve MODEL_DIR|JOB_ID runs it)

Serves one model on OpenAI's completions API: POST /v1/completions (prompt
as text or token ids, a list of them sharing forward passes, max_tokens,
temperature, top_p, top_k, min_p, seed, stop,
presence/frequency/repetition_penalty, logit_bias, n, best_of, echo, logprobs,
stream; max_tokens 0 with echo and logprobs scores a text), POST
/v1/chat/completions (messages rendered with the model's chat template;
max_tokens, the same sampling fields, n, logprobs, top_logprobs, tools and
tool_choice, stream), GET /v1/models
and GET /healthz. lm-eval runs against it as it is:
  lm_eval --model local-completions --tasks TASKS --model_args \
    base_url=http://127.0.0.1:8000/v1/completions,tokenizer_backend=huggingface,tokenizer=MODEL
  lm_eval --model local-chat-completions --apply_chat_template --tasks TASKS \
    --model_args base_url=http://127.0.0.1:8000/v1/chat/completions
MODEL is a model folder, a PEFT adapter folder or a run's output folder
(its model/, else its adapter/), with the tokenizer's files; the model is
loaded once, in a tailor-runner process, and answers one request at a time.

options:
  --adapter DIR         a PEFT adapter folder to apply over MODEL (unmerged)
  --name NAME           the model's name in responses (default: the folder's)
  --host ADDR           the address to bind (default 127.0.0.1); any other
                        than loopback needs --token-file
  --port N              the port (default 8000; 0 picks a free one)
  --token-file FILE     requests need "Authorization: Bearer <the file's
                        token>" (OPENAI_API_KEY for OpenAI clients); give
                        tailord's DATA/token to use its API's token
  --device DEV          auto (default), cpu, cuda or cuda:N
  --dtype D             auto (default: the folder's dtype on a GPU, fp32 on
                        the CPU), fp32, bf16 or fp16
  --threads N           the model's intra-op threads (default: every core)
  --max-tokens N        the largest max_tokens a request may ask for
                        (default 4096)
  --max-body-bytes N    the largest request body (default 8388608: 413 above)
  --runner PATH         tailor-runner (default: $TAILOR_RUNNER, beside tailord,
                        then PATH)
)";

namespace {

using Json = nlohmann::ordered_json;

HttpResponse openai_error(int status, const std::string& type, const std::string& message) {
  Json body;
  body["error"] = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  return HttpResponse::json(status, body.dump());
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || starts_with(host, "127.");
}

Result<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::invalid_argument("--token-file: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string token(trim(ss.str()));
  if (token.empty()) return Status::invalid_argument("--token-file: " + path + " is empty");
  return token;
}

struct Served {
  std::shared_ptr<CompletionWorker> worker;
  Json ready;
  std::string token;  // empty: none needed
  // Set once the port is bound, before anything is printed: a request that
  // comes sooner is refused.
  std::unique_ptr<HostPolicy> hosts_owner;
  std::atomic<const HostPolicy*> hosts{nullptr};
  std::atomic<bool> worker_ended{false};
};

HttpResponse handle(Served& s, HttpRequest& request) {
  const HostPolicy* hosts = s.hosts.load();
  if (!hosts) return openai_error(503, "server_error", "starting");
  std::string why;
  if (!hosts->allows(request, why)) return openai_error(403, "permission_error", why);
  if (request.path == "/healthz") {
    if (request.method != "GET") return openai_error(405, "invalid_request_error", "use GET on /healthz");
    if (!s.worker->alive()) return openai_error(503, "server_error", "the model process has ended");
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = "ok\n";
    return r;
  }
  if (!s.token.empty() && !has_bearer_token(request, s.token)) {
    return openai_error(401, "authentication_error", "missing or wrong bearer token (Authorization: Bearer TOKEN)");
  }
  if (request.path == "/v1/models") {
    if (request.method != "GET") return openai_error(405, "invalid_request_error", "use GET on /v1/models");
    Json model;
    model["id"] = s.ready["model"];
    model["object"] = "model";
    model["created"] = 0;
    model["owned_by"] = "tailor";
    model["max_model_len"] = s.ready["context"];
    return HttpResponse::json(200, Json{{"object", "list"}, {"data", Json::array({model})}}.dump());
  }
  if (request.path != runner::kCompletionsRoute && request.path != runner::kChatCompletionsRoute) {
    return openai_error(404, "invalid_request_error",
                        "no route " + request.path +
                            " (this server answers /v1/completions, /v1/chat/completions and /v1/models)");
  }
  if (request.method != "POST") return openai_error(405, "invalid_request_error", "use POST on " + request.path);
  // One line for the model process; the parse also answers what is not JSON.
  const auto body = nlohmann::json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return openai_error(400, "invalid_request_error", "the request body is not JSON");
  auto failed = [&s](const Status& ended) {
    // Nothing more can be answered: the server stops (main waits for this).
    if (!s.worker_ended.exchange(true)) ::kill(::getpid(), SIGTERM);
    return openai_error(503, "server_error", ended.message());
  };
  if (body.is_object() && body.contains("stream") && body["stream"] == true) {
    return answer_streamed(s.worker, request.path, body.dump(), nullptr, failed);
  }
  // A client that leaves before its reply stops the generation it asked for.
  auto reply = s.worker->call(request.path, body.dump(), {}, still_there(request.client_left));
  if (!reply.is_ok()) return failed(reply.status());
  return HttpResponse::json(reply->status, std::move(reply->body));
}

Result<std::int64_t> positive(const Args& args, const std::string& flag, std::int64_t fallback, std::int64_t lo) {
  if (!args.has(flag)) return fallback;
  const std::string text = args.get(flag);
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo) {
    return Status::invalid_argument("--" + flag + ": expected an integer of at least " + std::to_string(lo) +
                                    ", got \"" + text + "\"");
  }
  return static_cast<std::int64_t>(v);
}

}  // namespace

int run_model_server(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<FlagSpec> flags = {
      {"adapter", true}, {"name", true},       {"host", true},       {"port", true},           {"token-file", true},
      {"device", true},  {"dtype", true},      {"threads", true},    {"max-tokens", true},     {"max-body-bytes", true},
      {"runner", true},  {"help", false, false, 'h'}};
  auto parsed = Args::parse(argv, flags);
  auto usage = [&](const std::string& why) {
    err << "tailord serve: " << why << "\n" << kServeHelp;
    return 2;
  };
  if (!parsed.is_ok()) return usage(parsed.status().message());
  const Args& args = *parsed;
  if (args.has("help")) {
    out << kServeHelp;
    return 0;
  }
  if (args.positional().size() != 1) return usage("expected one MODEL folder");
  auto port = positive(args, "port", 8000, 0);
  if (!port.is_ok() || *port > 65535) return usage(port.is_ok() ? "--port: expected 0 to 65535" : port.status().message());
  auto max_body = positive(args, "max-body-bytes", 8 << 20, 1024);
  if (!max_body.is_ok()) return usage(max_body.status().message());
  for (const char* flag : {"threads", "max-tokens"}) {
    if (auto v = positive(args, flag, 1, 1); !v.is_ok()) return usage(v.status().message());
  }
  auto fail = [&](const Status& s) {
    err << "tailord serve: " << s.message() << "\n";
    return 1;
  };
  const std::string host = args.get("host", "127.0.0.1");
  auto served = std::make_unique<Served>();
  if (args.has("token-file")) {
    auto token = read_token(args.get("token-file"));
    if (!token.is_ok()) return fail(token.status());
    served->token = *token;
  } else if (!is_loopback(host)) {
    return fail(Status::invalid_argument("--host " + host +
                                         " serves the model beyond this machine; give --token-file (tailord's "
                                         "DATA/token uses its API's token)"));
  }
  auto runner = platform::find_executable("tailor-runner", args.get("runner"), "TAILOR_RUNNER");
  if (!runner.is_ok()) return fail(runner.status());

  // Signals are taken by sigwait below: blocked before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> worker_argv = {*runner, "serve", args.positional()[0]};
  for (const char* flag : {"adapter", "name", "device", "dtype", "threads", "max-tokens"}) {
    if (!args.has(flag)) continue;
    worker_argv.push_back(std::string("--") + flag);
    worker_argv.push_back(args.get(flag));
  }
  auto worker = CompletionWorker::start(worker_argv, /*log_path=*/"", std::chrono::minutes(30));
  if (!worker.is_ok()) return fail(worker.status());
  served->worker = std::move(*worker);
  served->ready = Json::parse(served->worker->ready());

  ServerOptions options;
  options.address = host;
  options.port = static_cast<std::uint16_t>(*port);
  options.max_body_bytes = static_cast<std::size_t>(*max_body);
  // A long generation or a large batch is the client's to time out.
  options.write_timeout = std::chrono::minutes(10);
  // A streamed reply's chunks leave within this of their token.
  options.stream_poll = std::chrono::milliseconds(20);
  options.offload = [](const HttpRequest& r) {
    return r.path == runner::kCompletionsRoute || r.path == runner::kChatCompletionsRoute;
  };
  Served& s = *served;
  auto server = HttpServer::start(options, [&s](HttpRequest& r) { return handle(s, r); });
  if (!server.is_ok()) return fail(server.status());
  served->hosts_owner = std::make_unique<HostPolicy>((*server)->port(), (*server)->address(), std::vector<std::string>{});
  served->hosts = served->hosts_owner.get();
  const std::string shown = host.find(':') != std::string::npos ? "[" + (*server)->address() + "]" : (*server)->address();
  out << "serving " << served->ready.value("model", std::string()) << " on http://" << shown << ":" << (*server)->port()
      << "/v1/completions and /v1/chat/completions (" << served->ready.value("device", std::string()) << ", "
      << served->ready.value("dtype", std::string()) << ", context " << served->ready.value("context", 0) << ")"
      << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*server)->stop();
  if (served->worker_ended) {
    err << "tailord serve: the model process has ended; stopping\n";
    return 1;
  }
  return 0;
}

}  // namespace tailor::daemon
