// tailord: the Tailor daemon. Thin: configuration, signals, Daemon.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "core/log.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/serving/model_server.h"

extern char** environ;

int main(int argc, char** argv) {
  using namespace tailor::daemon;
  if (argc > 1 && std::string(argv[1]) == "serve") {
    return run_model_server(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
  }
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  bool help = false;
  auto config = load_config(std::vector<std::string>(argv + 1, argv + argc), env, help);
  if (help) {
    std::cout << kDaemonHelp;
    return 0;
  }
  if (!config.is_ok()) {
    std::cerr << "tailord: " << config.status().message() << "\n";
    return 2;
  }
  // Signals are taken synchronously by sigwait below: blocked before any
  // thread starts so no thread receives them (runners unblock them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = Daemon::start(*config);
  if (!daemon.is_ok()) {
    std::cerr << "tailord: " << daemon.status().message() << "\n";
    return 1;
  }
  std::fprintf(stderr, "tailord: listening on %s\n", (*daemon)->address().c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "tailord: signal %d: stopping (running jobs keep running and are re-adopted at the next start)\n", sig);
  (*daemon)->stop();
  return 0;
}
