// ravnest train JOB (or --attach, --resume) and ravnest resume [JOB]: run a job on the plan's
// daemons and follow it until it ends; Ctrl-C stops it on every node at one update boundary.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/progress_view.h"
#include "apps/ravnest/traffic_view.h"
#include "libs/requester/job_identity.h"

namespace ravnest::cli {
namespace {

int run_train(const Connection& c, const std::string& job, bool detach, bool resume,
              bool attach) {
  auto requester = c.open();
  requester::TrainOptions options;
  options.detach = detach;
  options.resume = resume;
  // Ctrl-C or SIGTERM stops the job on every node instead of leaving it running unwatched.
  catch_interrupts();
  options.interrupted = interrupted;
  const bool tty = ::isatty(STDOUT_FILENO);
  size_t drawn = 0;
  options.log = [&](const std::string& line) {
    if (tty && drawn) std::cout << "\033[" << drawn << "A\033[J";
    drawn = 0;
    say(line);
  };
  // Redrawn at most ten times a second: events come with every batch of every cluster.
  auto last_drawn = std::chrono::steady_clock::time_point{};
  options.on_progress = [&](const std::vector<requester::TrainProgress>& clusters) {
    if (!tty) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn && now - last_drawn < std::chrono::milliseconds(100)) return;
    last_drawn = now;
    if (drawn) std::cout << "\033[" << drawn << "A";
    for (const auto& p : clusters) std::cout << "\033[2K" << progress_line(p) << '\n';
    drawn = clusters.size();
    std::cout << std::flush;
  };
  requester::TrainResult result;
  try {
    result = attach ? requester.attach(options) : requester.train(job, options);
  } catch (const requester::TrainInterrupted& e) {
    if (tty && drawn) std::cout << "\033[" << drawn << "A\033[J" << std::flush;
    std::string line;
    if (e.stopped_by.empty()) {
      const std::string signal = interrupt_signal() == SIGTERM ? "SIGTERM" : "SIGINT";
      line = "ravnest: interrupted (" + signal + "): job " + std::to_string(e.job_id);
    } else {
      // A node's daemon was stopped and asked for this stop (a plan of several clusters).
      line = "ravnest: " + e.stopped_by + ": job " + std::to_string(e.job_id);
    }
    line += e.not_stopped.empty() ? " stopped on every node"
                                  : " stopped, except on " + joined(e.not_stopped);
    if (!e.stopped_by.empty() && e.boundary && e.not_stopped.empty()) {
      line += " after update " + std::to_string(*e.boundary) +
              "; `ravnest resume` continues it from update " + std::to_string(*e.boundary);
    } else {
      line += "; `ravnest resume` continues it from its last checkpoint";
      if (e.stopped_by.empty()) line += " (`--detach` leaves a job running)";
    }
    std::cerr << line << '\n';
    return 130;
  }
  if (detach) {
    say("job " + std::to_string(result.job_id) + " runs detached; `ravnest status` shows it");
    return 0;
  }
  for (const auto& p : result.clusters) say(progress_line(p));
  std::printf("training finished in %s\n", format_duration(result.seconds).c_str());
  std::printf("%s", traffic_table(requester.status()).c_str());
  return 0;
}

struct TrainCommand {
  Connection connection;
  std::string job;
  bool detach = false, resume = false, attach = false;
};

}  // namespace

std::vector<Command> add_train_and_resume(CLI::App& app) {
  auto t = std::make_shared<TrainCommand>();
  auto* train = app.add_subcommand("train", "Run a training job on the plan's daemons");
  train->add_option("job", t->job, "job file (TOML), see docs/job-file.md");
  train->add_flag("--detach", t->detach, "start the job and return; `ravnest status` follows it");
  train->add_flag("--attach", t->attach,
                  "follow the job that runs on the plan's nodes instead of starting one");
  train->add_flag("--resume", t->resume,
                  "continue from the newest checkpoint every node holds (docs/faults.md)");
  add_connection_options(train, t->connection);

  auto r = std::make_shared<TrainCommand>();
  auto* resume = app.add_subcommand(
      "resume", "Continue the plan's last job (or JOB) from the newest checkpoint every node holds");
  resume->add_option("job", r->job, "job file (default: the last one trained)");
  resume->add_flag("--detach", r->detach, "start the job and return; `ravnest status` follows it");
  add_connection_options(resume, r->connection);

  return {{train,
           [t] {
             if (t->job.empty() && !t->attach) {
               throw std::runtime_error(
                   "ravnest train: name the job file (or --attach to a running job)");
             }
             if (t->attach && (t->detach || t->resume)) {
               throw std::runtime_error("ravnest train: --attach follows a running job; it takes "
                                        "no --detach or --resume");
             }
             return run_train(t->connection, t->job, t->detach, t->resume, t->attach);
           }},
          {resume, [r] {
             const std::string job =
                 r->job.empty() ? requester::last_job_path(r->connection.plan_dir) : r->job;
             return run_train(r->connection, job, r->detach, /*resume=*/true, /*attach=*/false);
           }}};
}

}  // namespace ravnest::cli
