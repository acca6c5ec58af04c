#include "platform/signals.h"

#include <signal.h>

#include <atomic>

namespace tailor::platform {
namespace {

// Read by the handler: a pid and a flag, lock-free and async-signal-safe.
std::atomic<pid_t> g_child{-1};
std::atomic<int> g_received{0};

void forward(int sig) {
  int none = 0;
  g_received.compare_exchange_strong(none, sig);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
}

}  // namespace

SignalForwarder::SignalForwarder(pid_t child) {
  g_received.store(0);
  g_child.store(child);
  struct sigaction sa{};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGHUP, &sa, &old_hup_);
}

SignalForwarder::~SignalForwarder() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
  g_child.store(-1);
}

int SignalForwarder::received() const { return g_received.load(); }

}  // namespace tailor::platform
