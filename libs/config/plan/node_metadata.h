// NodeMetadata: what one provider node needs to know to play its part in a plan, written by
// `ravnest clusterize` as nodes/node_<id>.json and read by ravnestd and `--verify`.
// The format is documented in docs/node-metadata.md; from it alone a program can chain the
// stages: the root takes the model inputs in order, every other stage input names the node and
// output index it comes from, and the leaf returns the model's own output.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ravnest::config {

inline constexpr const char* kNodeMetadataFormat = "ravnest.node/1";

// kRootLeaf: a one-node cluster. kServer, kWorker, kEvaluator: the roles of a parameter-server
// plan (docs/parameter-server.md); a worker is a one-node cluster whose updates the servers make.
enum class Role { kRoot, kStem, kLeaf, kRootLeaf, kServer, kWorker, kEvaluator };
// "root", "stem", "leaf", "root+leaf", "server", "worker", "evaluator"
std::string role_name(Role role);
Role role_from_name(const std::string& name);  // throws ConfigError

// "node_<id>": a node's name in logs, messages, file names and NodeMetadata::name; spelled here.
std::string node_name(int id);

// One input of the stage's forward(self, inputs...), in order.
struct StageInput {
  std::string value;             // the value's name in the original graph (unique there)
  std::string type;              // TorchScript type: "Tensor", "int", "float", "bool", "int[]", ...
  // Exactly one of the two sources:
  std::optional<int> model_input;  // root only: index into the model's forward arguments
  std::optional<int> from_node;    // node id of the producer in the same cluster
  int from_output = -1;            // index into the producer's output tuple
};

// One element of the tuple a non-leaf stage returns.
struct StageOutput {
  std::string value;
  std::string type;
  std::vector<int> to_nodes;  // consumers, in pipeline order; gradients come back from them
};

// Parameters averaged across clusters: one ring per group of parameters held by the same
// nodes, one member per cluster, in cluster order. A node knows the ring's size, its own place
// and its two neighbours (next and previous, cyclically): what the ring all-reduce needs, and
// bounded whatever the number of clusters (a plan of 10,000 clusters would otherwise list
// 10,000 members in every node's file). plan.json lists every ring's members in full.
struct RingPeer {
  int node = 0;
  int cluster = 0;
  std::string address;
};
struct RingMembership {
  int id = 0;
  std::vector<std::string> parameters;  // state-dict names, in the stage's order
  int size = 1;                         // members (one per cluster), this node included
  int position = 0;                     // this node's index among them
  RingPeer next;                        // the member at position + 1 (cyclic)
  RingPeer prev;                        // the member at position - 1 (cyclic)
};

// A parameter-server plan, the same in every node's metadata: the servers, each with its shard of
// the model's state (state-dict names of parameters and buffers, in the model's order), the
// workers (worker i trains on shard i of the data: its node's `cluster`), and the evaluator.
struct PsPeer {
  int node = 0;
  std::string address;
};
struct PsServer {
  int node = 0;
  std::string address;
  std::vector<std::string> tensors;
};
// Hybrid plans: an embedding table a server holds whole; trainers look up the rows a batch uses
// (docs/parameter-server.md#hybrid). The trainers' stages hold an empty placeholder under
// `weight`, replaced before each forward by the rows looked up.
struct SparseTable {
  std::string weight;          // state-dict name, e.g. "emb.weight"
  int server = 0;              // the node holding it (one of `servers`, with `weight` in its shard)
  int index_input = 0;         // the model input holding its indices
  std::vector<int64_t> shape;  // the whole table's, [rows, dim...]
};
struct ParameterServerPlan {
  std::vector<PsServer> servers;
  std::vector<PsPeer> workers;
  std::optional<PsPeer> evaluator;
  // Hybrid plans only: the servers hold these tables, the workers (trainers) train the rest
  // data-parallel over rings. Empty for a plain parameter-server plan.
  std::vector<SparseTable> sparse_tables;
  bool hybrid() const { return !sparse_tables.empty(); }
  bool empty() const { return servers.empty(); }
};

// Planner estimates, for the clusterize table and for humans.
struct StageEstimates {
  int64_t parameter_count = 0;
  int64_t parameter_bytes = 0;          // parameters and buffers
  double memory_bytes = 0;              // training memory, see docs/planner.md
  double step_seconds = 0;              // forward+backward of the profiled batch, plus sending
  double forward_bytes_per_sample = 0;  // activations sent downstream per sample
  // Memory as measured (docs/planner.md#memory): the peak resident bytes a daemon training this
  // stage reaches, its own baseline included, and that baseline (an idle daemon's resident
  // bytes). 0 when not measured (plans written before measuring, parameter-server plans). A
  // daemon refuses at push a stage whose peak_memory_bytes - daemon_baseline_bytes plus its own
  // baseline exceeds its memory budget. node_ram_bytes: the RAM the pool declared for the node.
  int64_t peak_memory_bytes = 0;
  int64_t daemon_baseline_bytes = 0;
  int64_t node_ram_bytes = 0;
  // Planned for a GPU (clusterize --device cuda): the card's memory at the stage's peak, the
  // CUDA context included (device_peak_memory_bytes), and the GPU memory the pool declared for
  // the node; a CUDA daemon refuses at push a stage whose device peak exceeds its card. 0 on the CPU.
  int64_t device_peak_memory_bytes = 0;
  int64_t node_gpu_memory_bytes = 0;
};

struct NodeMetadata {
  std::string format = kNodeMetadataFormat;
  int node_id = 0;
  std::string name;          // "node_<id>"
  std::string address;       // "host:port"
  int cluster = 0;
  int position = 0;          // index in the cluster's pipeline, 0 = root
  int cluster_size = 1;
  int cluster_count = 1;     // clusters in the plan: the root trains on shard `cluster` of them
  Role role = Role::kRootLeaf;
  std::string stage_file;    // relative to the plan directory, e.g. "stages/node_3.pt"
  std::string stage_sha256;  // of the stage file's bytes
  std::vector<StageInput> inputs;
  std::vector<StageOutput> outputs;  // empty for the leaf
  bool returns_model_output = false; // true for the leaf: forward returns what the model returns
  std::vector<int> pipeline;             // the cluster's node ids, root first
  std::map<int, std::string> addresses;  // every node of the cluster: id -> "host:port"
  std::vector<int> forward_neighbours;   // nodes this one sends activations to
  std::vector<int> backward_neighbours;  // nodes this one sends gradients to (its producers)
  std::vector<std::string> parameters;   // state-dict names of parameters and buffers held
  // Names held by more than one node of this cluster (a module used in two stages, or tied
  // weights); their gradients must be summed across the holders. Key: name, value: holders.
  std::map<std::string, std::vector<int>> shared_parameters;
  // Tied weights: a name here is the same tensor as the name it maps to (the first name of that
  // tensor in the model's state dict); absent names are their own.
  std::map<std::string, std::string> tied_parameters;
  // The cluster's nodes whose forward draws random numbers in training (dropout...), in pipeline
  // order. With two or more, each passes the generator's state to the next one with every
  // micro-batch, and the last back to the first for the next micro-batch, so that the stream
  // runs as in one process; with one or none, every node just seeds with the job's seed.
  std::vector<int> random_nodes;
  std::vector<RingMembership> rings;
  // The certificates pinned in the pool file (its "tls_fingerprint"s) of every node of the plan
  // that has one: "host:port" -> SHA-256 (tls_fingerprint.h). A connection to such an address
  // requires that certificate (docs/security.md). Absent in the file when empty.
  std::map<std::string, std::string> tls_fingerprints;
  // Parameter-server plans only (empty otherwise; absent in the file).
  ParameterServerPlan parameter_server;
  StageEstimates estimates;
};

// Every node this one exchanges micro-batches or parameter-server messages with, and itself:
// node id -> "host:port" (its cluster's addresses and the parameter-server plan's nodes).
std::map<int, std::string> peer_addresses(const NodeMetadata& metadata);

std::string to_json(const NodeMetadata& metadata);  // pretty, stable key order
NodeMetadata node_metadata_from_json(const std::string& text, const std::string& origin);
NodeMetadata load_node_metadata(const std::string& path);

}  // namespace ravnest::config
