// Modelled on the shape of Beast's example/http/server/async (sessions that
// own their stream, per-step error handling) and advanced_server (shutdown);
// the code is this project's own.
#include "daemon/http/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/json_writer.h"
#include "core/log.h"
#include "daemon/http/errors.h"

namespace tailor::daemon {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Whether the peer of connected socket `fd` has gone: its end read (a close
// or a shutdown of its sending side), or the connection broken. Bytes
// waiting (a pipelined request) are left where they are.
bool peer_has_gone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  char c = 0;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// A Beast body that sends a FileBody: `length` bytes of a file from
// `offset` (Beast's own file_body always sends the whole file: a Range asks
// for less), or its parts in order (an archive), each file opened when its
// turn comes. A file that shrank, or one that leads outside its folder when
// opened, ends the response early (the client sees fewer bytes than the
// Content-Length said).
struct FileSliceBody {
  struct value_type {
    FileBody file;
    std::uint64_t total = 0;
  };

  static std::uint64_t size(const value_type& v) { return v.total; }

  class writer {
   public:
    using const_buffers_type = net::const_buffer;

    template <bool isRequest, class Fields>
    writer(http::header<isRequest, Fields>&, value_type& body) : body_(body), remain_(body.total) {}
    ~writer() {
      if (open_fd_ >= 0) ::close(open_fd_);
    }
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;

    void init(beast::error_code& ec) { ec = {}; }

    boost::optional<std::pair<const_buffers_type, bool>> get(beast::error_code& ec) {
      ec = {};
      if (remain_ == 0) return boost::none;
      const FileBody& f = body_.file;
      if (f.parts.empty()) return read_from(*f.fd, f.offset + (f.length - remain_), remain_, ec);
      while (index_ < f.parts.size() && done_ == f.parts[index_].size()) next_part();
      if (index_ == f.parts.size()) return boost::none;
      const BodyPart& p = f.parts[index_];
      if (p.path.empty()) {
        const std::size_t n = p.bytes.size() - static_cast<std::size_t>(done_);
        const char* at = p.bytes.data() + done_;
        done_ += n;
        remain_ -= n;
        return {{const_buffers_type(at, n), remain_ > 0}};
      }
      if (open_fd_ < 0) {
        open_fd_ = open_inside(p);
        if (open_fd_ < 0) {
          ec = http::error::short_read;
          return boost::none;
        }
      }
      return read_from(open_fd_, done_, p.length - done_, ec);
    }

   private:
    // Up to `want` bytes at `offset` of `fd` into buf_, counted as sent.
    boost::optional<std::pair<const_buffers_type, bool>> read_from(int fd, std::uint64_t offset, std::uint64_t want,
                                                                   beast::error_code& ec) {
      const auto amount = static_cast<std::size_t>(std::min<std::uint64_t>(want, sizeof buf_));
      ssize_t n;
      do {
        n = ::pread(fd, buf_, amount, static_cast<off_t>(offset));
      } while (n < 0 && errno == EINTR);
      if (n <= 0) {
        ec = http::error::short_read;  // the file shrank while it was sent, or cannot be read
        return boost::none;
      }
      const auto got = static_cast<std::uint64_t>(n);
      if (!body_.file.parts.empty()) done_ += got;
      remain_ -= got;
      return {{const_buffers_type(buf_, static_cast<std::size_t>(n)), remain_ > 0}};
    }

    void next_part() {
      if (open_fd_ >= 0) ::close(open_fd_);
      open_fd_ = -1;
      ++index_;
      done_ = 0;
    }

    // The part's file, opened without following a link at its end and
    // checked to lie inside its folder (a folder on the way may be a link).
    static int open_inside(const BodyPart& p) {
      const int fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return -1;
      std::error_code ec;
      const std::string opened = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec).string();
      struct stat st {};
      if (ec || opened.rfind(p.inside + "/", 0) != 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return -1;
      }
      return fd;
    }

    value_type& body_;
    std::uint64_t remain_;
    std::size_t index_ = 0;   // the part being sent
    std::uint64_t done_ = 0;  // of it
    int open_fd_ = -1;        // its file, once reached
    char buf_[64 << 10];
  };
};

class Session;

// The live connections, and among them those waiting for a request to
// arrive (a new connection, an idle keep-alive one, one dribbling its
// headers) in the order they began to wait. At the connection limit a new
// connection evicts the one that has waited longest, so connections that
// send nothing cannot starve clients that do; a connection whose request is
// being answered is never evicted.
struct ConnectionTable {
  std::atomic<int> live{0};
  std::mutex mu;
  std::map<std::uint64_t, std::weak_ptr<Session>> waiting;  // by the order they began to wait
  std::uint64_t next = 0;
  std::atomic<std::uint64_t> evicted{0};

  std::uint64_t enter(std::weak_ptr<Session> s) {
    std::lock_guard lock(mu);
    waiting.emplace(next, std::move(s));
    return next++;
  }
  void leave(std::uint64_t slot) {
    std::lock_guard lock(mu);
    waiting.erase(slot);  // nothing when an eviction took it already
  }
  // The longest-waiting session still alive, taken off the list.
  std::shared_ptr<Session> oldest_waiting() {
    std::lock_guard lock(mu);
    while (!waiting.empty()) {
      auto s = waiting.begin()->second.lock();
      waiting.erase(waiting.begin());
      if (s) return s;
    }
    return nullptr;
  }
};

// The open streams in the order they began, each with its owner. A stream
// that enters past the budget names the streams to close for it; those
// leave the table at once, so the counts are right before they have
// finished closing.
struct StreamTable {
  struct Open {
    std::string owner;
    std::weak_ptr<Session> session;
  };
  std::mutex mu;
  std::map<std::uint64_t, Open> open;  // by the order they began
  std::map<std::string, int> per_owner;
  std::uint64_t next = 0;
  std::atomic<int> count{0};
  std::atomic<std::uint64_t> evicted{0};

  std::uint64_t enter(const std::string& owner, std::weak_ptr<Session> s, int max_total, int max_owner,
                      std::vector<std::shared_ptr<Session>>& to_close) {
    std::lock_guard lock(mu);
    const std::uint64_t slot = next++;
    open.emplace(slot, Open{owner, std::move(s)});
    ++per_owner[owner];
    while (per_owner[owner] > std::max(1, max_owner) && take_oldest_of(owner, slot, to_close)) {
    }
    while (static_cast<int>(open.size()) > std::max(1, max_total)) {
      // The owner that holds the most gives way (the oldest stream of the
      // first such owner in the order of their oldest streams).
      std::string largest;
      int most = 0;
      for (const auto& [at, o] : open) {
        if (at != slot && per_owner[o.owner] > most) {
          most = per_owner[o.owner];
          largest = o.owner;
        }
      }
      if (most == 0 || !take_oldest_of(largest, slot, to_close)) break;
    }
    count = static_cast<int>(open.size());
    return slot;
  }
  void leave(std::uint64_t slot) {
    std::lock_guard lock(mu);
    const auto it = open.find(slot);
    if (it == open.end()) return;  // closed to make room: counted then
    if (--per_owner[it->second.owner] == 0) per_owner.erase(it->second.owner);
    open.erase(it);
    count = static_cast<int>(open.size());
  }

 private:
  // False when `keep` is all there is of `owner`.
  bool take_oldest_of(const std::string& owner, std::uint64_t keep, std::vector<std::shared_ptr<Session>>& to_close) {
    for (auto it = open.begin(); it != open.end(); ++it) {
      if (it->first == keep || it->second.owner != owner) continue;
      if (auto s = it->second.session.lock()) to_close.push_back(std::move(s));
      if (--per_owner[owner] == 0) per_owner.erase(owner);
      open.erase(it);
      ++evicted;
      return true;
    }
    return false;
  }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, const ServerOptions& options, const RequestHandler& handler,
          ConnectionTable& table, StreamTable& streams, net::thread_pool* workers)
      : stream_(std::move(socket)), options_(options), handler_(handler), table_(table), streams_(streams),
        workers_(workers), timer_(stream_.get_executor()) {
    ++table_.live;
  }
  ~Session() {
    stop_waiting();
    if (stream_slot_) streams_.leave(*stream_slot_);
    else --table_.live;
  }

  // From any thread: ends this stream on its own strand with its farewell
  // (the stream budget needs its place).
  void end_stream(std::string reason) {
    net::post(stream_.get_executor(), [self = shared_from_this(), reason = std::move(reason)]() mutable {
      self->closing_ = std::move(reason);
      self->timer_.cancel();  // a stream waiting for its next poll says goodbye now
    });
  }

  void run() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::read_request, shared_from_this()));
  }

  // From any thread: closes the connection on its own strand, which ends
  // the pending read, unless a request arrived meanwhile.
  void evict() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->slot_) self->close();
    });
  }

 private:
  void stop_waiting() {
    if (slot_) table_.leave(*slot_);
    slot_.reset();
  }

  void read_request() {
    slot_ = table_.enter(weak_from_this());
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    // A keep-alive connection waits idle_timeout for its next request, a
    // first request read_timeout; either bounds a slow-loris client.
    stream_.expires_after(first_ ? options_.read_timeout : options_.idle_timeout);
    first_ = false;
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    stop_waiting();
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec == http::error::body_limit) {
      return send(error_response(ApiError::kPayloadTooLarge,
                                 "request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes"),
                  false, true);
    }
    if (ec == http::error::header_limit) {
      return send(error_response(ApiError::kHeadersTooLarge, "request headers are too large"), false, true);
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
        return send(error_response(ApiError::kBadRequest, "malformed HTTP request: " + ec.message()), false, true);
      }
      return close();
    }
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(field.value());
    }
    req.body = std::move(msg.body());
    beast::error_code rec;
    const auto remote = stream_.socket().remote_endpoint(rec);
    if (!rec) req.remote = remote.address().to_string();
    const bool keep_alive = msg.keep_alive();
    if (!parse_target(req.target, req.path, req.query)) {
      return send(error_response(ApiError::kBadRequest, "malformed request target"), keep_alive, false);
    }
    if (workers_ != nullptr && options_.offload && options_.offload(req)) {
      // Handled on a worker; the answer is sent from this session's strand.
      // Nothing reads the socket meanwhile (the session waits for the
      // answer), so the worker may look at it.
      req.client_left = [fd = stream_.socket().native_handle()] { return peer_has_gone(fd); };
      net::post(*workers_, [self = shared_from_this(), req = std::move(req), keep_alive]() mutable {
        HttpResponse res = self->call_handler(req);
        net::post(self->stream_.get_executor(), [self, res = std::move(res), keep_alive]() mutable {
          self->send(std::move(res), keep_alive, false);
        });
      });
      return;
    }
    send(call_handler(req), keep_alive, false);
  }

  HttpResponse call_handler(HttpRequest& req) {
    try {
      return handler_(req);
    } catch (const std::exception& e) {
      log_error(std::string("tailord: handler threw: ") + e.what());
    } catch (...) {
      log_error("tailord: handler threw a non-exception");
    }
    return error_response(ApiError::kInternal, "internal error");
  }

  void send(HttpResponse res, bool keep_alive, bool drain) {
    if (res.stream) return start_stream(std::move(res));
    if (res.file) return send_file(std::move(res), keep_alive);
    auto out = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(res.status), 11);
    out->set(http::field::server, "tailord");
    out->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) out->set(k, v);
    out->keep_alive(keep_alive);
    out->body() = std::move(res.body);
    out->prepare_payload();
    stream_.expires_after(options_.write_timeout);
    http::async_write(stream_, *out, [self = shared_from_this(), out, keep_alive, drain](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      if (drain) return self->drain();
      if (!keep_alive) return self->close();
      self->read_request();
    });
  }

  void send_file(HttpResponse res, bool keep_alive) {
    auto out = std::make_shared<http::response<FileSliceBody>>(static_cast<http::status>(res.status), 11);
    out->set(http::field::server, "tailord");
    out->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) out->set(k, v);
    out->keep_alive(keep_alive);
    // The descriptor (shared) lives as long as the response.
    std::uint64_t total = res.file->length;
    if (!res.file->parts.empty()) {
      total = 0;
      for (const BodyPart& p : res.file->parts) total += p.size();
    }
    out->body().file = std::move(*res.file);
    out->body().total = total;
    out->prepare_payload();
    auto sr = std::make_shared<http::response_serializer<FileSliceBody>>(*out);
    write_file_part(out, sr, keep_alive);
  }

  // Piece by piece, each under the write timeout: a big file to a slow
  // client is fine, a client that stops reading is not.
  void write_file_part(const std::shared_ptr<http::response<FileSliceBody>>& out,
                       const std::shared_ptr<http::response_serializer<FileSliceBody>>& sr, bool keep_alive) {
    stream_.expires_after(options_.write_timeout);
    http::async_write_some(stream_, *sr,
                           [self = shared_from_this(), out, sr, keep_alive](beast::error_code ec, std::size_t) {
                             if (ec) return self->close();
                             if (!sr->is_done()) return self->write_file_part(out, sr, keep_alive);
                             if (!keep_alive) return self->close();
                             self->read_request();
                           });
  }

  // After refusing a request whose body is still arriving: stop sending,
  // read and discard the rest for a bounded time, then close, so the client
  // sees the response rather than a connection reset.
  void drain() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    scratch_.resize(64 << 10);
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code e, std::size_t n) {
      self->drained_ += n;
      if (e || self->drained_ > (64u << 20)) return self->close();
      self->drain_more();
    });
  }
  void drain_more() {
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code e, std::size_t n) {
      self->drained_ += n;
      if (e || self->drained_ > (64u << 20)) return self->close();
      self->drain_more();
    });
  }

  void start_stream(HttpResponse res) {
    poll_ = std::move(res.stream);
    farewell_ = std::move(res.stream_farewell);
    // From here on a stream, not a connection: it leaves the connection
    // budget for the stream budget.
    std::vector<std::shared_ptr<Session>> to_close;
    stream_slot_ = streams_.enter(res.stream_owner, weak_from_this(), options_.max_streams,
                                  options_.max_streams_per_owner, to_close);
    --table_.live;
    for (const auto& s : to_close) {
      s->end_stream("tailord's stream budget is full (" + std::to_string(options_.max_streams) + " in all, " +
                    std::to_string(options_.max_streams_per_owner) +
                    " per token): the oldest streams make room; reconnect later or poll");
    }
    stream_res_ = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(res.status), 11);
    stream_res_->set(http::field::server, "tailord");
    stream_res_->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) stream_res_->set(k, v);
    stream_res_->keep_alive(false);
    stream_res_->chunked(true);
    serializer_ = std::make_shared<http::response_serializer<http::empty_body>>(*stream_res_);
    stream_.expires_after(options_.write_timeout);
    http::async_write_header(stream_, *serializer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->watch_client();
      self->pump();
    });
  }

  // A stream's client has nothing more to send (the response closes the
  // connection), so a read that ends says it has gone, even while the
  // stream has nothing to write: the stream ends then, and its poll (with
  // what it holds, e.g. a generation to stop) is released at once rather
  // than at its next write. On the socket itself, outside the stream's
  // write timeouts.
  void watch_client() {
    scratch_.resize(512);
    stream_.socket().async_read_some(net::buffer(scratch_),
                                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                       if (!ec) return self->watch_client();  // bytes after the request: ignored
                                       self->timer_.cancel();
                                       self->close();
                                     });
  }

  void pump() {
    if (closing_) return say_farewell();
    std::string out;
    bool more = false;
    try {
      more = poll_(out);
    } catch (...) {
      more = false;
    }
    if (!out.empty()) {
      chunk_ = std::move(out);
      stream_.expires_after(options_.write_timeout);
      net::async_write(stream_, http::make_chunk(net::buffer(chunk_)),
                       [self = shared_from_this(), more](beast::error_code ec, std::size_t) {
                         if (ec) return self->close();
                         if (!more) return self->finish_stream();
                         self->wait_and_pump();
                       });
      return;
    }
    if (!more) return finish_stream();
    wait_and_pump();
  }

  void wait_and_pump() {
    if (closing_) return say_farewell();
    stream_.expires_never();
    timer_.expires_after(options_.stream_poll);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (self->closing_) return self->say_farewell();
      if (ec) return self->close();
      self->pump();
    });
  }

  // The stream's last words (the reason it is closed), then its end.
  void say_farewell() {
    std::string last = farewell_ ? farewell_(*closing_) : std::string();
    farewell_ = nullptr;
    closing_.reset();
    poll_ = [last = std::move(last)](std::string& out) mutable {
      out = std::move(last);
      return false;
    };
    pump();
  }

  void finish_stream() {
    stream_.expires_after(options_.write_timeout);
    net::async_write(stream_, http::make_chunk_last(),
                     [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  const ServerOptions& options_;
  const RequestHandler& handler_;
  ConnectionTable& table_;
  StreamTable& streams_;
  net::thread_pool* workers_;  // null: every request on the I/O threads
  std::optional<std::uint64_t> slot_;  // set while waiting for a request
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool first_ = true;
  std::string scratch_;
  std::size_t drained_ = 0;
  StreamPoll poll_;
  std::function<std::string(const std::string&)> farewell_;
  std::optional<std::uint64_t> stream_slot_;  // set once a stream: its place in the stream table
  std::optional<std::string> closing_;        // why the stream budget closes it
  std::string chunk_;
  net::steady_timer timer_;
  std::shared_ptr<http::response<http::empty_body>> stream_res_;
  std::shared_ptr<http::response_serializer<http::empty_body>> serializer_;
};

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  // Sessions hold references to options, handler and connections: declared
  // before ioc so they outlive the handlers ioc destroys.
  ServerOptions options;
  RequestHandler handler;
  ConnectionTable connections;
  StreamTable streams;
  net::io_context ioc;
  // After ioc: destroyed first, joined in stop() before ioc goes.
  std::optional<net::thread_pool> workers;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  std::once_flag stopped;
  tcp::endpoint bound;

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        std::shared_ptr<Session> victim;
        if (connections.live.load() >= options.max_connections) victim = connections.oldest_waiting();
        if (connections.live.load() >= options.max_connections && !victim) {
          // Every connection has a request in progress: this one waits for
          // a later try.
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          if (victim) {
            ++connections.evicted;
            victim->evict();
          }
          std::make_shared<Session>(std::move(socket), options, handler, connections, streams,
                                    workers ? &*workers : nullptr)
              ->run();
        }
      } else {
        log_warning("tailord: accept: " + ec.message());
      }
      accept();
    });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ServerOptions& options, RequestHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  beast::error_code ec;
  const auto address = net::ip::make_address(options.address, ec);
  if (ec) return Status::invalid_argument("listen address '" + options.address + "': " + ec.message());
  const tcp::endpoint endpoint(address, options.port);
  const std::string where = options.address + ":" + std::to_string(options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (ec) return Status::unavailable("cannot listen on " + where + ": " + ec.message());
  impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable("cannot listen on " + where + ": " + ec.message());
  impl->bound = impl->acceptor.local_endpoint(ec);
  if (options.offload) impl->workers.emplace(static_cast<std::size_t>(std::max(1, options.worker_threads)));
  impl->accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl->threads.emplace_back([p = impl.get()] {
      for (;;) {
        try {
          p->ioc.run();
          return;
        } catch (const std::exception& e) {
          // A handler escaping an exception must not take the server down.
          log_error(std::string("tailord: io thread: ") + e.what());
        }
      }
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::uint16_t HttpServer::port() const { return impl_->bound.port(); }
std::string HttpServer::address() const { return impl_->bound.address().to_string(); }
int HttpServer::connections() const { return impl_->connections.live.load(); }
std::uint64_t HttpServer::evicted_connections() const { return impl_->connections.evicted.load(); }
int HttpServer::streams() const { return impl_->streams.count.load(); }
std::uint64_t HttpServer::evicted_streams() const { return impl_->streams.evicted.load(); }

void HttpServer::stop() {
  if (!impl_) return;
  std::call_once(impl_->stopped, [this] {
    net::post(impl_->ioc, [p = impl_.get()] {
      beast::error_code ec;
      p->acceptor.close(ec);
    });
    impl_->ioc.stop();
    for (auto& t : impl_->threads) {
      if (t.joinable()) t.join();
    }
    // A request in progress finishes (its answer, posted to the stopped
    // io_context, is dropped with it); none starts after this.
    if (impl_->workers) {
      impl_->workers->stop();
      impl_->workers->join();
    }
  });
}

}  // namespace tailor::daemon
