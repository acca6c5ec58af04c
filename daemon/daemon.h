// tailord assembled: the store, the supervisor (scheduler + local
// executor), the API and the HTTP server, over one data folder:
//   DATA/tailor.db    SQLite store (WAL)
//   DATA/token        API bearer token (0600); DATA/token.read, the read-only one
//   DATA/sessions     the web UI's sign-ins (0600; http/sessions.h)
//   DATA/address      the bound HOST:PORT, written once listening
//   DATA/tailord.lock held while a daemon uses DATA (one daemon per folder)
//   DATA/jobs/ID/     plan.json, runner.log, metrics.jsonl, events.jsonl, checkpoints/
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "daemon/config.h"

namespace tailor::daemon {

class Daemon {
 public:
  // Recovers jobs left by an earlier daemon, then starts serving.
  static Result<std::unique_ptr<Daemon>> start(const DaemonConfig& config);
  ~Daemon();

  std::string address() const;  // "127.0.0.1:8470"
  // Stops the server and the supervisor. Runners keep running: the next
  // daemon on this folder re-adopts them.
  void stop();

  struct Parts;

 private:
  explicit Daemon(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace tailor::daemon
