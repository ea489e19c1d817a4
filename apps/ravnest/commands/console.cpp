#include "apps/ravnest/commands/console.h"

#include <signal.h>

#include <iostream>

namespace ravnest::cli {
namespace {

// Set by SIGINT or SIGTERM once catch_interrupts() ran.
volatile sig_atomic_t g_interrupted = 0;

void on_interrupt(int signal) {
  g_interrupted = signal;
  // A second one ends the process at once.
  ::signal(signal, SIG_DFL);
}

}  // namespace

void say(const std::string& line) { std::cout << line << '\n' << std::flush; }

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "; " : "") + lines[i];
  return out;
}

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

bool interrupted() { return g_interrupted != 0; }

int interrupt_signal() { return g_interrupted; }

}  // namespace ravnest::cli
