// What every subcommand of `ravnest` shares with the terminal: its output lines, and Ctrl-C.
#pragma once

#include <string>
#include <vector>

namespace ravnest::cli {

// Writes `line` and a newline to stdout, flushed (progress must show while a job runs).
void say(const std::string& line);

// The lines joined by "; ", for one line.
std::string joined(const std::vector<std::string>& lines);

// From now on SIGINT and SIGTERM set interrupted() instead of ending the process, so that a
// command following a job (train, predict, dashboard) stops it on every node; a second signal
// ends the process at once.
void catch_interrupts();
bool interrupted();
// The signal that interrupted (SIGINT or SIGTERM), 0 when none did.
int interrupt_signal();

}  // namespace ravnest::cli
