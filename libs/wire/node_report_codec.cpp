#include "libs/wire/node_report_codec.h"

namespace ravnest::wire {

namespace {

schema::EventKind to_schema(EventKind kind) {
  switch (kind) {
    case EventKind::kStep: return schema::EventKind::STEP;
    case EventKind::kValidation: return schema::EventKind::VALIDATION;
    case EventKind::kFinished: return schema::EventKind::FINISHED;
    case EventKind::kFailed: return schema::EventKind::FAILED;
    case EventKind::kWarning: return schema::EventKind::WARNING;
    case EventKind::kStopping: return schema::EventKind::STOPPING;
  }
  return schema::EventKind::STEP;
}

EventKind from_schema(schema::EventKind kind) {
  switch (kind) {
    case schema::EventKind::STEP: return EventKind::kStep;
    case schema::EventKind::VALIDATION: return EventKind::kValidation;
    case schema::EventKind::FINISHED: return EventKind::kFinished;
    case schema::EventKind::FAILED: return EventKind::kFailed;
    case schema::EventKind::WARNING: return EventKind::kWarning;
    case schema::EventKind::STOPPING: return EventKind::kStopping;
  }
  throw WireError("unknown event kind");
}

schema::NodeState to_schema(NodeState state) {
  switch (state) {
    case NodeState::kIdle: return schema::NodeState::IDLE;
    case NodeState::kReady: return schema::NodeState::READY;
    case NodeState::kTraining: return schema::NodeState::TRAINING;
    case NodeState::kFinished: return schema::NodeState::FINISHED;
    case NodeState::kFailed: return schema::NodeState::FAILED;
  }
  return schema::NodeState::IDLE;
}

NodeState from_schema(schema::NodeState state) {
  switch (state) {
    case schema::NodeState::IDLE: return NodeState::kIdle;
    case schema::NodeState::READY: return NodeState::kReady;
    case schema::NodeState::TRAINING: return NodeState::kTraining;
    case schema::NodeState::FINISHED: return NodeState::kFinished;
    case schema::NodeState::FAILED: return NodeState::kFailed;
  }
  throw WireError("unknown node state");
}

}  // namespace

const char* state_name(NodeState state) {
  switch (state) {
    case NodeState::kIdle: return "idle";
    case NodeState::kReady: return "ready";
    case NodeState::kTraining: return "training";
    case NodeState::kFinished: return "finished";
    case NodeState::kFailed: return "failed";
  }
  return "unknown";
}

void encode_event(const NodeEvent& event, schema::ProgressEvent::Builder out) {
  out.setKind(to_schema(event.event.kind));
  out.setNodeId(event.node_id);
  out.setCluster(event.cluster);
  out.setEpoch(event.event.epoch);
  out.setStep(event.event.step);
  out.setLoss(event.event.loss);
  out.setAccuracy(event.event.accuracy);
  out.setSamples(event.event.samples);
  out.setLr(event.event.lr);
  out.setMessage(event.event.message);
}

NodeEvent decode_event(schema::ProgressEvent::Reader event) {
  NodeEvent out;
  out.node_id = event.getNodeId();
  out.cluster = event.getCluster();
  out.event.kind = from_schema(event.getKind());
  out.event.epoch = event.getEpoch();
  out.event.step = event.getStep();
  out.event.loss = event.getLoss();
  out.event.accuracy = event.getAccuracy();
  out.event.samples = event.getSamples();
  // An older node does not send it (0 then): only a step event's lr means anything.
  out.event.lr = event.getLr();
  out.event.message = event.getMessage();
  return out;
}

namespace {

void encode_traffic(const TrafficCount& count, schema::TrafficCount::Builder out) {
  out.setBytesSent(count.bytes_sent);
  out.setBytesReceived(count.bytes_received);
  out.setMessagesSent(count.messages_sent);
  out.setMessagesReceived(count.messages_received);
}

TrafficCount decode_traffic(schema::TrafficCount::Reader count) {
  TrafficCount out;
  out.bytes_sent = count.getBytesSent();
  out.bytes_received = count.getBytesReceived();
  out.messages_sent = count.getMessagesSent();
  out.messages_received = count.getMessagesReceived();
  return out;
}

}  // namespace

const char* traffic_kind_name(TrafficKind kind) {
  switch (kind) {
    case TrafficKind::kActivations: return "activations";
    case TrafficKind::kGradients: return "gradients";
    case TrafficKind::kRings: return "rings";
    case TrafficKind::kWeights: return "weights";
    case TrafficKind::kOther: return "other";
  }
  return "?";
}

void encode_status(const NodeStatusData& status, schema::NodeStatus::Builder out) {
  out.setNode(status.node);
  out.setHasStage(status.has_stage);
  out.setNodeId(status.node_id);
  out.setCluster(status.cluster);
  out.setRole(status.role);
  out.setStageSha256(status.stage_sha256);
  out.setStageProblem(status.stage_problem);
  out.setJobId(status.job_id);
  out.setState(to_schema(status.state));
  out.setEpoch(status.epoch);
  out.setStep(status.updates);
  out.setBatches(status.batches);
  out.setTotalBatches(status.total_batches);
  out.setLastLoss(status.last_loss);
  out.setSamplesPerSecond(status.samples_per_second);
  out.setBusySeconds(status.busy_seconds);
  out.setRunningSeconds(status.running_seconds);
  out.setResidentBytes(status.resident_bytes);
  out.setMemoryLimitBytes(status.memory_limit_bytes);
  out.setMemoryLimitSource(status.memory_limit_source);
  out.setMemoryBaselineBytes(status.memory_baseline_bytes);
  out.setMemoryUsedBytes(status.memory_used_bytes);
  out.setMemoryPeakBytes(status.memory_peak_bytes);
  out.setError(status.error);
  encode_traffic(status.traffic[TrafficKind::kActivations], out.initActivationTraffic());
  encode_traffic(status.traffic[TrafficKind::kGradients], out.initGradientTraffic());
  encode_traffic(status.traffic[TrafficKind::kRings], out.initRingTraffic());
  encode_traffic(status.traffic[TrafficKind::kOther], out.initOtherTraffic());
  encode_traffic(status.traffic[TrafficKind::kWeights], out.initWeightTraffic());
}

NodeStatusData decode_status(schema::NodeStatus::Reader status) {
  NodeStatusData out;
  out.node = status.getNode();
  out.has_stage = status.getHasStage();
  out.node_id = status.getNodeId();
  out.cluster = status.getCluster();
  out.role = status.getRole();
  out.stage_sha256 = status.getStageSha256();
  out.stage_problem = status.getStageProblem();
  out.job_id = status.getJobId();
  out.state = from_schema(status.getState());
  out.epoch = status.getEpoch();
  out.updates = status.getStep();
  out.batches = status.getBatches();
  out.total_batches = status.getTotalBatches();
  out.last_loss = status.getLastLoss();
  out.samples_per_second = status.getSamplesPerSecond();
  out.busy_seconds = status.getBusySeconds();
  out.running_seconds = status.getRunningSeconds();
  out.resident_bytes = status.getResidentBytes();
  out.memory_limit_bytes = status.getMemoryLimitBytes();
  out.memory_limit_source = status.getMemoryLimitSource();
  out.memory_baseline_bytes = status.getMemoryBaselineBytes();
  out.memory_used_bytes = status.getMemoryUsedBytes();
  out.memory_peak_bytes = status.getMemoryPeakBytes();
  out.error = status.getError();
  out.traffic[TrafficKind::kActivations] = decode_traffic(status.getActivationTraffic());
  out.traffic[TrafficKind::kGradients] = decode_traffic(status.getGradientTraffic());
  out.traffic[TrafficKind::kRings] = decode_traffic(status.getRingTraffic());
  out.traffic[TrafficKind::kOther] = decode_traffic(status.getOtherTraffic());
  out.traffic[TrafficKind::kWeights] = decode_traffic(status.getWeightTraffic());
  return out;
}

}  // namespace ravnest::wire
