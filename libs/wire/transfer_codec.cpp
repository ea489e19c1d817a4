#include "libs/wire/transfer_codec.h"

#include <utility>

namespace ravnest::wire {

namespace {

schema::TransferKind to_schema(TransferKind kind) {
  switch (kind) {
    case TransferKind::kActivations: return schema::TransferKind::ACTIVATIONS;
    case TransferKind::kGradients: return schema::TransferKind::GRADIENTS;
    case TransferKind::kLabels: return schema::TransferKind::LABELS;
    case TransferKind::kRandomState: return schema::TransferKind::RANDOM_STATE;
    case TransferKind::kPsGradients: return schema::TransferKind::PS_GRADIENTS;
    case TransferKind::kPsWeights: return schema::TransferKind::PS_WEIGHTS;
    case TransferKind::kPsLookup: return schema::TransferKind::PS_LOOKUP;
    case TransferKind::kPsRows: return schema::TransferKind::PS_ROWS;
    case TransferKind::kPredicted: return schema::TransferKind::PREDICTED;
  }
  return schema::TransferKind::ACTIVATIONS;
}

TransferKind from_schema(schema::TransferKind kind) {
  switch (kind) {
    case schema::TransferKind::ACTIVATIONS: return TransferKind::kActivations;
    case schema::TransferKind::GRADIENTS: return TransferKind::kGradients;
    case schema::TransferKind::LABELS: return TransferKind::kLabels;
    case schema::TransferKind::RANDOM_STATE: return TransferKind::kRandomState;
    case schema::TransferKind::PS_GRADIENTS: return TransferKind::kPsGradients;
    case schema::TransferKind::PS_WEIGHTS: return TransferKind::kPsWeights;
    case schema::TransferKind::PS_LOOKUP: return TransferKind::kPsLookup;
    case schema::TransferKind::PS_ROWS: return TransferKind::kPsRows;
    case schema::TransferKind::PREDICTED: return TransferKind::kPredicted;
  }
  throw WireError("unknown transfer kind");
}

}  // namespace

void encode_batch(const MicroBatchTag& batch, schema::MicroBatch::Builder out) {
  out.setJobId(batch.job_id);
  out.setPhase(batch.validate ? schema::Phase::VALIDATE : schema::Phase::TRAIN);
  out.setStep(batch.step);
  out.setIndex(batch.index);
  out.setCount(batch.count);
  out.setSamples(batch.samples);
  out.setBatchSamples(batch.batch_samples);
  out.setEpoch(batch.epoch);
  out.setLast(batch.last);
  out.setVersion(batch.version);
  out.setBatchCounted(batch.batch_counted);
}

MicroBatchTag decode_batch(schema::MicroBatch::Reader batch) {
  MicroBatchTag out;
  out.job_id = batch.getJobId();
  out.validate = batch.getPhase() == schema::Phase::VALIDATE;
  out.step = batch.getStep();
  out.index = batch.getIndex();
  out.count = batch.getCount();
  out.samples = batch.getSamples();
  out.batch_samples = batch.getBatchSamples();
  out.epoch = batch.getEpoch();
  out.last = batch.getLast();
  out.version = batch.getVersion();
  out.batch_counted = batch.getBatchCounted();
  return out;
}

EncodedTensors encode_transfer(TransferMessage&& message, schema::Transfer::Builder out,
                               size_t inline_limit) {
  out.setKind(to_schema(message.kind));
  out.setFromNode(message.from_node);
  encode_batch(message.batch, out.initBatch());
  std::vector<IndexedIValue> values;
  for (auto& [index, value] : message.values) values.push_back({index, std::move(value)});
  return encode_values(out, values, inline_limit, message.codec);
}

TransferMessage decode_transfer(schema::Transfer::Reader transfer,
                                std::vector<at::Tensor>& pending, const DecodeLimits& limits,
                                std::vector<std::function<void()>>* after_stream) {
  TransferMessage out;
  out.kind = from_schema(transfer.getKind());
  out.from_node = transfer.getFromNode();
  out.batch = decode_batch(transfer.getBatch());
  for (auto& item : decode_values(transfer, pending, limits, after_stream)) {
    out.values.emplace_back(item.index, std::move(item.value));
  }
  return out;
}

}  // namespace ravnest::wire
