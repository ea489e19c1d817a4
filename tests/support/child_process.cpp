#include "tests/support/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

namespace ravnest::test {

ChildProcess::ChildProcess(std::vector<std::string> args, const std::string& log) {
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("cannot fork for " + args.at(0));
  if (pid_ == 0) {
    FILE* out = std::freopen(log.c_str(), "a", stderr);
    if (out == nullptr) _exit(127);
    ::dup2(::fileno(stderr), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
}

void ChildProcess::kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace ravnest::test
