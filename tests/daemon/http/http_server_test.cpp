// The HTTP server against hostile clients, over real sockets on loopback.
// Its connection budget: at the limit a new connection evicts the one that
// has waited longest for a request, so clients that connect and send
// nothing cannot lock everyone else out; a connection whose request is
// being answered is never evicted. Its request budget: a request that
// dribbles in, lies about its length or is too large ends at its deadline
// or its limit without reaching a handler. A handler on a worker sees
// whether its client is still there.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/http/server.h"
#include "tests/testing/raw_socket.h"

namespace tailor::daemon {
namespace {

using std::chrono::milliseconds;
using tailor::testing::RawSocket;

const char* kPartial = "GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n";  // the blank line never comes
const char* kFast = "GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
const char* kSlow = "GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

// A handler that answers /fast at once and holds /slow until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  bool open = false;
  int calls = 0;
  int returned = 0;  // /slow requests answered

  HttpResponse handle(const HttpRequest& req) {
    {
      std::lock_guard lock(mu);
      ++calls;
    }
    if (req.path == "/slow") {
      std::unique_lock lock(mu);
      ++waiting;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
      ++returned;
    }
    return HttpResponse::json(200, R"({"path":")" + req.path + "\"}");
  }
  bool wait_for_waiting(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return waiting >= n; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  int handled() {
    std::lock_guard lock(mu);
    return calls;
  }
  int slow_returned() {
    std::lock_guard lock(mu);
    return returned;
  }
};

std::unique_ptr<HttpServer> start_server(int max_connections, int threads, Gate& gate,
                                         milliseconds read_timeout = milliseconds(30'000)) {
  ServerOptions o;
  o.port = 0;
  o.max_connections = max_connections;
  o.threads = threads;
  o.read_timeout = read_timeout;
  o.max_body_bytes = 64 << 10;
  auto server = HttpServer::start(o, [&gate](HttpRequest& req) { return gate.handle(req); });
  EXPECT_TRUE(server.is_ok()) << server.status().to_string();
  return server.is_ok() ? std::move(*server) : nullptr;
}

// Polls the server's own count of open connections (it accepts on its own
// threads).
bool wait_connections(const HttpServer& s, int n) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.connections() != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(HttpServerTest, AtTheLimitANewConnectionEvictsTheOneThatHasWaitedLongestForARequest) {
  Gate gate;
  auto server = start_server(4, 2, gate);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<RawSocket>(server->port()));
    ASSERT_TRUE(idle.back()->connected());
    idle.back()->send(kPartial);
    ASSERT_TRUE(wait_connections(*server, i + 1));
  }
  RawSocket client(server->port());
  client.send(kFast);
  const auto started = std::chrono::steady_clock::now();
  const std::string reply = client.receive();
  EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
  // Served at once, not after the 30 s read timeout of the idle ones.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(server->evicted_connections(), 1u);
  EXPECT_TRUE(idle[0]->closed_within(milliseconds(5000)));
  for (int i = 1; i < 4; ++i)
    EXPECT_FALSE(idle[i]->closed_within(milliseconds(0))) << i;
}

TEST(HttpServerTest, AConnectionWhoseRequestIsBeingAnsweredIsNeverEvicted) {
  Gate gate;
  auto server = start_server(2, 2, gate);
  ASSERT_TRUE(server);
  RawSocket busy(server->port());
  busy.send(kSlow);
  ASSERT_TRUE(gate.wait_for_waiting(1));
  RawSocket idle(server->port());
  idle.send(kPartial);
  ASSERT_TRUE(wait_connections(*server, 2));
  // The busy connection is older, but only the idle one may go.
  RawSocket client(server->port());
  client.send(kFast);
  const std::string reply = client.receive();
  EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
  EXPECT_TRUE(idle.closed_within(milliseconds(5000)));
  gate.release();
  const std::string slow = busy.receive();
  EXPECT_EQ(slow.rfind("HTTP/1.1 200", 0), 0u) << slow;
  EXPECT_NE(slow.find("/slow"), std::string::npos) << slow;
}

TEST(HttpServerTest, WhenEveryConnectionHasARequestInProgressANewOneIsClosed) {
  Gate gate;
  auto server = start_server(2, 3, gate);
  ASSERT_TRUE(server);
  RawSocket a(server->port()), b(server->port());
  a.send(kSlow);
  b.send(kSlow);
  ASSERT_TRUE(gate.wait_for_waiting(2));
  RawSocket refused(server->port());
  refused.send(kFast);
  EXPECT_EQ(refused.receive(), "");
  EXPECT_TRUE(refused.ended()) << "closed without an answer, not left waiting";
  EXPECT_EQ(server->evicted_connections(), 0u);
  gate.release();
  EXPECT_EQ(a.receive().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(b.receive().rfind("HTTP/1.1 200", 0), 0u);
}

// A client that sends a byte of its headers every 20 ms is always active,
// but its request must still be whole within the read timeout.
TEST(HttpServerTest, AClientThatDribblesItsHeadersIsCutOffAtTheReadTimeout) {
  Gate gate;
  auto server = start_server(8, 2, gate, milliseconds(400));
  ASSERT_TRUE(server);
  RawSocket slow(server->port());
  const std::string request = std::string(kFast);
  const auto started = std::chrono::steady_clock::now();
  std::size_t sent = 0;
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
    slow.send(request.substr(sent % 20, 1));  // never reaches the blank line
    ++sent;
    closed = slow.closed_within(milliseconds(20));
  }
  const auto lasted = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(closed);
  EXPECT_GE(lasted, milliseconds(350));
  EXPECT_LT(lasted, milliseconds(3000));
  RawSocket client(server->port());
  client.send(kFast);
  EXPECT_EQ(client.receive().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(gate.handled(), 1);  // the dribbled request never reached it
}

// Content-Length promises more than comes: the request ends at the read
// timeout, unanswered and unhandled, while other clients are served.
TEST(HttpServerTest, ARequestShortOfItsContentLengthEndsAtTheReadTimeoutUnhandled) {
  Gate gate;
  auto server = start_server(8, 2, gate, milliseconds(400));
  ASSERT_TRUE(server);
  RawSocket liar(server->port());
  liar.send("POST /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nonly ten..");
  RawSocket client(server->port());
  client.send(kFast);
  EXPECT_EQ(client.receive().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_TRUE(liar.closed_within(milliseconds(5000)));
  EXPECT_EQ(gate.handled(), 1);
}

// A body announced past the limit is refused from its headers: a client
// that says 1 GiB gets 413 without sending a byte of it.
TEST(HttpServerTest, AContentLengthPastTheLimitIs413BeforeTheBodyIsSent) {
  Gate gate;
  auto server = start_server(8, 2, gate);
  ASSERT_TRUE(server);
  RawSocket big(server->port());
  big.send("POST /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1073741824\r\n\r\n");
  const std::string reply = big.receive();
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  EXPECT_NE(reply.find("payload_too_large"), std::string::npos) << reply;
  EXPECT_EQ(gate.handled(), 0);
}

// Without a length, a chunked body is cut where it passes the limit.
TEST(HttpServerTest, AChunkedBodyPastTheLimitIs413) {
  Gate gate;
  auto server = start_server(8, 2, gate);
  ASSERT_TRUE(server);
  RawSocket big(server->port());
  big.send("POST /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "4000\r\n" + std::string(0x4000, 'x') + "\r\n";
  for (int i = 0; i < 8; ++i) big.send(chunk);  // 128 KiB against a 64 KiB limit
  const std::string reply = big.receive();
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply.substr(0, 200);
  EXPECT_EQ(gate.handled(), 0);
}

// Framing that two parsers could read differently (request smuggling) is
// refused, not guessed at.
TEST(HttpServerTest, AmbiguousOrMalformedFramingIs400) {
  Gate gate;
  auto server = start_server(8, 2, gate);
  ASSERT_TRUE(server);
  for (const char* framing : {"Content-Length: 5\r\nContent-Length: 6\r\n", "Content-Length: -1\r\n",
                              "Content-Length: 5x\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"}) {
    RawSocket c(server->port());
    c.send(std::string("POST /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n") + framing + "\r\nhello");
    const std::string reply = c.receive();
    EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << framing << ": " << reply;
  }
  EXPECT_EQ(gate.handled(), 0);
}

// One I/O thread, and a request that holds its handler (as planning a job
// does): run on a worker, it leaves the I/O thread free for everyone else.
TEST(HttpServerTest, AnOffloadedRequestLeavesTheIoThreadToOtherConnections) {
  Gate gate;
  ServerOptions o;
  o.port = 0;
  o.threads = 1;
  o.worker_threads = 1;
  o.offload = [](const HttpRequest& r) { return r.path == "/slow"; };
  auto server = HttpServer::start(o, [&gate](HttpRequest& req) { return gate.handle(req); });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  RawSocket busy((*server)->port());
  busy.send(kSlow);
  ASSERT_TRUE(gate.wait_for_waiting(1));
  RawSocket client((*server)->port());
  client.send(kFast);
  EXPECT_EQ(client.receive().rfind("HTTP/1.1 200", 0), 0u) << "served while /slow still holds its worker";
  gate.release();
  const std::string slow = busy.receive();
  EXPECT_EQ(slow.rfind("HTTP/1.1 200", 0), 0u) << slow;
  EXPECT_NE(slow.find("/slow"), std::string::npos) << slow;
}

// Stopping while a worker holds a request: stop() returns only once that
// request is done (the handler may use what its owner frees next).
TEST(HttpServerTest, StopWaitsForTheRequestAWorkerHolds) {
  Gate gate;
  ServerOptions o;
  o.port = 0;
  o.offload = [](const HttpRequest& r) { return r.path == "/slow"; };
  auto server = HttpServer::start(o, [&gate](HttpRequest& req) { return gate.handle(req); });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  RawSocket busy((*server)->port());
  busy.send(kSlow);
  ASSERT_TRUE(gate.wait_for_waiting(1));
  std::thread releaser([&gate] {
    // Lets stop() start first; were it to return early, returned is 0.
    std::this_thread::sleep_for(milliseconds(100));
    gate.release();
  });
  (*server)->stop();
  EXPECT_EQ(gate.slow_returned(), 1);
  releaser.join();
}

// Streams that never end, of the owner the query names, with last words.
HttpResponse endless_stream(const HttpRequest& req) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [](std::string&) { return true; };
  r.stream_owner = req.query_value("owner");
  r.stream_farewell = [](const std::string& why) { return "event: closed\ndata: " + why + "\n\n"; };
  return r;
}

std::unique_ptr<RawSocket> open_stream(const HttpServer& server, const std::string& owner) {
  auto s = std::make_unique<RawSocket>(server.port());
  s->send("GET /stream?owner=" + owner + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string head = s->receive("\r\n\r\n");  // the server holds it as a stream by now
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  return s;
}

// Issue 37, item 1: long-lived streams counted against the connection
// limit and were never reclaimed, so a reader's 512 streams locked every
// client out, /healthz too. Streams now leave the connection budget and
// have their own: past an owner's bound its oldest stream goes, past the
// total the oldest of the largest owner; each ends with its last words.
TEST(HttpServerTest, StreamsHaveABudgetOfTheirOwnWhereTheOldestOfTheLargestOwnerMakesRoom) {
  ServerOptions o;
  o.port = 0;
  o.max_connections = 4;
  o.max_streams = 4;
  o.max_streams_per_owner = 3;
  o.stream_poll = milliseconds(20);
  auto started = HttpServer::start(o, [](HttpRequest& req) {
    return req.path == "/stream" ? endless_stream(req) : HttpResponse::json(200, "{}");
  });
  ASSERT_TRUE(started.is_ok()) << started.status().to_string();
  HttpServer& server = **started;
  auto admin = open_stream(server, "admin");
  std::vector<std::unique_ptr<RawSocket>> reader;
  for (int i = 0; i < 3; ++i) reader.push_back(open_stream(server, "read"));
  EXPECT_EQ(server.streams(), 4);
  // As many streams as connections allowed, and ordinary requests still
  // find room, without closing a stream.
  for (int i = 0; i < 8; ++i) {
    RawSocket c(server.port());
    c.send(kFast);
    EXPECT_EQ(c.receive().rfind("HTTP/1.1 200", 0), 0u) << i;
  }
  EXPECT_EQ(server.evicted_streams(), 0u);
  // The reader's fourth: its own oldest goes, with its last words.
  reader.push_back(open_stream(server, "read"));
  std::string last = reader[0]->receive("tailord's stream budget");
  last += reader[0]->receive();
  EXPECT_NE(last.find("event: closed\ndata: tailord's stream budget is full (4 in all, 3 per token)"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("0\r\n\r\n"), std::string::npos) << "the chunked body ends: " << last;
  EXPECT_TRUE(reader[0]->ended());
  // A newcomer past the total: the largest owner (the reader) gives way.
  auto other = open_stream(server, "other");
  std::string gone = reader[1]->receive("event: closed");
  gone += reader[1]->receive();
  EXPECT_NE(gone.find("event: closed"), std::string::npos) << gone;
  EXPECT_TRUE(reader[1]->ended());
  EXPECT_EQ(server.evicted_streams(), 2u);
  EXPECT_EQ(server.streams(), 4);
  // The admin's stream, the oldest of all, was never touched.
  EXPECT_FALSE(admin->closed_within(milliseconds(200)));
  for (std::size_t i = 2; i < reader.size(); ++i) EXPECT_FALSE(reader[i]->closed_within(milliseconds(0))) << i;
}

// A stream whose client leaves while it has nothing to send (a generation
// held before its next token) ends then: its poll, and what that holds, is
// released, rather than at a next write that may never come.
TEST(HttpServerTest, AStreamWhoseClientLeavesIsReleasedWhileItHasNothingToSend) {
  struct Released {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto released = std::make_shared<Released>();
  struct Holder {
    explicit Holder(std::shared_ptr<Released> released) : r(std::move(released)) {}
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    std::shared_ptr<Released> r;
    ~Holder() {
      std::lock_guard lock(r->mu);
      r->done = true;
      r->cv.notify_all();
    }
  };
  ServerOptions o;
  o.port = 0;
  o.stream_poll = milliseconds(20);
  auto started = HttpServer::start(o, [released](HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.stream = [holder = std::make_shared<Holder>(released)](std::string&) { return true; };
    return r;
  });
  ASSERT_TRUE(started.is_ok()) << started.status().to_string();
  HttpServer& server = **started;
  auto client = open_stream(server, "reader");
  ASSERT_EQ(server.streams(), 1);
  {
    std::lock_guard lock(released->mu);
    EXPECT_FALSE(released->done);
  }
  client.reset();  // the client leaves
  std::unique_lock lock(released->mu);
  EXPECT_TRUE(released->cv.wait_for(lock, std::chrono::seconds(10), [&] { return released->done; }));
  lock.unlock();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.streams() != 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(milliseconds(2));
  EXPECT_EQ(server.streams(), 0);
}

// A long answer on a worker (a generation) asks whether its client is still
// there: a client that waits for it is; one that closes its connection
// while it works is seen gone, so the work can stop. Requests answered on
// the I/O thread have no such question.
TEST(HttpServerTest, AnOffloadedHandlerSeesWhetherItsClientIsStillThere) {
  struct Seen {
    std::mutex mu;
    std::condition_variable cv;
    bool waiting_client_there = false;
    bool unasked_on_io_thread = false;
    bool done = false;
    bool gone = false;
  };
  auto seen = std::make_shared<Seen>();
  ServerOptions o;
  o.port = 0;
  o.offload = [](const HttpRequest& r) { return r.path != "/fast"; };
  auto server = HttpServer::start(o, [seen](HttpRequest& req) {
    std::unique_lock lock(seen->mu);
    if (req.path == "/fast") {
      seen->unasked_on_io_thread = !req.client_left;
    } else if (req.path == "/wait") {
      seen->waiting_client_there = req.client_left && !req.client_left();
    } else {
      lock.unlock();
      // Works until its client is gone (10 s at most).
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      bool gone = false;
      while (!(gone = req.client_left()) && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(milliseconds(2));
      lock.lock();
      seen->gone = gone;
      seen->done = true;
      seen->cv.notify_all();
    }
    return HttpResponse::json(200, "{}");
  });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  {
    RawSocket fast((*server)->port());
    fast.send(kFast);
    EXPECT_EQ(fast.receive().rfind("HTTP/1.1 200", 0), 0u);
    RawSocket waiting((*server)->port());
    waiting.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(waiting.receive().rfind("HTTP/1.1 200", 0), 0u);
  }
  auto leaving = std::make_unique<RawSocket>((*server)->port());
  leaving->send(kSlow);
  leaving.reset();  // the client leaves without its answer
  std::unique_lock lock(seen->mu);
  EXPECT_TRUE(seen->cv.wait_for(lock, std::chrono::seconds(20), [&] { return seen->done; }));
  EXPECT_TRUE(seen->gone);
  EXPECT_TRUE(seen->waiting_client_there);
  EXPECT_TRUE(seen->unasked_on_io_thread);
}

}  // namespace
}  // namespace tailor::daemon
