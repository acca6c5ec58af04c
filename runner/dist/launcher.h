// tailor-runner as the launcher of a multi-rank job on one machine: it
// starts one copy of itself per rank (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT set, the cores split between them), supervises
// them as one job and exits with the job's outcome, so `tailor run` and
// tailord start and signal a single process whatever the rank count.
//  - SIGTERM/SIGINT are passed on to every rank (they agree on a step to
//    stop at and checkpoint);
//  - the first rank to fail stops the others at once (SIGKILL): a dead peer
//    would only make their next collective fail;
//  - the launcher dying kills the ranks (PR_SET_PDEATHSIG);
//  - rank 0 writes metrics.jsonl and events.jsonl, rank R>0 its events to
//    events.rank-R.jsonl; when a rank other than 0 decided the outcome, its
//    terminal event (or, killed by a signal, an error saying which) is
//    appended to events.jsonl with "rank", so the file's last line is the
//    job's outcome as for one process (runner/protocol/events.h).
// Torch-free.
#pragma once

#include <string>
#include <vector>

#include "runner/protocol/exit_code.h"

namespace tailor::runner::dist {

struct LaunchOptions {
  int world = 1;
  std::string executable = "/proc/self/exe";
  std::vector<std::string> args;  // the ranks' arguments (without the program name)
  int threads = 1;                // cores to split between the ranks
  std::string out_dir;            // where the ranks' events files are
  // What the ranks run, for the launcher's last line ("rank 1 ended the
  // job (...)"), and whether the deciding rank's terminal event goes to
  // events.jsonl: the ranks probing one candidate of a plan are not the
  // job, and what they measured is their own report.
  std::string what = "the job";
  bool record_outcome = true;
};

// Runs the ranks to the end; the job's exit status (exit_code.h).
int launch_ranks(const LaunchOptions& options);

// SIGTERM and SIGINT caught from now on, to be passed on to the ranks
// (launch_ranks does it itself; a launcher with work of its own before the
// ranks start calls it first). A signal caught before launch_ranks starts
// none and is a cancellation.
void catch_stop_signals();

// The signal (SIGTERM, SIGINT) caught, 0 when none came: a launcher that
// starts ranks again and again (a probe of each candidate, then training)
// stops at the first.
int stop_signal();

// A loopback port nobody listens on now (0 when none could be found), for
// rank 0's rendezvous.
int free_loopback_port();

// The events file of `rank` under `out_dir`.
std::string rank_events_path(const std::string& out_dir, int rank);

// How the job ended, from each rank's exit status (0..255, or 128+signal when
// killed) in the order they ended: the first failure decides; all done is
// done. Pure, so the table of cases is a unit test.
struct RankExit {
  int rank = 0;
  int status = 0;     // exit status when !signaled
  bool signaled = false;
  int signal = 0;
};
struct JobOutcome {
  RunnerExit exit = RunnerExit::kOk;
  int deciding_rank = -1;  // -1: no rank failed
};
JobOutcome job_outcome(const std::vector<RankExit>& in_order);

}  // namespace tailor::runner::dist
