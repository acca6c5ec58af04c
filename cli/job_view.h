// How the client commands show tailord's jobs: tables, one-line progress
// (step/total, loss, tokens/s, memory, ETA) and following a job to its end.
// CLI-internal.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/rest_client.h"

namespace tailor::cli {

using Json = nlohmann::ordered_json;

bool is_terminal_state(const std::string& state);

// succeeded 0, cancelled kExitCancelled, failed kExitRunFailed.
int exit_code_for_state(const std::string& state);

// GET a JSON resource; a non-2xx answer becomes an error carrying the
// daemon's message (and 401 a hint about the token).
Result<Json> get_json(const RestClient& client, const std::string& target);
Status http_error(const HttpResponse& r, const Endpoint& e);

// What a progress line shows, from a job, its runner's start event and its
// newest step metric.
struct Progress {
  std::string name, state;
  std::int64_t step = 0, total = 0;
  double loss = -1, tokens_per_second = 0;
  double mfu = -1;  // model FLOPs utilisation; -1: not reported (the CPU, an unknown GPU)
  std::int64_t peak_bytes = 0;
  double eta_seconds = -1;
};

// "[#####.....] step 40/200  loss 2.3104  5120 tok/s  MFU 41.2%  mem 180.4 MiB  ETA 1m12s"
std::string progress_line(const Progress& p, bool bar);

// "1m12s", "2h05m", "45s".
std::string format_duration(double seconds);

// Rows as aligned columns, each as wide as its widest cell and two spaces
// apart, so that no cell (a 63-character job name) runs into the next; the
// last column is not padded. Cells are counted in bytes (ASCII tables).
std::string format_columns(const std::vector<std::vector<std::string>>& rows);

// How following a job rides out a tailord that cannot be reached (it
// restarts; the job goes on): it retries every `interval`, with a fresh
// client from `client` when set (a restarted tailord on an ephemeral port
// has a new DATA_DIR/address), and gives up after `window` without an
// answer.
struct Reconnect {
  std::function<Result<RestClient>()> client;
  std::chrono::milliseconds window{std::chrono::seconds(120)};
  std::chrono::milliseconds interval{std::chrono::milliseconds(500)};
};

// --reconnect SECONDS (default 120; 0 gives up at once) with a client
// re-resolved from the command's --addr/--data-dir/... each time.
Result<Reconnect> reconnect_options(const Args& args);
extern const char* const kReconnectHelp;

// Follows a job through its server-sent event stream (one connection, no
// polling; resumed where it stopped after a reconnect) until it reaches a
// terminal state, redrawing a progress line on stderr when `redraw` (a
// terminal) and printing a plain line every ~5% of the steps otherwise,
// plus the job's notable events (re-plans, OOM, retries). Returns the final
// job; Unavailable when tailord stayed unreachable for the whole reconnect
// window (the job's outcome unknown).
Result<Json> follow_job(const RestClient& client, const std::string& id, Streams io, bool redraw, bool quiet,
                        const Reconnect& reconnect = {});

// A client command's usage text followed by the remote flags' and --help.
std::string help_of(const char* usage);

// The common part of a client command: its client and --output format.
struct Remote {
  std::optional<RestClient> client;
  std::string output = "text";
  int exit_code = kExitOk;
};

// Reads --output (text or json) and the endpoint flags; on failure `client`
// is empty and `exit_code` says why (kExitUsage, with the message on stderr).
Remote connect_remote(const Args& args, const char* name, Streams io);

// Reports `s` as command `name`'s failure: kExitInvalid for something not
// found, kExitRunFailed otherwise.
int fail_command(const char* name, const Status& s, Streams io);

// True when `io.err` is the process' stderr and that is a terminal.
bool stderr_is_terminal(Streams io);

}  // namespace tailor::cli
