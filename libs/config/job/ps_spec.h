// PsSpec: the [ps] table of a job file, how the servers of a parameter-server plan
// (docs/parameter-server.md) combine their workers' gradients:
//
//   [ps]
//   mode = "sync"        # sync: every worker's gradient, averaged (the default)
//                        # backup: the first `backup` of them each step; the late ones are dropped
//                        # async: each gradient as it comes, unless computed on weights more than
//                        #   `max_staleness` updates old (then dropped)
//   backup = 2           # backup only: 1 <= backup <= workers
//   max_staleness = 4    # async only: >= 0
//   eval_freq = 20       # the evaluator scores the server's weights every eval_freq updates and
//                        # at the end; 0 (default): at the end only
//
// A job with [ps] needs a parameter-server plan; one without runs such a plan in sync mode.
#pragma once

#include <cstdint>

namespace ravnest::config {

enum class PsMode { kSync, kBackup, kAsync };
const char* to_string(PsMode mode);  // "sync", "backup", "async"

struct PsSpec {
  bool present = false;  // the job file has [ps]
  PsMode mode = PsMode::kSync;
  int backup = 0;          // kBackup
  int max_staleness = 0;   // kAsync
  int64_t eval_freq = 0;
};

}  // namespace ravnest::config
