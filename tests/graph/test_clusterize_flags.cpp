// graph::apply_clusterize_flags: the rules between `ravnest clusterize`'s options, without a
// model or a process.
#include <catch2/catch.hpp>

#include <string>

#include "libs/graph/clusterize_flags.h"

using ravnest::graph::ClusterizeFlags;
using ravnest::graph::ClusterizeOptions;
using ravnest::graph::PlanMode;

namespace {

// The message apply_clusterize_flags throws, or "" when it accepts.
std::string refusal(const ClusterizeFlags& flags, ClusterizeOptions options = {}) {
  try {
    ravnest::graph::apply_clusterize_flags(flags, options);
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("clusterize flags: the modes and what each takes") {
  ClusterizeOptions options;
  ClusterizeFlags flags;
  ravnest::graph::apply_clusterize_flags(flags, options);
  CHECK(options.mode == PlanMode::kPipeline);
  flags.mode = "ps";
  flags.servers_given = flags.evaluator_given = true;
  ravnest::graph::apply_clusterize_flags(flags, options);
  CHECK(options.mode == PlanMode::kParameterServer);
  flags.mode = "hybrid";
  flags.on_server_given = true;
  ravnest::graph::apply_clusterize_flags(flags, options);
  CHECK(options.mode == PlanMode::kHybrid);

  ClusterizeFlags bad;
  bad.mode = "pipelines";
  CHECK(refusal(bad) ==
        "ravnest clusterize: --mode must be pipeline, ps or hybrid, got \"pipelines\"");
  ClusterizeFlags servers;
  servers.servers_given = true;
  CHECK(refusal(servers) == "ravnest clusterize: --servers and --evaluator need --mode ps or hybrid");
  ClusterizeFlags on_server;
  on_server.mode = "ps";
  on_server.on_server_given = true;
  CHECK(refusal(on_server) == "ravnest clusterize: --on-server needs --mode hybrid");
}

TEST_CASE("clusterize flags: schedule, compression and counts") {
  ClusterizeOptions options;
  ClusterizeFlags flags;
  flags.schedule = "async";
  flags.compression = "bf16";
  options.planning.max_in_flight = 3;
  ravnest::graph::apply_clusterize_flags(flags, options);
  CHECK(options.planning.schedule == ravnest::config::PipelineSchedule::kAsync);
  CHECK(options.planning.activations == ravnest::config::WireCodec::kBf16);
  CHECK(options.planning.gradients == ravnest::config::WireCodec::kBf16);

  ClusterizeFlags schedule;
  schedule.schedule = "zigzag";
  CHECK(refusal(schedule) ==
        "ravnest clusterize: --schedule must be gpipe, 1f1b or async, got \"zigzag\"");
  ClusterizeFlags codec;
  codec.compression = "fp8";
  CHECK(refusal(codec) ==
        "ravnest clusterize: --compression must be none, fp16, bf16 or int8, got \"fp8\"");
  ClusterizeFlags ps_schedule;
  ps_schedule.mode = "ps";
  ps_schedule.schedule = "gpipe";
  CHECK(refusal(ps_schedule) ==
        "ravnest clusterize: --schedule and --compression plan pipelines, not --mode ps");

  ClusterizeOptions no_micro;
  no_micro.planning.micro_batches = 0;
  CHECK(refusal({}, no_micro) == "ravnest clusterize: --micro-batches must be at least 1");
  ClusterizeOptions negative;
  negative.planning.max_in_flight = -1;
  CHECK(refusal({}, negative) == "ravnest clusterize: --max-in-flight must be at least 0");
  ClusterizeOptions in_flight;
  in_flight.planning.max_in_flight = 2;
  CHECK(refusal({}, in_flight) == "ravnest clusterize: --max-in-flight needs --schedule async");
  ClusterizeFlags gpipe;
  gpipe.schedule = "gpipe";
  CHECK(refusal(gpipe, in_flight) == "ravnest clusterize: --max-in-flight needs --schedule async");
}

TEST_CASE("clusterize flags: a refusal leaves the options as they were") {
  ClusterizeOptions options;
  options.planning.max_in_flight = 2;  // needs async, which the bad compression never sets
  ClusterizeFlags flags;
  flags.mode = "pipeline";
  flags.schedule = "async";
  flags.compression = "fp8";
  CHECK_FALSE(refusal(flags, options).empty());
  CHECK(options.mode == PlanMode::kPipeline);
  CHECK(options.planning.schedule != ravnest::config::PipelineSchedule::kAsync);
}
