// Sparse tables: the embedding submodules a hybrid plan puts on servers
// (`clusterize --mode hybrid --on-server NAME`), found and checked in the model's graph.
//
// A table can live on a server when trainers can run the model on just the rows a batch uses:
// the submodule is an nn.Embedding or nn.EmbeddingBag (no padding_idx, no max_norm, which index
// or write the whole table), its weight is read only by embedding lookups (and dtype/shape
// queries), and the lookups' indices come from one model input that nothing else reads but shape
// queries and element moves (reshape, view, flatten...). A trainer then replaces that input by
// the rows' positions among the sorted unique ids, and the weight by those rows: the same
// outputs, and the rows' gradients are the table's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libs/graph/model_graph.h"

namespace ravnest::graph {

struct SparseTableUse {
  std::string submodule;        // "emb"
  std::string weight;           // "emb.weight"
  int index_input = 0;          // the model input holding its indices
  std::vector<int64_t> shape;   // the table's
  int64_t bytes = 0;
};

// In the order given. Throws std::invalid_argument with one line naming `--on-server NAME` and
// the reason.
std::vector<SparseTableUse> find_sparse_tables(ModelGraph& model,
                                               const std::vector<std::string>& submodules);

}  // namespace ravnest::graph
