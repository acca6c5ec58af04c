// tailord's HTTP/1.1 server: Boost.Beast on an Asio thread pool, one
// asynchronous session per connection (keep-alive), bounded header and body
// sizes, a timeout on every read and write, chunked streaming for bodies
// produced over time. Requests go to one handler; the server itself answers
// only what it must before a handler can: 413 (body too large), 400
// (unparseable request), and drops idle or slow connections, the
// longest-waiting first when the connection limit is reached, and closes
// the oldest streams when the stream budget is.
// Beast stays inside server.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "daemon/http/message.h"

namespace tailor::daemon {

struct ServerOptions {
  std::string address = "127.0.0.1";  // IPv4 or IPv6 literal to bind
  std::uint16_t port = 8470;          // 0: an ephemeral port, see HttpServer::port()
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds read_timeout{30'000};   // whole request, headers and body
  std::chrono::milliseconds write_timeout{30'000};  // each write
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive wait for the next request
  std::chrono::milliseconds stream_poll{200};       // StreamPoll interval
  int threads = 2;
  // At the limit a new connection evicts the one that has waited longest
  // for a request (idle, or still sending it); when every connection has a
  // request in progress, the new one is closed.
  int max_connections = 512;
  // Streamed responses (HttpResponse::stream: event streams, logs?follow)
  // can last for hours, so they leave the connection budget once they
  // start and have a budget of their own: at most `max_streams` open, and
  // `max_streams_per_owner` of one owner. A new stream past either bound
  // closes the oldest of its owner's streams, or, when the total is full,
  // the oldest of the owner that holds the most, with its farewell.
  // Ordinary requests and /healthz always find room.
  int max_streams = 256;
  int max_streams_per_owner = 128;
  // Requests for which `offload` says true (a submission that plans a job
  // and commits it) run on a pool of `worker_threads`, never on an I/O
  // thread, so that reads and writes of every other connection go on.
  std::function<bool(const HttpRequest&)> offload;
  int worker_threads = 2;
};

using RequestHandler = std::function<HttpResponse(HttpRequest&)>;

class HttpServer {
 public:
  // Binds and starts serving on `options.threads` threads. `handler` must
  // be thread-safe and must not throw (a throw becomes a 500).
  static Result<std::unique_ptr<HttpServer>> start(const ServerOptions& options, RequestHandler handler);
  ~HttpServer();  // stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;
  std::string address() const;  // the bound address ("127.0.0.1")
  int connections() const;                     // open now
  std::uint64_t evicted_connections() const;   // closed to make room, since start
  int streams() const;                         // streamed responses open now
  std::uint64_t evicted_streams() const;       // closed by the stream budget, since start

  // Stops accepting, closes every connection and joins the threads (the
  // workers after their requests in progress). Idempotent.
  void stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tailor::daemon
