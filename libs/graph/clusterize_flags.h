// The rules between clusterize's command-line options, here rather than in apps/ravnest so that
// every program that plans (and a test) gets the same answer: which flags need which mode, and
// the words for a mode, a schedule and a codec.
#pragma once

#include <string>

#include "libs/graph/clusterize.h"

namespace ravnest::graph {

// The words of a `ravnest clusterize` command line that ClusterizeOptions holds as values, and
// whether the flags that only some modes take were given.
struct ClusterizeFlags {
  std::string mode = "pipeline";  // pipeline, ps or hybrid
  std::string schedule;           // empty, gpipe, 1f1b or async
  std::string compression;        // empty, none, fp16, bf16 or int8
  bool servers_given = false;     // --servers
  bool evaluator_given = false;   // --evaluator
  bool on_server_given = false;   // --on-server
};

// Sets options.mode, options.planning.schedule and its codecs from `flags`, and checks the rules
// between them and options.planning's counts. Throws std::runtime_error with one line starting
// "ravnest clusterize: " and naming the flag. Leaves `options` as it was when it throws.
void apply_clusterize_flags(const ClusterizeFlags& flags, ClusterizeOptions& options);

}  // namespace ravnest::graph
