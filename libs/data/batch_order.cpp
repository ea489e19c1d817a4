#include "libs/data/batch_order.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace ravnest::data {

BatchOrder::BatchOrder(int64_t dataset_size, int64_t batch_size, int64_t seed, bool shuffle,
                       bool drop_last)
    : dataset_size_(dataset_size), batch_size_(batch_size), seed_(seed), shuffle_(shuffle),
      drop_last_(drop_last) {
  if (dataset_size < 0) throw std::invalid_argument("BatchOrder: negative dataset size");
  if (batch_size < 1) throw std::invalid_argument("BatchOrder: batch_size must be >= 1");
  // Without (dataset_size + batch_size - 1): batch_size = 2^63 - 1 overflowed it, and the
  // error then blamed drop_last.
  batches_per_epoch_ = dataset_size / batch_size + (!drop_last && dataset_size % batch_size != 0);
  if (batches_per_epoch_ == 0) {
    throw std::invalid_argument(
        dataset_size == 0 ? std::string("the dataset is empty")
                          : "the dataset has " + std::to_string(dataset_size) +
                                " samples, fewer than batch_size " + std::to_string(batch_size) +
                                ", and drop_last leaves no batch");
  }
}

BatchOrder::BatchOrder(std::vector<std::vector<int64_t>> orders, int64_t batch_size, bool drop_last)
    : BatchOrder(orders.empty() ? 0 : static_cast<int64_t>(orders[0].size()), batch_size, 0,
                 /*shuffle=*/false, drop_last) {
  for (const auto& order : orders) {
    if (order.size() != orders[0].size()) {
      throw std::invalid_argument("BatchOrder: the epochs' orders differ in size");
    }
  }
  orders_ = std::move(orders);
}

uint64_t BatchOrder::epoch_seed(int64_t seed, int64_t epoch) {
  uint64_t z = static_cast<uint64_t>(seed) + static_cast<uint64_t>(epoch + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 1;
}

std::vector<int64_t> BatchOrder::epoch_order(int64_t epoch) const {
  if (!orders_.empty()) {
    if (epoch < 0 || epoch >= static_cast<int64_t>(orders_.size())) {
      throw std::out_of_range("data.order holds " + std::to_string(orders_.size()) +
                              " epoch orders; epoch " + std::to_string(epoch) + " has none");
    }
    return orders_[static_cast<size_t>(epoch)];
  }
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  if (!shuffle_) {
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<size_t>(i)] = i;
    return order;
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(epoch_seed(seed_, epoch));
  at::Tensor perm = at::randperm(dataset_size_, generator, at::TensorOptions().dtype(at::kLong));
  const int64_t* data = perm.data_ptr<int64_t>();
  std::copy(data, data + dataset_size_, order.begin());
  return order;
}

std::vector<std::vector<int64_t>> BatchOrder::epoch(int64_t epoch) const {
  const std::vector<int64_t> order = epoch_order(epoch);
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(static_cast<size_t>(batches_per_epoch_));
  for (int64_t b = 0; b < batches_per_epoch_; ++b) {
    const int64_t begin = b * batch_size_;
    const int64_t end = begin + std::min(batch_size_, dataset_size_ - begin);  // no overflow
    batches.emplace_back(order.begin() + begin, order.begin() + end);
  }
  return batches;
}

std::vector<std::pair<int64_t, int64_t>> split_micro_batches(int64_t batch_samples, int micro_batches) {
  if (micro_batches < 1) throw std::invalid_argument("split_micro_batches: micro_batches must be >= 1");
  std::vector<std::pair<int64_t, int64_t>> parts;
  if (batch_samples <= 0) return parts;
  const int64_t count = std::min<int64_t>(micro_batches, batch_samples);
  const int64_t base = batch_samples / count;
  const int64_t longer = batch_samples % count;  // the first `longer` parts get one more
  int64_t start = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = base + (i < longer ? 1 : 0);
    parts.emplace_back(start, start + length);
    start += length;
  }
  return parts;
}

}  // namespace ravnest::data

namespace ravnest::data {

std::vector<int64_t> shard_indices(int64_t dataset_size, int shards, int shard, int64_t seed) {
  if (shards < 1 || shard < 0 || shard >= shards) {
    throw std::invalid_argument("shard_indices: shard " + std::to_string(shard) + " of " +
                                std::to_string(shards));
  }
  const int64_t per_shard = dataset_size / shards;
  if (per_shard == 0) {
    throw std::invalid_argument("the dataset has " + std::to_string(dataset_size) +
                                " samples, fewer than the " + std::to_string(shards) + " clusters");
  }
  // Epoch -2: a seed of its own, apart from every epoch's order (epochs count from 0).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(BatchOrder::epoch_seed(seed, -2));
  at::Tensor perm = at::randperm(dataset_size, generator, at::TensorOptions().dtype(at::kLong));
  const int64_t* data = perm.data_ptr<int64_t>() + shard * per_shard;
  return std::vector<int64_t>(data, data + per_shard);
}

}  // namespace ravnest::data
