// EpochOrders: a job's explicit sample order for every epoch ([data] order, docs/job-file.md),
// in place of the seeded permutation of BatchOrder. The Python package writes it from the user's
// shuffling DataLoader so that every epoch's batches are the ones the user's own loop would draw.
//
// The file is written by torch.save: an integer tensor [epochs, n], or a list (or tuple) of 1-D
// integer tensors, one per epoch; row e is epoch e's order of the n training samples. Read by
// the requester at job start (checked against the training data) and by the root, which checks
// it again on the file it was shipped. Errors: std::runtime_error, one line starting
// "data.order: PATH: " (wrong shape, an index out of range, a repeated index, fewer rows than
// epochs). Pure apart from reading the file; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::data {

// Every row of the file at `path` (more rows than `epochs` are kept, unused), each a permutation
// of 0..dataset_size-1; at least `epochs` rows.
std::vector<std::vector<int64_t>> read_epoch_orders(const std::string& path, int64_t dataset_size,
                                                    int64_t epochs);

// Data parallelism: cluster `shard` of `shards` takes, of each epoch's order, the contiguous part
// [shard * per, (shard + 1) * per) with per = n / shards (the remainder is left out, so every
// cluster has as many batches), as shard_indices deals its permutation. Throws
// std::invalid_argument when per is 0 or shard is out of range.
std::vector<std::vector<int64_t>> cluster_part(const std::vector<std::vector<int64_t>>& orders,
                                               int shards, int shard);

}  // namespace ravnest::data
