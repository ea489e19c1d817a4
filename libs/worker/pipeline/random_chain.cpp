#include "libs/worker/pipeline/random_chain.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "libs/training/random_state.h"

namespace ravnest::worker {

namespace {

bool in_chain(const config::NodeMetadata& node) {
  const auto& chain = node.random_nodes;
  return chain.size() >= 2 && std::find(chain.begin(), chain.end(), node.node_id) != chain.end();
}

}  // namespace

RandomChain::RandomChain(const config::NodeMetadata& node, c10::Device device)
    : node_(node), device_(device), member_(in_chain(node)) {}

void RandomChain::start() {
  if (member_ && node_.random_nodes.front() == node_.node_id) {
    waiting_[{0, 0}] = training::random_state(device_);
  }
}

void RandomChain::take(const TransferMessage& message) {
  if (message.values.empty() || !message.values[0].second.isTensor() ||
      message.values[0].second.toTensor().scalar_type() != at::kByte || message.batch.validate) {
    throw std::runtime_error("a random state without a byte tensor from node " +
                             std::to_string(message.from_node));
  }
  waiting_[{message.batch.step, message.batch.index}] = message.values[0].second.toTensor();
}

bool RandomChain::ready(const MicroBatchTag& batch) const {
  return !member_ || batch.validate || waiting_.count({batch.step, batch.index});
}

void RandomChain::enter(const MicroBatchTag& batch) {
  auto state = waiting_.find({batch.step, batch.index});
  training::set_random_state(device_, state->second);
  waiting_.erase(state);
}

std::optional<std::pair<int, MicroBatchTag>> RandomChain::next(const MicroBatchTag& batch) const {
  const auto& chain = node_.random_nodes;
  auto self = std::find(chain.begin(), chain.end(), node_.node_id);
  MicroBatchTag next = batch;
  if (self + 1 != chain.end()) return std::make_pair(*(self + 1), next);
  if (batch.last && batch.index + 1 == batch.count) return std::nullopt;  // the stream ends here
  if (batch.index + 1 < batch.count) {
    ++next.index;
  } else {
    ++next.step;
    next.index = 0;
  }
  return std::make_pair(chain.front(), next);
}

at::Tensor RandomChain::waiting(uint64_t step, uint32_t index) const {
  auto it = waiting_.find({step, index});
  return it != waiting_.end() ? it->second : at::Tensor();
}

void RandomChain::set_waiting(uint64_t step, uint32_t index, at::Tensor state) {
  waiting_[{step, index}] = std::move(state);
}

}  // namespace ravnest::worker
