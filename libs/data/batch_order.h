// BatchOrder: which samples form which batch, reproducibly, so that every node of a cluster
// (and the single-process reference trainer) sees the same batches in the same order.
//
// Epoch e's order is a permutation drawn by torch.randperm(n) from a CPU generator seeded with
// epoch_seed(seed, e) when shuffling, else 0..n-1. In Python:
//     g = torch.Generator(); g.manual_seed(epoch_seed(seed, e)); torch.randperm(n, generator=g)
// The order is cut into batches of batch_size; the last one is partial unless drop_last.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ravnest::data {

class BatchOrder {
 public:
  // Throws std::invalid_argument when dataset_size < 0, batch_size < 1, or no batch at all
  // results (an empty dataset, or drop_last with fewer samples than batch_size).
  BatchOrder(int64_t dataset_size, int64_t batch_size, int64_t seed, bool shuffle, bool drop_last);
  // Explicit orders ([data] order, epoch_orders.h): epoch e's order is orders[e], all of one
  // size (the dataset's, or a cluster's part); an epoch beyond them throws std::out_of_range.
  BatchOrder(std::vector<std::vector<int64_t>> orders, int64_t batch_size, bool drop_last);

  int64_t dataset_size() const { return dataset_size_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The sample order of epoch `epoch` (0-based), all dataset_size indices.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // That order cut into batches: batches_per_epoch lists of sample indices.
  std::vector<std::vector<int64_t>> epoch(int64_t epoch) const;

  // splitmix64 of seed + (epoch + 1) * 0x9E3779B97F4A7C15 (mod 2^64), shifted right by one so
  // that it is a non-negative int64 (Python's manual_seed takes it as is):
  //   z = (seed + (epoch + 1) * 0x9E3779B97F4A7C15) mod 2^64
  //   z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2^64
  //   z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2^64
  //   return (z ^ (z >> 31)) >> 1
  static uint64_t epoch_seed(int64_t seed, int64_t epoch);

 private:
  int64_t dataset_size_;
  int64_t batch_size_;
  int64_t seed_;
  bool shuffle_;
  bool drop_last_;
  int64_t batches_per_epoch_;
  std::vector<std::vector<int64_t>> orders_;  // explicit; empty: the seeded rule
};

// A batch of `batch_samples` samples cut into `micro_batches` contiguous parts as
// torch.tensor_split does: half-open [begin, end) ranges of the batch's samples, in order, sizes
// differing by at most one, the larger ones first; min(micro_batches, batch_samples) parts
// (none for an empty batch). E.g. (10, 4) -> [0,3) [3,6) [6,8) [8,10).
std::vector<std::pair<int64_t, int64_t>> split_micro_batches(int64_t batch_samples, int micro_batches);

// Data parallelism: the samples of cluster `shard` of `shards`. The dataset is permuted with a
// generator seeded from `seed` and dealt into equal contiguous shards; the remainder (fewer
// samples than shards) is left out, so every cluster has as many batches as the others.
std::vector<int64_t> shard_indices(int64_t dataset_size, int shards, int shard, int64_t seed);

}  // namespace ravnest::data
