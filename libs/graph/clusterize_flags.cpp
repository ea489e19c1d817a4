#include "libs/graph/clusterize_flags.h"

#include <stdexcept>

#include "libs/config/job/compression_spec.h"
#include "libs/config/job/job_spec.h"

namespace ravnest::graph {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::runtime_error("ravnest clusterize: " + what);
}

}  // namespace

void apply_clusterize_flags(const ClusterizeFlags& flags, ClusterizeOptions& options) {
  ClusterizeOptions out = options;
  if (flags.mode != "pipeline" && flags.mode != "ps" && flags.mode != "hybrid") {
    refuse("--mode must be pipeline, ps or hybrid, got \"" + flags.mode + "\"");
  }
  if (flags.mode == "ps") {
    out.mode = PlanMode::kParameterServer;
  } else if (flags.mode == "hybrid") {
    out.mode = PlanMode::kHybrid;
  } else {
    out.mode = PlanMode::kPipeline;
    if (flags.servers_given || flags.evaluator_given) {
      refuse("--servers and --evaluator need --mode ps or hybrid");
    }
  }
  if (flags.on_server_given && flags.mode != "hybrid") refuse("--on-server needs --mode hybrid");
  if (!flags.schedule.empty()) {
    config::PipelineSchedule schedule;
    if (!config::parse_pipeline_schedule(flags.schedule, schedule)) {
      refuse("--schedule must be gpipe, 1f1b or async, got \"" + flags.schedule + "\"");
    }
    out.planning.schedule = schedule;
  }
  if (!flags.compression.empty()) {
    config::WireCodec codec;
    if (!config::parse_wire_codec(flags.compression, codec)) {
      refuse("--compression must be none, fp16, bf16 or int8, got \"" + flags.compression + "\"");
    }
    out.planning.activations = out.planning.gradients = codec;
  }
  if ((!flags.schedule.empty() || !flags.compression.empty()) && flags.mode != "pipeline") {
    refuse("--schedule and --compression plan pipelines, not --mode " + flags.mode);
  }
  if ((out.planning.stages != 0 || out.planning.clusters != 0) && flags.mode != "pipeline") {
    refuse("--stages and --clusters lay out pipelines, not --mode " + flags.mode);
  }
  if (out.planning.stages < 0 || out.planning.clusters < 0) {
    refuse("--stages and --clusters must be at least 1");
  }
  if (out.planning.micro_batches < 1) refuse("--micro-batches must be at least 1");
  if (out.planning.max_in_flight < 0) refuse("--max-in-flight must be at least 0");
  if (out.planning.max_in_flight > 0 &&
      out.planning.schedule != config::PipelineSchedule::kAsync) {
    refuse("--max-in-flight needs --schedule async");
  }
  options = std::move(out);
}

}  // namespace ravnest::graph
