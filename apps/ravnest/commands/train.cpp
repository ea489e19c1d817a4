// ravnest train JOB (or --attach, --resume) and ravnest resume [JOB]: run a job on the plan's
// daemons and follow it until it ends. Ctrl-C stops a job this command started on every node at
// one update boundary; `train --attach` only watches, so there Ctrl-C detaches and the job goes on.
// On a terminal the clusters' progress is a bar redrawn in place; piped or in a file, a record per
// cluster every --progress-every seconds. With --elastic --tracker, the tracker's pool is followed
// beside the job (docs/tracker.md#elastic-jobs).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/live_lines.h"
#include "apps/ravnest/progress_view.h"
#include "apps/ravnest/traffic_view.h"
#include "libs/requester/elastic_follower.h"
#include "libs/requester/elastic_resume.h"
#include "libs/requester/job_identity.h"

namespace ravnest::cli {
namespace {

constexpr double kDefaultProgressSeconds = 10;

// --progress-every when given, else $RAVNEST_PROGRESS_SECONDS, else 10; 0 turns records off.
double progress_seconds(double flag) {
  if (flag >= 0) return flag;
  const char* env = std::getenv("RAVNEST_PROGRESS_SECONDS");
  if (!env || !*env) return kDefaultProgressSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (*end != '\0' || !(seconds >= 0)) {
    throw std::runtime_error(std::string("$RAVNEST_PROGRESS_SECONDS: \"") + env +
                             "\" is not a number of seconds (0 or more)");
  }
  return seconds;
}

// `elastic_tracker`: --tracker with --elastic (docs/tracker.md#elastic-jobs): a lost node is
// replaced by an idle one without a person, or its cluster stays dropped, providers that register
// mid-job join as one more cluster (requester::ElasticFollower), and a provider stopped with
// SIGTERM hands its slot over (requester::hand_over, then this again with resume), and a job
// that failed with no cluster left has its lost node replaced and is resumed
// (requester::replace_after_failure), or, failed on a lost connection with every node
// answering, resumed with the same nodes (at most `link_resumes_left` more times); implies
// drop_failed_clusters. Empty: no elastic follower.
int run_train(const Connection& c, const std::string& job, bool detach, bool resume,
              bool attach, double record_seconds, bool drop_failed_clusters = false,
              const std::string& elastic_tracker = "",
              int link_resumes_left = requester::kLinkResumes) {
  auto requester = c.open();
  requester::TrainOptions options;
  options.detach = detach;
  options.drop_failed_clusters = drop_failed_clusters || !elastic_tracker.empty();
  // A cluster dropped on a lost connection comes back with its own nodes once they answer again.
  if (!elastic_tracker.empty()) options.link_rejoins = requester::kLinkResumes;
  options.resume = resume;
  // Ctrl-C or SIGTERM stops the job on every node instead of leaving it running unwatched (or,
  // attached, stops following it: Requester::attach).
  catch_interrupts();
  options.interrupted = interrupted;
  // The elastic follower says its lines from its own thread: one lock for every use of `live`.
  std::mutex output;
  LiveLines live;
  const bool tty = live.tty();
  options.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(output);
    live.say(line);
  };
  // Not on a terminal (a pipe, a log file): a record per cluster every record_seconds, the
  // first one record_seconds after the start.
  auto last_record = std::chrono::steady_clock::now();
  options.on_progress = [&](const std::vector<requester::TrainProgress>& clusters) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty) {
      if (record_seconds <= 0 ||
          now - last_record < std::chrono::duration<double>(record_seconds)) {
        return;
      }
      last_record = now;
      for (const auto& p : clusters) say(progress_record(p));
      return;
    }
    // Redrawn at most ten times a second: events come with every batch of every cluster.
    std::vector<std::string> lines;
    for (const auto& p : clusters) lines.push_back(progress_line(p));
    std::lock_guard<std::mutex> lock(output);
    live.draw(lines);
  };
  // Declared after `live` and `output`, which its thread uses: stopped before they go.
  requester::ElasticOptions follow;
  std::unique_ptr<requester::ElasticFollower> elastic;
  if (!elastic_tracker.empty()) {
    follow.tracker = elastic_tracker;
    follow.plan_dir = c.plan_dir;
    follow.secret = c.secret();
    follow.insecure = c.insecure;
    follow.log = options.log;
    elastic = std::make_unique<requester::ElasticFollower>(follow);
    // A dropped node whose relay changed is asked where the pool has it now.
    requester::ElasticFollower* follower = elastic.get();
    options.live_addresses = [follower]() { return follower->live_addresses(); };
  }
  requester::TrainResult result;
  try {
    result = attach ? requester.attach(options) : requester.train(job, options);
  } catch (const requester::TrainInterrupted& e) {
    elastic.reset();
    // --elastic: a provider stopped gracefully (SIGTERM) hands its slot to an idle node at the
    // update every node stopped after, and the job resumes from there with it.
    if (!elastic_tracker.empty() && !attach && !e.stopped_by.empty() && e.boundary &&
        e.not_stopped.empty()) {
      std::optional<std::string> handed;
      try {
        handed = requester::hand_over(follow, e.stopped_by, e.job_id, *e.boundary);
      } catch (const std::exception& error) {
        options.log(std::string("elastic: no handover: ") + error.what());
      }
      if (handed) {
        live.clear();
        return run_train(c, job, false, /*resume=*/true, false, record_seconds,
                         drop_failed_clusters, elastic_tracker, link_resumes_left);
      }
    }
    live.clear();
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
  } catch (const requester::TrainFailed& e) {
    elastic.reset();
    if (elastic_tracker.empty() || attach) throw;
    // --elastic, no cluster left to train on (a plan of one cluster): a node the tracker lost is
    // replaced by an idle one, and the job resumes from the newest checkpoint every node holds;
    // a lost connection with every node answering resumes with the same nodes.
    std::optional<requester::AfterFailure> after;
    try {
      after = requester::replace_after_failure(follow, e, link_resumes_left, interrupted);
    } catch (const std::exception& error) {
      options.log(std::string("elastic: no replacement: ") + error.what());
    }
    if (!after) throw;
    live.clear();
    return run_train(c, job, false, /*resume=*/true, false, record_seconds, drop_failed_clusters,
                     elastic_tracker, link_resumes_left - (after->replaced ? 0 : 1));
  }
  elastic.reset();  // the job ended: nothing more to follow
  if (result.detached) {
    live.clear();
    std::cerr << "ravnest: detached from job " << result.job_id
              << "; it goes on: `ravnest stop` stops it, `ravnest train --attach` follows it "
                 "again\n";
    return 0;
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
  bool detach = false, resume = false, attach = false, drop_failed_clusters = false;
  bool elastic = false;
  std::string tracker;  // --tracker, which --elastic follows
  double progress_every = -1;  // not given
};

void add_progress_option(CLI::App* cmd, TrainCommand& t) {
  cmd->add_option("--progress-every", t.progress_every,
                  "when stdout is not a terminal, a progress record per cluster every SECONDS "
                  "(default: $RAVNEST_PROGRESS_SECONDS, else 10; 0: none)")
      ->check([](const std::string& value) {
        try {
          size_t used = 0;
          if (std::stod(value, &used) >= 0 && used == value.size()) return std::string();
        } catch (const std::exception&) {
        }
        return std::string("must be a number of seconds, 0 or more");
      });
}

}  // namespace

std::vector<Command> add_train_and_resume(CLI::App& app) {
  auto t = std::make_shared<TrainCommand>();
  auto* train = app.add_subcommand("train", "Run a training job on the plan's daemons");
  train->add_option("job", t->job, "job file (TOML), see docs/job-file.md");
  train->add_flag("--detach", t->detach, "start the job and return; `ravnest status` follows it");
  train->add_flag("--attach", t->attach,
                  "follow the job that runs on the plan's nodes instead of starting one (Ctrl-C "
                  "then detaches; `ravnest stop` stops the job)");
  train->add_flag("--resume", t->resume,
                  "continue from the newest checkpoint every node holds (docs/faults.md)");
  train->add_flag("--drop-failed-clusters", t->drop_failed_clusters,
                  "a plan of several clusters: a cluster whose node fails is dropped from the "
                  "rings and the others go on (docs/faults.md#providers-that-come-and-go)");
  train->add_flag("--elastic", t->elastic,
                  "follow --tracker: a node that stops heartbeating is replaced by an idle "
                  "registered node that fits, or its cluster dropped, without a person; providers "
                  "registering mid-job join as one more cluster; a provider stopped with SIGTERM "
                  "hands over to an idle node; implies --drop-failed-clusters "
                  "(docs/tracker.md#elastic-jobs)");
  train->add_option("--tracker", t->tracker, "the tracker HOST:PORT that --elastic follows");
  add_progress_option(train, *t);
  add_connection_options(train, t->connection);

  auto r = std::make_shared<TrainCommand>();
  auto* resume = app.add_subcommand(
      "resume", "Continue the plan's last job (or JOB) from the newest checkpoint every node holds");
  resume->add_option("job", r->job, "job file (default: the last one trained)");
  resume->add_flag("--detach", r->detach, "start the job and return; `ravnest status` follows it");
  add_progress_option(resume, *r);
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
             if (t->elastic != !t->tracker.empty()) {
               throw std::runtime_error(t->elastic
                                            ? "ravnest train: --elastic needs --tracker HOST:PORT"
                                            : "ravnest train: --tracker is for --elastic");
             }
             if (t->elastic && t->detach) {
               throw std::runtime_error("ravnest train: --elastic follows the job; it takes no "
                                        "--detach");
             }
             return run_train(t->connection, t->job, t->detach, t->resume, t->attach,
                              progress_seconds(t->progress_every), t->drop_failed_clusters,
                              t->elastic ? t->tracker : "");
           }},
          {resume, [r] {
             const std::string job =
                 r->job.empty() ? requester::last_job_path(r->connection.plan_dir) : r->job;
             return run_train(r->connection, job, r->detach, /*resume=*/true, /*attach=*/false,
                              progress_seconds(r->progress_every));
           }}};
}

}  // namespace ravnest::cli
