// Every subcommand of `ravnest`, one file each in apps/ravnest/commands/. Each add_* adds its
// subcommand (flags, help) to `app`; the Command's run is what it does once parsed.
#pragma once

#include <vector>

#include "apps/ravnest/commands/command.h"

namespace ravnest::cli {

Command add_clusterize(CLI::App& app);    // clusterize.cpp
Command add_push(CLI::App& app);          // push.cpp
std::vector<Command> add_train_and_resume(CLI::App& app);  // train.cpp: train, resume
Command add_replace(CLI::App& app);       // replace.cpp
Command add_join(CLI::App& app);          // join.cpp
Command add_status(CLI::App& app);        // status.cpp
Command add_losses(CLI::App& app);        // losses.cpp
Command add_stop(CLI::App& app);          // stop.cpp
Command add_fuse(CLI::App& app);          // fuse.cpp
Command add_predict(CLI::App& app);       // predict.cpp
Command add_dashboard(CLI::App& app);     // dashboard.cpp
Command add_evaluate(CLI::App& app);      // evaluate.cpp
Command add_probe_memory(CLI::App& app);  // probe_memory.cpp (hidden: clusterize's probe)
Command add_bench(CLI::App& app);         // bench.cpp: bench allreduce
Command add_local(CLI::App& app);         // local.cpp: N daemons on this machine
Command add_pool(CLI::App& app);          // pool.cpp: pool add, pool remove, pool --tracker
Command add_tracker(CLI::App& app);       // tracker.cpp: the tracker service

}  // namespace ravnest::cli
