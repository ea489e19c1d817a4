// ChildProcess: a command run as a child of the test (a tracker, a dashboard), its stdout and
// stderr appended to a log file; killed (SIGKILL) and reaped on destruction unless kill() came
// first. Not thread-safe. The constructor throws std::runtime_error when fork fails; a command
// that cannot be executed exits 127 (what its log and a status call show).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ravnest::test {

class ChildProcess {
 public:
  // args[0] is the executable's path (no PATH search).
  ChildProcess(std::vector<std::string> args, const std::string& log);
  ~ChildProcess() { kill(9); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `signal` and waits for the child to end (blocks); nothing once it has ended.
  void kill(int signal);

 private:
  pid_t pid_ = -1;
};

}  // namespace ravnest::test
