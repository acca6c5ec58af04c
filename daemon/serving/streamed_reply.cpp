#include "daemon/serving/streamed_reply.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace tailor::daemon {
namespace {

// What the call's thread hands to the HTTP server's stream poll.
struct Relay {
  std::mutex mu;
  std::condition_variable changed;
  std::string pending;  // events not yet sent
  bool streaming = false;
  bool finished = false;
  std::atomic<bool> client_left{false};
  Result<WorkerReply> reply = Status::internal("not answered yet");
};

// Held by the stream poll alone: the HTTP server drops the poll when the
// client has gone (a write failed, the stream budget or shutdown closed it)
// or the stream has ended, and the relay learns it here.
class ClientWatch {
 public:
  explicit ClientWatch(std::shared_ptr<Relay> relay) : relay_(std::move(relay)) {}
  ~ClientWatch() { relay_->client_left = true; }
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

 private:
  std::shared_ptr<Relay> relay_;
};

}  // namespace

HttpResponse answer_streamed(std::shared_ptr<CompletionWorker> worker, std::string route, std::string body,
                             std::function<void()> done, std::function<HttpResponse(const Status&)> failed) {
  auto relay = std::make_shared<Relay>();
  // Detached, holding what it uses. A client that leaves stops the
  // generation at its next chunk (the worker tells the model process), so
  // that the model, which answers one request at a time, is free again.
  std::thread([worker, relay, route = std::move(route), body = std::move(body), done = std::move(done)] {
    auto reply = worker->call(
        route, body,
        [&relay](std::string chunk) {
          if (relay->client_left) return false;
          {
            std::lock_guard<std::mutex> lock(relay->mu);
            relay->pending += "data: " + chunk + "\n\n";
            relay->streaming = true;
          }
          relay->changed.notify_all();
          return true;
        },
        [&relay] { return !relay->client_left; });
    // The slot back before the end is sent: a client that asks again once
    // it has the end finds the model free.
    if (done) done();
    {
      std::lock_guard<std::mutex> lock(relay->mu);
      relay->reply = std::move(reply);
      relay->finished = true;
    }
    relay->changed.notify_all();
  }).detach();

  std::unique_lock<std::mutex> lock(relay->mu);
  relay->changed.wait(lock, [&] { return relay->streaming || relay->finished; });
  if (!relay->streaming) {
    if (!relay->reply.is_ok()) return failed(relay->reply.status());
    return HttpResponse::json(relay->reply->status, std::move(relay->reply->body));
  }
  HttpResponse res;
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-store");
  res.stream = [relay, watch = std::make_shared<ClientWatch>(relay), failed = std::move(failed)](std::string& out) {
    (void)watch;  // held, not read: its end tells the relay the client left
    std::lock_guard<std::mutex> guard(relay->mu);
    out += relay->pending;
    relay->pending.clear();
    if (!relay->finished) return true;
    if (!relay->reply.is_ok()) {
      out += "data: " + failed(relay->reply.status()).body + "\n\n";
    } else if (relay->reply->status != 200) {
      out += "data: " + relay->reply->body + "\n\n";
    }
    out += "data: [DONE]\n\n";
    return false;
  };
  return res;
}

}  // namespace tailor::daemon
